"""The agent's pull, against the real home server (uvicorn on loopback over a real store):
a local assured put then a pull-confirm, a batch offered again stored once, lifetimes never
lengthened, bad answers refused. What the puller sent is read from ``Network``'s record."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from edgeq import Int32, ManualClock, Message, QueueManager
from edgeq.sync import protocol as p
from edgeq.sync.agent.link import ServerLink
from edgeq.sync.agent.pull import Puller
from tests.sync.conftest import T0, LiveServer, Network


@pytest.fixture
def home_qm(tmp_path: Path, server_clock: ManualClock) -> Iterator[QueueManager]:
    """The server's store, waiting at most 0.1 s for a write lock (so a test can make it busy)."""
    qm = QueueManager(tmp_path / "home.db", name="HOME", clock=server_clock, timeout=0.1)
    qm.define_queue("ORDERS")
    yield qm
    qm.close()


@pytest.fixture
def inbox(device_qm: QueueManager) -> QueueManager:
    device_qm.define_home_server_queue("INBOX", server="HOME")
    return device_qm


def test_pulled_messages_are_stored_here_then_acknowledged(
    make_link: Callable[..., ServerLink], network: Network, home_qm: QueueManager, inbox: QueueManager
) -> None:
    home_qm.define_queue("DEV1.INBOX")  # where the server holds DEV1's INBOX messages
    uids = [str(u) for u in home_qm.put_many("DEV1.INBOX", [Message(b"one", expiry=Int32(60_000)),
                                                             Message(b"two")])]
    puller = Puller(make_link())

    report = puller.pull_once()

    assert (report.ok, report.received, report.acknowledged, report.batches) == (True, 2, 2, 1)
    got = {str(m.uid): m for m in inbox.browse("INBOX")}
    assert sorted(got) == sorted(uids) and got[uids[1]].expiry is None
    assert got[uids[0]].expiry_deadline_ms is not None and got[uids[0]].expiry_deadline_ms <= T0 + 60_000
    (confirm,) = network.bodies(p.PATH_PULL_CONFIRM)
    assert sorted(confirm["uids"]) == sorted(uids) and confirm["queue"] == "INBOX"
    assert home_qm.depth("DEV1.INBOX") == 0  # acknowledged: deleted on the server


def test_a_batch_offered_again_after_a_failed_confirm_is_acknowledged_not_stored_twice(
    make_link: Callable[..., ServerLink], network: Network, home_qm: QueueManager, inbox: QueueManager
) -> None:
    home_qm.define_queue("DEV1.INBOX")
    uid = home_qm.put("DEV1.INBOX", Message(b"once"))
    locker = sqlite3.connect(home_qm.path, isolation_level=None)
    # Another writer holds the server's store when the pull-confirm comes: 503 busy.
    network.before[p.PATH_PULL_CONFIRM] = lambda: locker.execute("BEGIN IMMEDIATE") and None
    puller = Puller(make_link())
    try:
        failed = puller.pull_once()
    finally:
        locker.execute("ROLLBACK")
        locker.close()
    assert failed.error is not None and "503 busy" in failed.error and failed.received == 1
    assert home_qm.depth("DEV1.INBOX") == 1  # still there, locked for the pull

    again = puller.pull_once()

    assert (again.ok, again.received, again.duplicates, again.acknowledged) == (True, 0, 1, 1)
    assert [m.uid for m in inbox.browse("INBOX")] == [uid]
    assert home_qm.depth("DEV1.INBOX") == 0


def test_a_queue_the_server_does_not_hold_fails_alone_with_a_hint_for_the_server(
    make_link: Callable[..., ServerLink], network: Network, home_qm: QueueManager, inbox: QueueManager
) -> None:
    inbox.define_home_server_queue("ALERTS", server="HOME")
    home_qm.define_queue("DEV1.ALERTS")
    home_qm.put("DEV1.ALERTS", Message(b"alert"))

    report = Puller(make_link()).pull_once()  # the server has no DEV1.INBOX: it answers "missing"

    assert not report.ok and report.received == 1 and not report.stopped
    missing, alerts = report.queues["INBOX"], report.queues["ALERTS"]
    assert (missing.direction, missing.code, missing.moved) == ("pull", "no-queue", 0)
    assert missing.error is not None and "HOME has no queue DEV1.INBOX" in missing.error
    assert "edgeq queue define DEV1.INBOX" in missing.error and "on the server" in missing.error
    assert report.error is not None and "DEV1.INBOX" in report.error
    assert (alerts.moved, alerts.error) == (1, None)
    assert network.calls.count(p.PATH_PULL_CONFIRM) == 1  # only ALERTS had anything to acknowledge


def test_a_queue_whose_pull_is_refused_fails_alone(
    make_link: Callable[..., ServerLink], home_qm: QueueManager, inbox: QueueManager
) -> None:
    inbox.define_home_server_queue("A" * 44, server="HOME")  # DEV1.AAAA... is longer than a name may be
    home_qm.define_queue("DEV1.INBOX")
    home_qm.put("DEV1.INBOX", Message(b"for DEV1"))

    report = Puller(make_link()).pull_once()

    assert report.queues["A" * 44].code == "invalid" and report.queues["INBOX"].moved == 1
    assert inbox.depth("INBOX") == 1 and not report.stopped


@pytest.mark.parametrize("held", [["HOME", 1], {"HOME": "one"}])
def test_a_bad_held_map_is_a_bad_answer(
    make_link: Callable[..., ServerLink], server: LiveServer, home_qm: QueueManager, inbox: QueueManager,
    held: object,
) -> None:
    home_qm.define_queue("DEV1.INBOX")
    home_qm.put("DEV1.INBOX", Message(b"offered"))
    server.faults.rewrite_next(p.PATH_PULL, lambda body: {**body, "held": held})
    report = Puller(make_link()).pull_once()
    assert report.error is not None and "'held'" in report.error
    assert server.faults.rewritten == [p.PATH_PULL]
    assert inbox.depth("INBOX") == 0  # nothing of a bad answer is stored

"""The agent's pull, against a scripted server: a local assured put then a pull-confirm,
a batch offered again stored once, lifetimes never lengthened, bad answers refused."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from edgeq.sync import protocol as p
from edgeq.sync.link import ServerLink
from edgeq.sync.pull import Puller

from edgeq import QueueManager

from .conftest import T0
from .fakehome import FakeHome, refusal, results

UIDS = [f"HOME.{T0 * 1000 + i}" for i in (1, 2)]


@pytest.fixture
def inbox(device_qm: QueueManager) -> QueueManager:
    device_qm.define_home_server_queue("INBOX", server="HOME")
    return device_qm


def offer(fake_home: FakeHome, *answers: dict[str, Any]) -> None:
    """The pull answers, in turn (then nothing more)."""
    queue = list(answers)
    fake_home.handlers[p.PATH_PULL] = lambda body: {
        "type": "pull", "queue": body["queue"], "messages": [], "more": False, "held": {}, **(queue.pop(0) if queue else {})}


def test_pulled_messages_are_stored_here_then_acknowledged(
    make_link: Callable[..., ServerLink], fake_home: FakeHome, inbox: QueueManager
) -> None:
    offer(fake_home, {"messages": [{"u": UIDS[0], "d": b"one", "x": 60_000}, {"u": UIDS[1], "d": b"two"}]})
    fake_home.handlers[p.PATH_PULL_CONFIRM] = lambda body: {"type": "pull-confirm",
                                                            "results": results(body["uids"], "confirmed")}
    puller = Puller(make_link())

    report = puller.pull_once()

    assert (report.ok, report.received, report.acknowledged, report.batches) == (True, 2, 2, 1)
    assert puller.last is report
    got = {str(m.uid): m for m in inbox.browse("INBOX")}
    assert sorted(got) == UIDS and got[UIDS[1]].expiry is None
    assert got[UIDS[0]].expiry_deadline_ms is not None and got[UIDS[0]].expiry_deadline_ms <= T0 + 60_000
    (confirm,) = fake_home.bodies(p.PATH_PULL_CONFIRM)
    assert sorted(confirm["uids"]) == UIDS and confirm["queue"] == "INBOX"


def test_a_batch_offered_again_after_a_lost_confirm_is_acknowledged_not_stored_twice(
    make_link: Callable[..., ServerLink], fake_home: FakeHome, inbox: QueueManager
) -> None:
    message = {"u": UIDS[0], "d": b"once"}
    offer(fake_home, {"messages": [message]}, {"messages": [message]})
    confirms = [refusal(503, "busy"), {"type": "pull-confirm", "results": [{"u": UIDS[0], "s": "confirmed"}]}]
    fake_home.handlers[p.PATH_PULL_CONFIRM] = lambda body: confirms.pop(0)
    puller = Puller(make_link())

    failed, again = puller.pull_once(), puller.pull_once()

    assert failed.error is not None and failed.received == 1
    assert (again.ok, again.received, again.duplicates, again.acknowledged) == (True, 0, 1, 1)
    assert [str(m.uid) for m in inbox.browse("INBOX")] == [UIDS[0]]


def test_a_queue_the_server_does_not_hold_pulls_nothing(
    make_link: Callable[..., ServerLink], fake_home: FakeHome, inbox: QueueManager
) -> None:
    offer(fake_home, {"missing": True})
    report = Puller(make_link()).pull_once()
    assert report.ok and report.batches == 0 and p.PATH_PULL_CONFIRM not in fake_home.paths()


@pytest.mark.parametrize("held", [["HOME", 1], {"HOME": "one"}])
def test_a_bad_held_map_is_a_bad_answer(
    make_link: Callable[..., ServerLink], fake_home: FakeHome, inbox: QueueManager, held: object
) -> None:
    offer(fake_home, {"held": held})
    report = Puller(make_link()).pull_once()
    assert report.error is not None and "'held'" in report.error

"""The device's expiry reports, against the real home server (uvicorn on loopback over a
real store that keeps the server journal): sent under the names the server knows, in
batches, trimmed once answered; an answer that does not match trims nothing."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from edgeq import Int32, ManualClock, Message, MessageUID, QueueManager
from edgeq.sync import protocol as p
from edgeq.sync.agent.expiries import ExpiryReporter
from edgeq.sync.agent.link import ServerLink
from edgeq.sync.agent.transport import Unreachable
from tests.sync.conftest import LiveServer, Network


@pytest.fixture
def home_qm(tmp_path: Path, server_clock: ManualClock) -> Iterator[QueueManager]:
    """The server's store, keeping the server journal (where reported expiries go)."""
    qm = QueueManager(tmp_path / "home.db", name="HOME", clock=server_clock, journal="server")
    qm.define_queue("ORDERS")
    yield qm
    qm.close()


def expire(
    qm: QueueManager, clock: ManualClock, queue: str, n: int = 1, *, origin: str | None = None
) -> list[str]:
    """Put ``n`` messages on ``queue`` (with uids made now by ``origin``, if given), then let them expire."""
    uids = [str(qm.put(queue, Message(b"stale", expiry=Int32(100),
                                      uid=MessageUID(origin, clock() * 1000 + i) if origin else None)))
            for i in range(n)]
    clock.advance(100)
    assert qm.sweep_expired() == n
    return uids


def server_expiries(qm: QueueManager) -> list[tuple[str, str]]:
    return [(e.uid, e.queue) for e in qm.journal_since() if e.kind == "expired"]


def test_expiries_go_under_the_servers_queue_names_in_batches_and_are_trimmed(
    make_link: Callable[..., ServerLink], network: Network, server: LiveServer, home_qm: QueueManager,
    device_qm: QueueManager, device_clock: ManualClock, caplog: pytest.LogCaptureFixture,
) -> None:
    device_qm.define_remote_queue("LOCAL", target_qmgr="HOME", target_queue="ORDERS")
    device_qm.define_home_server_queue("INBOX", server="HOME")
    device_qm.define_queue("MISC")
    renamed = expire(device_qm, device_clock, "LOCAL", 2)
    pulled = expire(device_qm, device_clock, "INBOX", origin="HOME")  # as a message pulled from the server
    # not the device's own: the server refuses it
    stray = expire(device_qm, device_clock, "MISC", origin="HOME")

    with caplog.at_level(logging.WARNING, logger="edgeq.sync.agent"):
        sent = ExpiryReporter(make_link(batch_size=2)).report()

    assert sent == 4 and device_qm.journal_since() == []
    batches = [[(e["u"], e["q"]) for e in b["entries"]] for b in network.bodies(p.PATH_EXPIRIES)]
    assert batches == [[(u, "ORDERS") for u in renamed], [(pulled[0], "DEV1.INBOX"), (stray[0], "MISC")]]
    refused = [getattr(r, "uid", None) for r in caplog.records
               if getattr(r, "event", None) == "expiry-refused"]
    assert refused == stray
    assert server_expiries(home_qm) == [*((u, "ORDERS") for u in renamed), (pulled[0], "DEV1.INBOX")]


def test_a_store_that_keeps_no_device_journal_reports_nothing(
    tmp_path: Path, make_link: Callable[..., ServerLink], network: Network, server: LiveServer,
    device_clock: ManualClock,
) -> None:
    with QueueManager(tmp_path / "bare.db", name="DEV1", journal="off", clock=device_clock) as qm:
        qm.define_remote_queue("ORDERS", target_qmgr="HOME")
        expire(qm, device_clock, "ORDERS")
        assert ExpiryReporter(make_link(qm=qm, batch_size=10)).report() == 0
    assert network.calls == [] and server.sessions.all() == []


def test_an_answer_that_does_not_match_trims_nothing(
    make_link: Callable[..., ServerLink], server: LiveServer, home_qm: QueueManager, device_qm: QueueManager,
    device_clock: ManualClock,
) -> None:
    uids = expire(device_qm, device_clock, "ORDERS", 2)
    server.faults.rewrite_next(p.PATH_EXPIRIES, lambda body: {**body, "results": body["results"][:1]})
    reporter = ExpiryReporter(make_link())
    with pytest.raises(Unreachable, match="does not match"):
        reporter.report()
    assert len(device_qm.journal_since()) == 2  # still in the outbox: sent again next time

    assert reporter.report() == 2  # the server keeps a report received twice once
    assert device_qm.journal_since() == []
    assert server_expiries(home_qm) == [(u, "ORDERS") for u in uids]

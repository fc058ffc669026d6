"""The device's expiry reports, against a scripted server: sent under the names the
server knows, in batches, trimmed once answered; a bad answer trims nothing."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from edgeq.sync import protocol as p
from edgeq.sync.expiries import ExpiryReporter
from edgeq.sync.link import ServerLink
from edgeq.sync.transport import Transport, Unreachable

from edgeq import Int32, ManualClock, Message, QueueManager

from .fakehome import FakeHome, results


def expire(qm: QueueManager, clock: ManualClock, queue: str, n: int = 1) -> list[str]:
    uids = [str(qm.put(queue, Message(b"stale", expiry=Int32(100)))) for _ in range(n)]
    clock.advance(100)
    assert qm.sweep_expired() == n
    return uids


def test_expiries_go_under_the_servers_queue_names_in_batches_and_are_trimmed(
    make_link: Callable[..., ServerLink], fake_home: FakeHome, device_qm: QueueManager,
    device_clock: ManualClock, caplog: pytest.LogCaptureFixture,
) -> None:
    device_qm.define_remote_queue("LOCAL", target_qmgr="HOME", target_queue="ORDERS")
    device_qm.define_home_server_queue("INBOX", server="HOME")
    device_qm.define_queue("MISC")
    renamed = expire(device_qm, device_clock, "LOCAL", 2)
    plain = expire(device_qm, device_clock, "MISC")
    fake_home.handlers[p.PATH_EXPIRIES] = lambda body: {"type": "expiries", "results": results(
        body["entries"], lambda e: "refused" if e["q"] == "MISC" else "recorded")}

    with caplog.at_level(logging.WARNING, logger="edgeq.sync.agent"):
        sent = ExpiryReporter(make_link(batch_size=2)).report()

    assert sent == 3 and device_qm.journal_since() == []
    batches = [[(e["u"], e["q"]) for e in b["entries"]] for b in fake_home.bodies(p.PATH_EXPIRIES)]
    assert batches == [[(u, "ORDERS") for u in renamed], [(plain[0], "MISC")]]
    refused = [getattr(r, "uid", None) for r in caplog.records if getattr(r, "event", None) == "expiry-refused"]
    assert refused == plain


def test_a_store_that_keeps_no_device_journal_reports_nothing(
    tmp_path: Path, fake_home: FakeHome, device_clock: ManualClock
) -> None:
    with QueueManager(tmp_path / "bare.db", name="DEV1", journal="off") as qm, \
            httpx.Client(transport=httpx.MockTransport(fake_home.handle)) as client:
        qm.define_remote_queue("ORDERS", target_qmgr="HOME")
        link = ServerLink(qm, Transport("http://127.0.0.1:8470", client=client), clock=device_clock,
                          monotonic=lambda: 0.0, batch_size=10)
        assert ExpiryReporter(link).report() == 0
    assert fake_home.requests == []


def test_an_answer_that_does_not_match_trims_nothing(
    make_link: Callable[..., ServerLink], fake_home: FakeHome, device_qm: QueueManager, device_clock: ManualClock
) -> None:
    expire(device_qm, device_clock, "ORDERS", 2)
    fake_home.handlers[p.PATH_EXPIRIES] = lambda body: {"type": "expiries", "results": results(
        body["entries"][:1], "recorded")}
    with pytest.raises(Unreachable, match="does not match"):
        ExpiryReporter(make_link()).report()
    assert len(device_qm.journal_since()) == 2  # still in the outbox: sent again next time

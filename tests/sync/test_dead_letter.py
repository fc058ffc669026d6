"""Issue 28, defect 1: a message the home server keeps refusing is never deleted. At its
queue's refusal limit it moves, in one transaction, to the store's dead-letter queue
(``SYSTEM.DEAD.LETTER.QUEUE`` unless the operator names another) with a header saying
why; where no dead-letter queue can take it, it stays on the remote queue and is offered
again. Against a real home server on loopback, whose target queue does not exist."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from edgeq import Int32, Int64, ManualClock, Message, QueueManager
from edgeq.errors import MessageNotFound
from edgeq.sync.agent.agent import SyncAgent
from edgeq.types import DEFAULT_DEAD_LETTER_QUEUE as DLQ
from tests.sync.conftest import LiveServer


@pytest.fixture
def home(tmp_path: Path, server_clock: ManualClock) -> Iterator[QueueManager]:
    qm = QueueManager(tmp_path / "home.db", name="HOME", clock=server_clock, journal="server")
    qm.define_queue("ORDERS")  # no METRICS: every message of the device's METRICS is refused
    yield qm
    qm.close()


@pytest.fixture
def device(tmp_path: Path, device_clock: ManualClock) -> Iterator[QueueManager]:
    qm = QueueManager(tmp_path / "device.db", name="DEV1", clock=device_clock)
    qm.define_remote_queue("METRICS", target_qmgr="HOME", refusal_limit=3)
    yield qm
    qm.close()


@pytest.fixture
def served(home: QueueManager, make_server: Callable[..., LiveServer]) -> LiveServer:
    return make_server(home)


@pytest.fixture
def dev_agent(device: QueueManager, served: LiveServer, make_agent: Callable[..., SyncAgent]) -> SyncAgent:
    return make_agent(device, served.url)


def _push(agent: SyncAgent, times: int) -> None:
    for _ in range(times):
        agent.push_once()


def _status(agent: SyncAgent, queue: str = "METRICS") -> tuple[int | None, int, int]:
    (q,) = [s for s in agent.status().queues if s.queue == queue]
    return q.backlog, q.refused, q.dead_lettered


def test_a_message_refused_limit_times_moves_to_the_dead_letter_queue_with_its_header(
    device: QueueManager, home: QueueManager, dev_agent: SyncAgent, served: LiveServer,
    device_clock: ManualClock, caplog: pytest.LogCaptureFixture,
) -> None:
    uid = device.put("METRICS", Message(b"reading", fields={"n": 1}, expiry=Int32(3_600_000)))
    device_clock.advance(1_000)
    _push(dev_agent, 2)
    assert device.depth("METRICS") == 1 and DLQ not in device.queue_names()
    caplog.clear()

    last = dev_agent.push_once()

    assert (last.refused, last.dead_lettered) == (1, 1)
    assert device.depth("METRICS") == 0
    (dead,) = device.browse(DLQ)
    assert (dead.uid, dead.data, dead.fields["n"]) == (uid, b"reading", Int64(1))
    assert dead.fields["dlq.reason"] == "refused" and dead.fields["dlq.queue"] == "METRICS"
    assert "HOME has no queue METRICS" in str(dead.fields["dlq.refusal"])
    assert (dead.fields["dlq.attempts"], dead.fields["dlq.at_ms"]) == (Int32(3), Int64(device_clock()))
    assert dead.remaining_expiry_ms == 3_600_000 - 1_000  # its remaining expiry kept
    assert _status(dev_agent) == (0, 0, 1)
    assert 'edgeq_agent_queue_dead_lettered_total{queue="METRICS",direction="push"} 1' in dev_agent.metrics()
    assert f"edgeq_agent_dead_letter_messages{{queue=\"{DLQ}\"}} 1" in dev_agent.metrics()
    said = " ".join(r.getMessage() for r in caplog.records)
    assert f"moved to dead-letter queue {DLQ}" in said and "offered again" not in said
    (entry,) = [e for e in home.journal_since() if e.kind == "dead-lettered"]  # the device journal, reported
    assert (entry.uid, entry.queue, entry.side, entry.device, entry.check_point) == (
        str(uid), "METRICS", "device", "DEV1", "refused")
    assert (served.metrics.value("device_dead_lettered"), served.metrics.value("device_expiries")) == (1, 0)
    assert dev_agent.push_once().sent == 0  # never offered again from the DLQ


def test_a_dead_letter_queue_that_cannot_take_it_leaves_it_on_the_remote_queue(
    device: QueueManager, dev_agent: SyncAgent, caplog: pytest.LogCaptureFixture,
) -> None:
    device.define_queue("FULL.DLQ", max_depth=1)
    device.put("FULL.DLQ", Message(b"already there"))
    device.set_dead_letter_queue("FULL.DLQ")
    uid = device.put("METRICS", Message(b"keep me"))

    _push(dev_agent, 4)

    assert [m.uid for m in device.exchange.next_for_transmission("METRICS", 10)] == [uid]  # nothing deleted
    assert device.depth("FULL.DLQ") == 1 and DLQ not in device.queue_names()
    backlog, refused, dead = _status(dev_agent)
    assert (backlog, refused, dead) == (1, 1, 0)
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "cannot move to dead-letter queue 'FULL.DLQ'" in said and "stays on 'METRICS'" in said
    device.alter_queue("FULL.DLQ", max_depth=10)  # the operator makes room: the next refusal moves it
    assert dev_agent.push_once().dead_lettered == 1
    assert [m.uid for m in device.browse("FULL.DLQ")][-1] == uid


def test_resent_after_the_cause_is_fixed_it_is_delivered(
    device: QueueManager, home: QueueManager, dev_agent: SyncAgent,
) -> None:
    uid = device.put("METRICS", Message(b"late", fields={"n": 2}))
    _push(dev_agent, 3)
    assert device.depth(DLQ) == 1
    home.define_queue("METRICS")  # the operator fixed the cause

    resent = device.dlq_resend([uid])

    assert (resent.moved, resent.kept, device.depth(DLQ)) == ([uid], [], 0)
    (back,) = device.exchange.next_for_transmission("METRICS", 10)
    assert back.uid == uid and not any(name.startswith("dlq.") for name in back.fields)
    report = dev_agent.push_once()
    assert report.transmitted == 1 and report.refused == 0
    (got,) = home.browse("METRICS")
    assert (got.uid, got.data, got.fields) == (uid, b"late", {"n": Int64(2)})


def test_a_dead_lettered_message_still_expires(
    device: QueueManager, dev_agent: SyncAgent, device_clock: ManualClock,
) -> None:
    device.put("METRICS", Message(b"short-lived", expiry=Int32(60_000)))
    _push(dev_agent, 3)
    assert device.depth(DLQ) == 1
    device_clock.advance(60_000)

    assert device.browse(DLQ) == [] and device.depth(DLQ) == 0
    expired = [e for e in device.journal_since() if e.kind == "expired"]
    assert [(e.queue, e.check_point) for e in expired] == [(DLQ, "browse")]


def test_what_the_operator_deletes_is_reported_discarded(
    device: QueueManager, home: QueueManager, dev_agent: SyncAgent,
) -> None:
    kept = device.put("METRICS", Message(b"looked at"))
    dropped = device.put("METRICS", Message(b"not wanted"))
    _push(dev_agent, 3)
    assert device.depth(DLQ) == 2

    assert device.dlq_delete([dropped]) == 1
    with pytest.raises(MessageNotFound, match="holds no message"):
        device.dlq_delete([dropped])
    dev_agent.push_once()

    assert [m.uid for m in device.dlq_browse()] == [kept]
    seen = sorted((e.kind, e.uid, e.check_point) for e in home.journal_since() if e.side == "device")
    assert seen == sorted([("dead-lettered", str(kept), "refused"),
                           ("dead-lettered", str(dropped), "refused"),
                           ("discarded", str(dropped), "deleted")])
    assert device.journal_since() == []  # the outbox was trimmed once the server had it

"""The built-in rules: dead-letter, expiry-report, log, counters."""

from __future__ import annotations

import json
import logging

import pytest

from edgeq import Int32, Int64, ManualClock, Message, QueueManager
from tests.conftest import T0

# -- dead-letter ---------------------------------------------------------------------------


def test_dead_letter_copies_expired_with_annotations(qm: QueueManager, clock: ManualClock) -> None:
    qm.define_queue("DLQ")
    qm.define_queue("Q", rules=[("dead-letter", {"queue": "DLQ"})])
    uid = qm.put("Q", Message(b"late", fields={"k": "v"}, expiry=Int32(100), priority=6))
    clock.advance(150)
    assert qm.get("Q") is None
    dead = qm.get("DLQ")
    assert dead is not None and dead.uid == uid and dead.data == b"late" and dead.priority == 6
    assert dead.expiry is None and dead.remaining_expiry_ms is None  # expiry cleared
    assert dead.fields["k"] == "v"
    assert ((dead.fields["dlq.queue"], dead.fields["dlq.reason"], dead.fields["dlq.where"])
            == ("Q", "expired", "get"))
    assert dead.fields["dlq.original_expiry"] == Int32(100)
    assert dead.fields["dlq.at_ms"] == Int64(T0 + 150)
    assert qm.queue_stats("Q") == {"dead_lettered": 1}


def test_dead_letter_other_reasons_and_keep_expiry(qm: QueueManager, clock: ManualClock) -> None:
    qm.define_queue("DLQ")
    qm.define_queue("Q",
                    rules=[("dead-letter", {"queue": "DLQ", "reasons": ["purged"], "keep_expiry": True})])
    qm.put("Q", Message(b"a", expiry=Int32(10_000)))
    qm.put("Q", Message(b"b"))
    clock.advance(4_000)
    assert qm.purge("Q") == 2
    copies = {m.data: m for m in qm.browse("DLQ")}
    assert copies[b"a"].remaining_expiry_ms == 6_000  # keeps (and keeps counting) its remaining expiry
    assert copies[b"b"].remaining_expiry_ms is None
    assert copies[b"a"].fields["dlq.reason"] == "purged" and "dlq.where" not in copies[b"a"].fields
    qm.put("Q", Message(b"c", expiry=Int32(1)))
    clock.advance(1)
    assert qm.depth("Q") == 0
    assert qm.depth("DLQ") == 2  # expiry not among its reasons


def test_dead_letter_is_idempotent_when_an_event_is_redelivered(qm: QueueManager) -> None:
    from edgeq.rules.base import RuleEvent
    from edgeq.rules.dead_letter import DeadLetterRule

    qm.define_queue("DLQ")
    qm.define_queue("Q")
    rule = DeadLetterRule("DLQ")
    rule.attach(qm, "Q")
    msg = Message(b"x", uid=__import__("edgeq").MessageUID("DEV1", 99), expiry=Int64(T0))
    event = RuleEvent("expired", "Q", "DEV1", T0, msg, where="sweep", id=7)
    rule.on_expired(event)
    rule.on_expired(event)
    assert qm.depth("DLQ") == 1 and qm.queue_stats("Q") == {"dead_lettered": 1}


# -- expiry-report ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "expected"),
    [("with-data", b"x" * 100), ("with-full-data", b"x" * 300), ("none", None)],
)
def test_expiry_report_options(
    qm: QueueManager, clock: ManualClock, option: str, expected: bytes | None
) -> None:
    qm.define_queue("REPLIES")
    qm.define_queue("Q", rules=["expiry-report"])
    uid = qm.put("Q", Message(b"x" * 300, reply_to="REPLIES", expiry_report=option,
                              expiry=Int32(50)))  # type: ignore[arg-type]
    clock.advance(50)
    assert qm.depth("Q") == 0
    report = qm.get("REPLIES")
    if expected is None:
        assert report is None
        return
    assert report is not None and report.data == expected
    assert report.correlation_id == str(uid).encode()
    assert report.fields["report"] == "expiry" and report.fields["report.uid"] == str(uid)
    assert (report.fields["report.queue"], report.fields["report.where"]) == ("Q", "depth")
    assert isinstance(report.fields["report.event"], Int64)


def test_expiry_report_is_made_at_discard_not_eligibility(qm: QueueManager, clock: ManualClock) -> None:
    qm.define_queue("REPLIES")
    qm.define_queue("Q", rules=["expiry-report"])
    qm.put("Q", Message(b"x", reply_to="REPLIES", expiry_report="with-data", expiry=Int32(50)))
    clock.advance(1_000)  # long past eligible, but nothing has looked at Q
    assert qm.browse("REPLIES") == []
    qm.sweep_expired("Q")
    (report,) = qm.browse("REPLIES")
    assert report.fields["report.at_ms"] == Int64(T0 + 1_000)


# -- log ---------------------------------------------------------------------------------------


def test_log_rule_writes_structured_records(
    qm: QueueManager, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    qm.define_queue("Q", rules=[("log", {"events": ["expired", "added"], "level": "warning"})])
    with caplog.at_level(logging.INFO, logger="edgeq.rules.log"):
        uid = qm.put("Q", Message(b"abc", expiry=Int32(5)))
        clock.advance(5)
        qm.depth("Q")
    records = [r for r in caplog.records if r.name == "edgeq.rules.log"]
    assert [r.levelno for r in records] == [logging.WARNING, logging.WARNING]
    added, expired = (json.loads(r.getMessage()) for r in records)
    assert added["event"] == "added" and added["uid"] == str(uid) and added["bytes"] == 3
    assert expired["event"] == "expired" and expired["where"] == "depth" and isinstance(expired["id"], int)
    assert records[1].edgeq_event == expired  # type: ignore[attr-defined]


# -- counters ------------------------------------------------------------------------------------


def test_counters_count_by_kind_and_where(qm: QueueManager, clock: ManualClock) -> None:
    qm.define_queue("Q", ordering="fifo", rules=["counters"])
    qm.put("Q", Message(b"stale", expiry=Int64(T0)))  # expired on add
    qm.put("Q", Message(b"a", expiry=Int32(10)))
    qm.put("Q", Message(b"b"))
    qm.put("Q", Message(b"c"))
    clock.advance(10)
    assert qm.get("Q") is not None  # discards "a" at get, returns "b"
    got = qm.get("Q", confirm_id=1)
    assert got is not None
    qm.confirm_get("Q", got.uid)
    assert qm.queue_stats("Q") == {
        "added": 3, "expired": 2, "expired.add": 1, "expired.get": 1, "got": 2,
    }

"""Rules in the core: when hooks fire, what they receive, and that they cannot break a queue."""

from __future__ import annotations

import logging
import threading

import pytest

from edgeq import Int32, Int64, ManualClock, Message, QueueManager
from edgeq.errors import InvalidType, QueueNotFound
from edgeq.rules import QueueRule
from edgeq.rules.base import RuleEvent
from tests.conftest import T0, Recorder


class DeadLetter(QueueRule):
    """Copies expired messages to another queue, as MQe's example rule does."""

    def __init__(self, qm: QueueManager, target: str) -> None:
        self.qm, self.target = qm, target

    def on_expired(self, event: RuleEvent) -> None:
        assert event.message is not None and event.where is not None
        message = event.message
        self.qm.put(self.target, message.replace(expiry=None, resend=True,
                                                 fields={**message.fields, "where": event.where}))


class Exploding(QueueRule):
    def on_expired(self, event: RuleEvent) -> None:
        raise RuntimeError("rule bug")

    def on_added(self, event: RuleEvent) -> None:
        raise RuntimeError("rule bug")


def test_hooks_fire_with_copies_and_reasons(qm: QueueManager, rule: Recorder) -> None:
    qm.define_queue("Q")
    qm.add_rule("Q", rule)
    uid = qm.put("Q", Message(b"a", fields={"k": "v"}))
    got = qm.get("Q")
    assert got is not None
    kinds = [(kind, getattr(m, "uid", m), why) for kind, m, why in rule.calls]
    assert kinds == [("activated", "Q", None), ("added", uid, None), ("removed", uid, "got")]
    added = rule.events[1]
    assert added.message is not None and added.message.fields == {"k": "v"} and added.message.created_ms == T0
    assert (added.queue, added.queue_manager, added.at_ms, added.id) == ("Q", "DEV1", T0, None)


def test_rule_may_copy_expired_message_elsewhere(qm: QueueManager, clock: ManualClock) -> None:
    qm.define_queue("Q")
    qm.define_queue("DLQ")
    qm.add_rule("Q", DeadLetter(qm, "DLQ"))
    uid = qm.put("Q", Message(b"late", expiry=Int32(50)))
    clock.advance(50)
    assert qm.get("Q") is None
    dead = qm.get("DLQ")
    assert dead is not None and dead.uid == uid and dead.data == b"late"
    assert dead.fields["where"] == "get" and dead.remaining_expiry_ms is None


def test_failing_rule_is_logged_and_never_breaks_the_operation(
    qm: QueueManager, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    qm.define_queue("Q")
    recorder = Recorder()
    qm.add_rule("Q", Exploding())
    qm.add_rule("Q", recorder)  # a later rule still runs
    with caplog.at_level(logging.ERROR, logger="edgeq.rules"):
        qm.put("Q", Message(b"x", expiry=Int32(10)))
        clock.advance(10)
        assert qm.depth("Q") == 0
    assert "rule bug" in caplog.text and "on_expired" in caplog.text
    assert recorder.expired() == [(b"x", "depth")]


def test_add_rule_validates(qm: QueueManager) -> None:
    with pytest.raises(QueueNotFound):
        qm.add_rule("Q", QueueRule())
    qm.define_queue("Q")
    with pytest.raises(InvalidType, match="QueueRule"):
        qm.add_rule("Q", object())  # type: ignore[arg-type]
    r = QueueRule()
    qm.add_rule("Q", r)
    assert qm.remove_rule("Q", r) and not qm.remove_rule("Q", r)


def test_many_expired_with_rules_are_discarded_in_batches(qm: QueueManager, clock: ManualClock) -> None:
    qm.define_queue("Q")
    rule = Recorder()
    qm.add_rule("Q", rule)
    qm.put_many("Q", [Message(b"%d" % i, expiry=Int64(T0 + 10)) for i in range(2_500)])
    qm.put("Q", Message(b"alive"))
    clock.advance(10)
    assert qm.sweep_expired("Q") == 2_500
    assert len(rule.expired()) == 2_500 and {w for _, w in rule.expired()} == {"sweep"}
    assert qm.depth("Q") == 1


def test_background_sweeper_discards_without_a_get(qm: QueueManager, clock: ManualClock) -> None:
    qm.define_queue("Q")
    swept = threading.Event()

    class Signal(QueueRule):
        def on_expired(self, event: RuleEvent) -> None:
            if event.where == "sweep":
                swept.set()

    qm.add_rule("Q", Signal())
    qm.put("Q", Message(b"x", expiry=Int32(5)))
    clock.advance(5)
    qm.start_expiry_sweeper(0.05)
    try:
        assert swept.wait(timeout=10), "the sweeper never discarded the expired message"
    finally:
        qm.stop_expiry_sweeper()
    assert qm.depth("Q") == 0

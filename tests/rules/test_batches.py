"""A rule costs its own work, not a transaction per event: the events of one commit reach a
rule together (``QueueRule.on_events``), and ``counters`` applies them in one write. Counted
with the queue manager's tracer (transactions) and its flush counter, never timed."""

from __future__ import annotations

import signal
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from edgeq import Int32, Int64, ManualClock, Message, QueueManager
from edgeq.errors import InvalidType
from edgeq.rules import QueueRule
from edgeq.rules.base import RuleEvent
from tests.rulekit import read_events
from tests.rules.test_durable import SETUP, run_child


def transactions(qm: QueueManager, operation: Callable[[], object]) -> int:
    """How many write transactions ``operation`` began."""
    statements: list[str] = []
    with qm.tracer(statements.append):
        operation()
    return sum(s.lstrip().upper().startswith("BEGIN") for s in statements)


class Batches(QueueRule):
    """Records each call of its batch hook; raises while ``fail`` is set."""

    def __init__(self) -> None:
        self.calls: list[list[tuple[str, int | None]]] = []
        self.fail = False

    def on_events(self, events: Sequence[RuleEvent]) -> None:
        if self.fail:
            raise RuntimeError("batch refused on purpose")
        self.calls.append([(e.kind, e.id) for e in events])


class PerEvent(QueueRule):
    """Per-event hooks only (as every rule written before the batch hook): refuses message b"bad"."""

    def __init__(self) -> None:
        self.seen: list[bytes] = []

    def on_expired(self, event: RuleEvent) -> None:
        assert event.message is not None
        if event.message.data == b"bad":
            raise RuntimeError("refused on purpose")
        self.seen.append(event.message.data)

    on_added = on_expired


def test_put_many_with_counters_makes_the_same_transactions_for_10_or_500_messages(
    open_qm: Callable[..., QueueManager],
) -> None:
    qm = open_qm()
    qm.define_queue("Q", rules=["counters"])
    qm.put("Q", Message(b"first"))  # activation out of the way
    small = transactions(qm, lambda: qm.put_many("Q", [Message(b"s") for _ in range(10)]))
    large = transactions(qm, lambda: qm.put_many("Q", [Message(b"l") for _ in range(500)]))
    assert large == small <= 2  # the put's, and one for the counters
    assert qm.queue_stats("Q") == {"added": 511}


def test_a_single_put_with_counters_waits_for_one_flush(open_qm: Callable[..., QueueManager]) -> None:
    qm = open_qm()
    qm.define_queue("Q", rules=["counters"])
    qm.put("Q", Message(b"first"))
    syncs = qm._db.sync_stats().syncs
    qm.put("Q", Message(b"second"))
    assert qm._db.sync_stats().syncs == syncs + 1  # the put's own: the counters' write waits for no flush
    assert qm.queue_stats("Q") == {"added": 2}


def test_a_sweep_with_counters_counts_every_expiry_in_constant_transactions(
    open_qm: Callable[..., QueueManager], clock: ManualClock,
) -> None:
    qm = open_qm()
    qm.define_queue("Q", rules=["counters"])

    def sweep(n: int) -> int:
        qm.put_many("Q", [Message(b"x", expiry=Int32(10)) for _ in range(n)])
        clock.advance(10)
        return transactions(qm, lambda: qm.sweep_expired("Q"))

    sweep(3)
    assert sweep(500) == sweep(10)
    assert qm.queue_stats("Q") == {"added": 513, "expired": 513, "expired.sweep": 513}


def test_a_push_with_counters_on_both_ends_makes_the_same_transactions_for_10_or_500(
    open_qm: Callable[..., QueueManager], tmp_path: Path,
) -> None:
    device = open_qm()
    device.define_remote_queue("ORDERS", target_qmgr="HOME", rules=["counters"])
    home = QueueManager(tmp_path / "home.db", name="HOME", journal="server")
    home.define_queue("ORDERS", rules=["counters"])

    def push(n: int) -> tuple[int, int, int]:
        uids = device.put_many("ORDERS", [Message(b"m") for _ in range(n)])
        sent = device.exchange.next_for_transmission("ORDERS", n)
        stage = transactions(home, lambda: home.put_each("ORDERS", sent, confirm_id=7))
        confirm = transactions(home, lambda: home.confirm_put_each("ORDERS", uids))
        return stage, confirm, transactions(device, lambda: device.exchange.transmitted("ORDERS", uids))

    try:
        push(3)
        assert push(500) == push(10)
        assert device.queue_stats("ORDERS") == {"added": 513, "transmitted": 513}
        assert home.queue_stats("ORDERS") == {"added": 513} and home.depth("ORDERS") == 513
    finally:
        home.close()


def test_a_batch_hook_gets_the_events_of_one_commit_in_one_call(
    open_qm: Callable[..., QueueManager],
) -> None:
    qm = open_qm()
    qm.define_queue("Q")
    batches, single = Batches(), PerEvent()
    qm.add_rule("Q", batches)
    qm.add_rule("Q", single)
    qm.put_many("Q", [Message(b"%d" % i) for i in range(5)])
    assert batches.calls[-1] == [("added", None)] * 5
    assert single.seen == [b"0", b"1", b"2", b"3", b"4"]  # a rule without a batch hook: one call per event


def test_the_default_batch_hook_calls_the_per_event_hooks_in_order(
    open_qm: Callable[..., QueueManager],
) -> None:
    qm = open_qm()
    qm.define_queue("Q")
    rule = PerEvent()
    rule.attach(qm, "Q")
    events = [RuleEvent("added", "Q", "DEV1", 0, Message(b"%d" % i)) for i in range(3)]
    rule.on_events(events)
    assert rule.seen == [b"0", b"1", b"2"]


def test_a_per_event_rule_failing_one_event_of_a_batch_still_gets_the_others(
    open_qm: Callable[..., QueueManager], tmp_path: Path,
) -> None:
    qm = open_qm()
    qm.define_queue("Q", rules=[("tests.rules.test_batches:PerEvent", {})])
    qm.put_many("Q", [Message(data, expiry=Int64(1)) for data in (b"a", b"bad", b"c")])  # expired at add
    rule = qm.queue_bindings("Q")[0].rule
    assert isinstance(rule, PerEvent) and rule.seen == [b"a", b"c"]
    assert [f.attempts for f in qm.rule_failures()] == [1]


def test_a_batch_hook_that_raises_fails_each_durable_event_and_is_retried_one_by_one(
    open_qm: Callable[..., QueueManager],
) -> None:
    qm = open_qm()
    qm.define_queue("Q", rules=[("tests.rules.test_batches:Batches", {})])
    rule = qm.queue_bindings("Q")[0].rule
    assert isinstance(rule, Batches)
    rule.fail = True
    qm.put_many("Q", [Message(b"%d" % i, expiry=Int64(1)) for i in range(3)])
    ids = [f.event_id for f in qm.rule_failures()]
    assert len(ids) == 3 and rule.calls == []
    rule.fail = False
    assert qm.retry_rule_failures() == 3
    assert rule.calls == [[("expired", event_id)] for event_id in ids]
    assert qm.rule_failures() == []


def test_counters_of_a_batch_redelivered_after_sigkill_count_once(tmp_path: Path) -> None:
    db, marker, log = tmp_path / "d.db", tmp_path / "absent", tmp_path / "events.jsonl"
    with run_child(SETUP + """
    import os, signal
    qm.put_many("Q", [Message(b"%d" % i, expiry=Int64(1)) for i in range(20)])  # 20 expiries, one commit
    os.kill(os.getpid(), signal.SIGKILL)                # delivered, counted, never forgotten
    """, str(db), str(marker), str(log)) as child:
        _, err = child.communicate()
    assert child.returncode == -signal.SIGKILL, err
    assert len([e for e in read_events(log) if e["kind"] == "expired"]) == 20
    with QueueManager(db, name="DEV1") as qm:
        seen = [e["id"] for e in read_events(log) if e["kind"] == "expired"]
        assert len(seen) > 20 and len(set(seen)) == 20  # at-least-once: what was not forgotten comes again
        assert qm.queue_stats("Q") == {"expired": 20, "expired.add": 20}  # each event counted once
        assert qm.rule_failures() == []


def test_apply_stats_each_applies_each_event_id_once(open_qm: Callable[..., QueueManager]) -> None:
    qm = open_qm()
    qm.define_queue("Q")
    assert qm.apply_stats_each("Q", [({"a": 1}, 7), ({"a": 1}, 7), ({"b": 2}, None), ({"a": 5}, 8)]) == [
        True, False, True, True]
    assert qm.apply_stats_each("Q", [({"a": 1}, 8), ({"b": 1}, 9)]) == [False, True]
    assert qm.queue_stats("Q") == {"a": 6, "b": 3}
    with pytest.raises(InvalidType, match="event id"):
        qm.apply_stats_each("Q", [({"a": 1}, "7")])  # type: ignore[list-item]
    with pytest.raises(InvalidType, match="pairs"):
        qm.apply_stats_each("Q", [{"a": 1}])  # type: ignore[list-item]

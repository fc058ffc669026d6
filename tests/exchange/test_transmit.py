"""The transmitter's bookkeeping for the sync agent, on a real store: refusals counted per
message (moved to the dead-letter queue at the queue's limit, rules told reason ``refused``,
their rows gone whenever the message leaves the queue, however it leaves), and the
per-queue sync state the agent keeps for ``edgeq sync status``."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from edgeq import Int64, ManualClock, Message, MessageUID, QueueManager
from edgeq.errors import InvalidArgument, QueueNotFound
from edgeq.exchange.transmit import DEFAULT_REFUSAL_LIMIT
from tests.conftest import T0, Recorder


@pytest.fixture
def qm(open_qm: Callable[..., QueueManager]) -> QueueManager:
    """A device store (plain, then encrypted) with remote queue ORDERS."""
    made = open_qm()
    made.define_remote_queue("ORDERS", target_qmgr="HOME")
    return made


def refusal_rows(qm: QueueManager) -> list[tuple[str, int, int, str]]:
    with sqlite3.connect(qm.path) as conn:
        return conn.execute(
            "SELECT origin, stamp, count, last_reason FROM refusals ORDER BY stamp").fetchall()


def test_refusals_are_counted_per_message_and_the_last_reason_kept(
    qm: QueueManager, clock: ManualClock
) -> None:
    a, b = qm.put_many("ORDERS", [Message(b"a"), Message(b"b")])
    first = qm.exchange.refused("ORDERS", [(a, "queue full"), (b, "queue full")])
    clock.advance(1000)
    second = qm.exchange.refused("ORDERS", [(str(a), "no-queue: gone")])

    assert [(r.uid, r.count, r.dead_lettered) for r in first] == [(a, 1, False), (b, 1, False)]
    assert [(r.uid, r.count, r.dead_lettered) for r in second] == [(a, 2, False)]
    assert (refusal_rows(qm)
            == [(a.origin, a.stamp, 2, "no-queue: gone"), (b.origin, b.stamp, 1, "queue full")])
    (row,) = qm.sync_overview().queues
    assert ((row.name, row.kind, row.depth, row.refused_messages, row.refusals)
            == ("ORDERS", "remote", 2, 2, 3))
    assert (row.last_refusal, row.last_refusal_ms) == ("no-queue: gone", T0 + 1000)
    assert row.oldest_arrived_ms == T0 and row.refusal_limit == DEFAULT_REFUSAL_LIMIT


def test_at_the_limit_the_message_moves_to_the_dead_letter_queue(qm: QueueManager) -> None:
    watcher = Recorder()
    qm.add_rule("ORDERS", watcher)
    uid = qm.put("ORDERS", Message(b"never taken"))
    for _ in range(DEFAULT_REFUSAL_LIMIT - 1):
        (outcome,) = qm.exchange.refused("ORDERS", [(uid, "no-queue")])
        assert not outcome.dead_lettered
    (outcome,) = qm.exchange.refused("ORDERS", [(uid, "no-queue")])

    assert (outcome.count, outcome.dead_lettered) == (DEFAULT_REFUSAL_LIMIT, True)
    assert qm.depth("ORDERS") == 0 and watcher.removed() == [(b"never taken", "refused")]
    assert [m.uid for m in qm.dlq_browse()] == [uid]  # moved, never deleted
    assert refusal_rows(qm) == []
    assert qm.exchange.refused("ORDERS", [(uid, "no-queue")]) == []  # no longer held: nothing counted


def test_a_bound_dead_letter_rule_keeps_its_own_copy_too(tmp_path: Path, clock: ManualClock) -> None:
    with QueueManager(tmp_path / "d.db", name="DEV1", clock=clock) as qm:
        qm.define_queue("DLQ")
        qm.define_remote_queue("ORDERS", target_qmgr="HOME", rules=[("dead-letter", {"queue": "DLQ"})])
        uid = qm.put("ORDERS", Message(b"x"))
        for _ in range(DEFAULT_REFUSAL_LIMIT):
            qm.exchange.refused("ORDERS", [(uid, "queue full")])
        (copy,) = qm.browse("DLQ")
        assert copy.uid == uid and copy.fields["dlq.reason"] == "refused"
        assert [m.uid for m in qm.dlq_browse()] == [uid]


def test_the_limit_comes_from_the_queue(qm: QueueManager) -> None:
    qm.define_remote_queue("STRICT", target_qmgr="HOME", refusal_limit=1)
    uid = qm.put("STRICT", Message(b"x"))
    (outcome,) = qm.exchange.refused("STRICT", [(uid, "too large")])
    assert outcome.dead_lettered and qm.depth("STRICT") == 0
    assert qm.sync_overview().queues[1].refusal_limit == 1


@pytest.mark.parametrize("leave", ["transmitted", "expired", "purged", "deleted", "swept"])
def test_refusal_rows_leave_with_their_message(qm: QueueManager, clock: ManualClock, leave: str) -> None:
    kept = qm.put("ORDERS", Message(b"kept"))
    going = qm.put("ORDERS", Message(b"going", expiry=Int64(T0 + 500)))
    qm.exchange.refused("ORDERS", [(kept, "queue full"), (going, "queue full")])
    if leave == "transmitted":
        qm.exchange.transmitted("ORDERS", [going])
    elif leave in ("expired", "swept"):
        clock.advance(1000)
        if leave == "expired":
            # the agent's read discards it ("get" check point)
            qm.exchange.next_for_transmission("ORDERS", 10)
        else:
            qm.sweep_expired("ORDERS")
    elif leave == "deleted":
        qm.delete_message("ORDERS", going)
    else:
        qm.purge("ORDERS")
    left = {(origin, stamp) for origin, stamp, _, _ in refusal_rows(qm)}
    assert left == (set() if leave == "purged" else {(kept.origin, kept.stamp)})


def test_refusals_are_for_remote_queues_only(qm: QueueManager) -> None:
    qm.define_queue("LOCAL")
    uid = qm.put("LOCAL", Message(b"x"))
    with pytest.raises(InvalidArgument, match="not a remote queue"):
        qm.exchange.refused("LOCAL", [(uid, "no")])
    with pytest.raises(QueueNotFound):
        qm.exchange.refused("NOPE", [(uid, "no")])


def test_a_queue_with_refused_messages_can_still_be_deleted_once_empty(qm: QueueManager) -> None:
    uid = qm.put("ORDERS", Message(b"x"))
    qm.exchange.refused("ORDERS", [(uid, "no")])
    qm.purge("ORDERS")
    qm.delete_queue("ORDERS")
    assert qm.queue_names() == []


def test_sync_state_survives_the_process_and_only_for_queues_that_sync(
    tmp_path: Path, clock: ManualClock
) -> None:
    path = tmp_path / "d.db"
    with QueueManager(path, name="DEV1", clock=clock) as qm:
        qm.define_remote_queue("ORDERS", target_qmgr="HOME")
        qm.define_home_server_queue("INBOX", server="HOME")
        qm.define_remote_queue("OLD", target_qmgr="HOME")
        qm.exchange.record_sync_state({"": {"server": "HOME"}, "ORDERS": {"last_success_ms": 5},
                                       "OLD": {"failures": 1}})
        qm.delete_queue("OLD")
        qm.exchange.record_sync_state({"INBOX": {"last_error_code": "no-queue"}, "NOPE": {"failures": 2}})
    with QueueManager(path) as qm:
        overview = qm.sync_overview()
        assert overview.agent == {"server": "HOME"}
        assert {q.name: (q.kind, q.state) for q in overview.queues} == {
            "INBOX": ("home", {"last_error_code": "no-queue"}), "ORDERS": ("remote", {"last_success_ms": 5})}
        with sqlite3.connect(path) as conn:
            keys = sorted(k for (k,) in conn.execute("SELECT key FROM edgeq_meta WHERE key LIKE 'sync%'"))
        assert keys == ["sync", "sync.INBOX", "sync.ORDERS"]  # none kept for a queue not (or no longer) here


def test_a_batch_of_refusals_makes_as_many_queries_for_10_as_for_500(qm: QueueManager) -> None:
    def queries(n: int) -> int:  # SELECTs, as tests/test_batches.py counts them
        uids = qm.put_many("ORDERS", [Message(b"x") for _ in range(n)])
        seen: list[str] = []
        with qm.tracer(seen.append):
            qm.exchange.refused("ORDERS", [(uid, "queue full") for uid in uids])
        return sum(s.lstrip().upper().startswith(("SELECT", "WITH")) for s in seen)

    queries(3)  # activation and first-use costs out of the way
    assert queries(10) == queries(500)


def test_nothing_is_handed_out_for_transmission_before_it_is_on_the_disk(tmp_path: Path) -> None:
    # Group commit makes a commit visible before its flush: the agent must not send a
    # message whose put a power cut could still take back (edgeq/store/commits.py).
    qm = QueueManager(tmp_path / "d.db", name="DEV1")
    try:
        qm.define_remote_queue("OUT", target_qmgr="HOME")
        qm.put("OUT", Message(b"x"))
        before = qm._db.sync_stats().syncs
        assert [m.data for m in qm.exchange.next_for_transmission("OUT", 10)] == [b"x"]
        assert qm._db.sync_stats().syncs == before + 1
    finally:
        qm.close()


def test_transmitted_deletes_exactly_the_held_copies_reading_each_row_once(qm: QueueManager) -> None:
    held = qm.put_many("ORDERS", [Message(b"x%d" % n) for n in range(600)])  # two chunks of uids
    gone = held[:3]
    qm.exchange.transmitted("ORDERS", gone)
    unheld = [MessageUID("DEV9:abcdefghij", 5), *gone]
    seen: list[str] = []
    with qm.tracer(seen.append):
        assert qm.exchange.transmitted("ORDERS", [*held[3:], *unheld]) == 597
    assert qm.depth("ORDERS") == 0
    # The uids are looked up in their index alone; the rows are read by the delete only.
    selects = [s for s in seen if s.lstrip().upper().startswith("SELECT") and "FROM messages" in s]
    assert selects and all(s.lstrip().startswith("SELECT id FROM messages") for s in selects)

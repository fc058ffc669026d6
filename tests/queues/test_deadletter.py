"""edgeq.queues.deadletter (issue 28, defect 1): a remote queue's message refused ``refusal_limit``
times moves to the dead-letter queue in the transaction that counts its last refusal, on
plain and encrypted stores; rules see both sides of the move; a re-send goes back without
the header; what cannot move or go back stays, with why; old stores migrate."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlite_utils import Database

from edgeq import ManualClock, Message, QueueManager
from edgeq.errors import ConfirmIdNotFound
from edgeq.store.integrity import register
from edgeq.store.journal import JournalEntry
from edgeq.store.opening import APPLICATION_ID
from edgeq.store.records import MessageRow, is_intact
from edgeq.store.schema import MIGRATIONS
from edgeq.types import DEFAULT_DEAD_LETTER_QUEUE as DLQ
from edgeq.types import DLQ_ATTEMPTS, DLQ_REFUSAL
from tests.conftest import STORE_KEYS, Recorder
from tests.test_batches import selects

WHY = "no-queue: HOME has no queue METRICS"


@pytest.fixture
def device(open_qm: Callable[..., QueueManager]) -> QueueManager:
    qm = open_qm()
    qm.define_remote_queue("METRICS", target_qmgr="HOME", refusal_limit=2)
    return qm


def test_the_move_is_one_transaction_keeping_the_message_and_sealing_it_for_the_dlq(
    device: QueueManager, db_path: Path, store_mode: str, clock: ManualClock,
) -> None:
    uid = device.put("METRICS", Message(b"reading", fields={"n": 1}, correlation_id=b"c1", priority=7))
    assert [r.dead_lettered for r in device.exchange.refused("METRICS", [(uid, WHY)])] == [False]
    clock.advance(5)

    (outcome,) = device.exchange.refused("METRICS", [(uid, WHY)])

    assert (outcome.count, outcome.dead_lettered, outcome.kept) == (2, True, False)
    assert device.depth("METRICS") == 0 and device.sync_overview().dead_letter_depth == 1
    (dead,) = device.dlq_browse()
    assert (dead.uid, dead.data, dead.correlation_id, dead.priority) == (uid, b"reading", b"c1", 7)
    assert device.queue_attributes(DLQ).encryption == (None if store_mode == "plain" else "aes-256-gcm")
    with sqlite3.connect(db_path) as conn:
        rows = [MessageRow(*r) for r in conn.execute(
            "SELECT id, origin, stamp, state, confirm_id, priority, created_ms, arrived_ms, expiry_kind, "
            "expiry_value, cap_at, deadline, backout_count, correlation_id, reply_to, report, fields, data, "
            "key_id, crc FROM messages")]
        refusals = conn.execute("SELECT count(*) FROM refusals").fetchone()[0]
    assert len(rows) == 1 and is_intact(DLQ, rows[0]) and refusals == 0  # its refusal row went with it
    assert (rows[0].key_id is None) == (store_mode == "plain")  # sealed for the DLQ's name if encrypted


def test_giving_up_and_resending_cost_the_same_queries_for_10_or_300_messages(device: QueueManager) -> None:
    def selects_of(n: int) -> tuple[int, int]:
        uids = device.put_many("METRICS", [Message(b"m") for _ in range(n)])
        device.exchange.refused("METRICS", [(u, WHY) for u in uids])
        gave_up = selects(device, lambda: device.exchange.refused("METRICS", [(u, WHY) for u in uids]))
        assert device.sync_overview().dead_letter_depth == n
        resent = selects(device, lambda: device.dlq_resend(uids))
        device.purge("METRICS")
        return gave_up, resent

    selects_of(3)  # the dead-letter queue made, first-use costs out of the way
    assert selects_of(10) == selects_of(300)


def test_rules_see_it_leave_as_refused_arrive_on_the_dlq_and_leave_again_as_resent(
    device: QueueManager,
) -> None:
    remote, dlq = Recorder(), Recorder()
    device.add_rule("METRICS", remote)
    uid = device.put("METRICS", Message(b"m"))
    device.exchange.refused("METRICS", [(uid, WHY)])
    device.exchange.refused("METRICS", [(uid, WHY)])  # makes the DLQ: a rule can be added only now
    device.add_rule(DLQ, dlq)

    assert device.dlq_resend().moved == [uid]

    assert remote.removed() == [(b"m", "refused")]
    assert dlq.removed() == [(b"m", "resent")]
    added = [e for e in remote.events if e.kind == "added"]
    assert len(added) == 2  # put, then back from the dead-letter queue
    assert added[-1].message is not None and "dlq.reason" not in added[-1].message.fields


def test_what_cannot_go_back_stays_with_why(device: QueueManager) -> None:
    device.define_remote_queue("GONE", target_qmgr="HOME", refusal_limit=1)
    lost = device.put("GONE", Message(b"its queue is deleted"))
    device.exchange.refused("GONE", [(lost, WHY)])
    device.delete_queue("GONE")
    other = device.put("METRICS", Message(b"back"))
    device.exchange.refused("METRICS", [(other, WHY)])
    device.exchange.refused("METRICS", [(other, WHY)])

    result = device.dlq_resend()

    assert result.moved == [other]
    assert [(u, why) for u, why in result.kept] == [(lost, "cannot go back to 'GONE': it is not defined")]
    assert [m.uid for m in device.dlq_browse()] == [lost]
    assert device.dlq_resend(queue="METRICS").moved == [] and device.dlq_browse(queue="GONE")[0].uid == lost


def test_a_store_from_before_the_dead_letter_queue_migrates_and_keeps_each_report_once(
    tmp_path: Path,
) -> None:
    path = tmp_path / "home.db"
    mine = next(i for i, step in enumerate(MIGRATIONS) if step.__name__ == "_v11")
    conn = sqlite3.connect(path, isolation_level=None)  # the store as the migration before mine left it
    register(conn)
    for step in MIGRATIONS[:mine]:
        step(Database(conn))
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.execute(f"PRAGMA user_version = {mine}")
    conn.execute("INSERT INTO edgeq_meta (key, value) VALUES ('name', 'HOME'), ('incarnation', 'abc'), "
                 "('journal', 'server')")
    conn.close()
    entry = JournalEntry(0, "dead-lettered", "device", 5, "METRICS", "DEV1:x.42", "DEV1:x",
                         check_point="refused")
    gone = JournalEntry(0, "discarded", "device", 6, DLQ, "DEV1:x.42", "DEV1:x", check_point="deleted")

    with QueueManager(path, journal="server") as home:
        outcomes = home.exchange.journal_remote_expiries_each("DEV1", [entry, gone, entry, gone])
        statuses = [r.status for r in outcomes]
        kinds = [(e.kind, e.queue, e.check_point) for e in home.journal_since()]

    assert statuses == ["recorded", "recorded", "already", "already"]
    assert kinds == [("dead-lettered", "METRICS", "refused"), ("discarded", DLQ, "deleted")]


def test_sealed_data_never_moves_into_a_clear_dead_letter_queue(tmp_path: Path, clock: ManualClock) -> None:
    with QueueManager(tmp_path / "d.db", name="DEV1", clock=clock, keys=STORE_KEYS) as qm:
        qm.define_remote_queue("SECRET", target_qmgr="HOME", refusal_limit=1, encryption="aes-256-gcm")
        qm.define_queue("CLEAR.DLQ")
        qm.set_dead_letter_queue("CLEAR.DLQ")
        uid = qm.put("SECRET", Message(b"sealed"))

        (outcome,) = qm.exchange.refused("SECRET", [(uid, WHY)])

        assert (outcome.dead_lettered, outcome.kept) == (False, True)
        assert [m.uid for m in qm.exchange.next_for_transmission("SECRET", 10)] == [uid]
        assert qm.depth("CLEAR.DLQ") == 0
        qm.set_dead_letter_queue(None)  # the default is made sealed, as the queue the message leaves
        assert qm.exchange.refused("SECRET", [(uid, WHY)])[0].dead_lettered
        assert qm.queue_attributes(DLQ).encryption == "aes-256-gcm" and qm.dlq_browse()[0].data == b"sealed"


def test_a_consumer_gives_up_gets_it_holds_and_what_cannot_go_is_undone_with_a_backout(
    open_qm: Callable[..., QueueManager],
) -> None:
    """``dlq_give_up`` (an out-bridge's message the broker never takes): the locked get moves with the
    header in one transaction; while a named dead-letter queue is undefined it is undone, a backout
    counted, and said why; a uid not locked under the confirm id is refused."""
    qm = open_qm()
    qm.define_queue("OUT", redelivery_delay_ms=0)
    big, other = qm.put("OUT", Message(b"big", priority=6)), qm.put("OUT", Message(b"ok"))
    got = qm.get_many("OUT", 2, confirm_id=7)
    assert [m.uid for m in got] == [big, other]
    assert qm.dlq_give_up("OUT", 7, [(big, "over the broker's limit")]) == []
    (dead,) = qm.dlq_browse(queue="OUT")
    assert (dead.uid, dead.data, dead.priority) == (big, b"big", 6)
    assert (dead.fields[DLQ_REFUSAL], dead.fields[DLQ_ATTEMPTS]) == ("over the broker's limit", 1)
    assert qm.depth("OUT") == 1  # the other still locked under 7
    with pytest.raises(ConfirmIdNotFound):
        qm.dlq_give_up("OUT", 7, [(big, "again")])

    qm.set_dead_letter_queue("NAMED.DLQ")  # named, not defined: nothing can go there
    kept = dict(qm.dlq_give_up("OUT", 7, [(other, "too large"), (big, "gone already")]))
    assert "not defined" in kept[other] and "backout counted" in kept[other]
    assert "not locked under confirm id 7" in kept[big]
    (back,) = qm.browse("OUT")
    assert (back.uid, back.backout_count) == (other, 1)

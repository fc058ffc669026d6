"""Backout threshold and backout queue (IBM MQ BOTHRESH/BOQNAME): a message whose assured
gets were undone ``backout_threshold`` times is moved, in the undo's own transaction, to
the queue's ``backout_queue`` instead of being made ready again."""

from __future__ import annotations

import logging
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from edgeq import Int32, ManualClock, Message, QueueManager
from edgeq.errors import ConfirmIdNotFound, InvalidArgument, InvalidType, QueueNotFound
from edgeq.store.records import MessageRow, is_intact
from tests.conftest import STORE_KEYS, T0, Recorder


def poison(qm: QueueManager, queue: str, times: int, first_confirm_id: int = 1) -> None:
    """Get the next message assured and undo it, ``times`` times (a consumer that keeps failing)."""
    for n in range(times):
        got = qm.get(queue, confirm_id=first_confirm_id + n)
        assert got is not None, f"nothing to get on {queue} at round {n}"
        assert qm.undo(queue, first_confirm_id + n) == 1


def stored_rows(path: Path, queue: str) -> list[MessageRow]:
    """The message rows of ``queue`` exactly as stored (read without the queue manager)."""
    cols = ", ".join(MessageRow._fields)
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(
            f"SELECT {cols} FROM messages "
            "WHERE queue_id = (SELECT id FROM queues WHERE name = ?) ORDER BY id",
            (queue,),
        ).fetchall()
    finally:
        conn.close()
    return [MessageRow(*row) for row in rows]


@pytest.fixture
def boq(qm: QueueManager) -> QueueManager:
    """BOQ, and Q moving a message to BOQ at its third backout. Its queues redeliver at
    once (``redelivery_delay_ms=0``): these tests count backouts; the delay is
    tests/queues/test_redelivery.py's."""
    qm.define_queue("BOQ")
    qm.define_queue("Q", redelivery_delay_ms=0, backout_threshold=3, backout_queue="BOQ")
    return qm


# -- the move ----------------------------------------------------------------------------------


def test_a_poison_message_moves_at_the_threshold_and_is_never_redelivered(boq: QueueManager) -> None:
    qm = boq
    uid = qm.put("Q", Message(b"poison"))
    qm.put("Q", Message(b"fine", priority=0))
    for n in (1, 2):
        poison(qm, "Q", 1, first_confirm_id=n)
        again = qm.browse("Q")[0]
        assert (again.uid, again.backout_count) == (uid, n)
        assert qm.depth("BOQ") == 0
    poison(qm, "Q", 1, first_confirm_id=3)  # the third backout: moved
    assert [m.data for m in qm.browse("Q")] == [b"fine"]
    moved = qm.browse("BOQ")
    assert [(m.uid, m.data) for m in moved] == [(uid, b"poison")]
    assert moved[0].backout_count == 0  # a fresh start on the backout queue (its own threshold applies)
    got = qm.get("Q")
    assert got is not None and got.data == b"fine"
    assert qm.get("Q") is None  # never redelivered from Q
    assert (qm.depth("Q"), qm.depth("BOQ")) == (0, 1)


def test_the_moved_message_keeps_uid_fields_correlation_id_and_deadline(
    boq: QueueManager, clock: ManualClock
) -> None:
    qm = boq
    sent = Message(
        b"\x00payload\xff", fields={"site": "north", "n": Int32(5), "raw": b"\x01\x02"}, priority=7,
        expiry=Int32(600_000), correlation_id=b"corr-1", reply_to="REPLIES", expiry_report="with-data",
    )
    uid = qm.put("Q", sent)
    clock.advance(100_000)
    poison(qm, "Q", 3)
    moved = qm.get("BOQ", confirm_id=99)
    assert moved is not None
    assert (moved.uid, moved.data, dict(moved.fields)) == (uid, sent.data, dict(sent.fields))
    assert (moved.priority, moved.correlation_id, moved.reply_to) == (7, b"corr-1", "REPLIES")
    assert (moved.expiry, moved.expiry_report, moved.created_ms) == (Int32(600_000), "with-data", T0)
    assert moved.remaining_expiry_ms == 500_000  # the deadline it had on Q: not restarted
    clock.advance(500_000)
    qm.undo("BOQ", 99)
    assert qm.get("BOQ") is None  # it expires on the backout queue when it would have on Q


def test_counters_of_both_queues_stay_in_step_and_the_row_checks(boq: QueueManager, db_path: Path) -> None:
    qm = boq
    qm.put("Q", Message(b"x" * 100, fields={"k": "v"}))
    before = qm.queue_usage("Q").bytes
    poison(qm, "Q", 3)
    q, b = qm.queue_usage("Q"), qm.queue_usage("BOQ")
    assert (q.depth, q.bytes, b.depth) == (0, 0, 1)
    assert b.bytes == before  # as stored: sealed rows are re-sealed for BOQ, same size
    [row] = stored_rows(db_path, "BOQ")
    assert is_intact("BOQ", row) and not is_intact("Q", row)  # its checksum is the new queue's
    assert qm.check().clean


def test_rules_see_the_move_as_a_removal_for_backout(boq: QueueManager, rule: Recorder) -> None:
    qm = boq
    on_boq = Recorder()
    qm.add_rule("Q", rule)
    qm.add_rule("BOQ", on_boq)
    qm.put("Q", Message(b"poison"))
    poison(qm, "Q", 3)
    removed = [e for e in rule.events if e.kind == "removed"]
    assert [(e.message.data, e.reason) for e in removed if e.message] == [(b"poison", "backout")]
    assert removed[0].message is not None and removed[0].message.backout_count == 3
    assert [(e.kind, e.message.data) for e in on_boq.events if e.message] == [("added", b"poison")]


def test_the_dead_letter_and_counters_rules_know_backout(qm: QueueManager) -> None:
    qm.define_queue("DLQ")
    qm.define_queue("BOQ")
    qm.define_queue("Q", redelivery_delay_ms=0, backout_threshold=1, backout_queue="BOQ",
                    rules=["counters", ("dead-letter", {"queue": "DLQ", "reasons": ["backout"]})])
    qm.put("Q", Message(b"poison"))
    poison(qm, "Q", 1)
    assert qm.queue_stats("Q")["backout"] == 1
    copy = qm.get("DLQ")
    assert copy is not None and copy.fields["dlq.reason"] == "backout"
    assert qm.depth("BOQ") == 1


def test_undo_of_a_batch_moves_only_the_messages_at_the_threshold(qm: QueueManager) -> None:
    qm.define_queue("BOQ")
    qm.define_queue("Q", redelivery_delay_ms=0, backout_threshold=2, backout_queue="BOQ", ordering="fifo")
    qm.put("Q", Message(b"a"))
    poison(qm, "Q", 1)  # a: 1 backout
    qm.put("Q", Message(b"b"))
    assert [m.data for m in qm.get_many("Q", 2, confirm_id=50)] == [b"a", b"b"]
    assert qm.undo("Q", 50) == 2
    assert [(m.data, m.backout_count) for m in qm.browse("Q")] == [(b"b", 1)]
    assert [m.data for m in qm.browse("BOQ")] == [b"a"]


def test_release_locks_counts_a_backout_too(qm: QueueManager) -> None:
    qm.define_queue("BOQ")
    qm.define_queue("Q", redelivery_delay_ms=0, backout_threshold=1, backout_queue="BOQ")
    qm.put("Q", Message(b"held by a getter that died"))
    assert qm.get("Q", confirm_id=7) is not None
    assert qm.release_locks("Q") == 1
    assert qm.depth("Q") == 0 and [m.data for m in qm.browse("BOQ")] == [b"held by a getter that died"]


def test_undo_without_counting_a_backout_never_moves(qm: QueueManager) -> None:
    qm.define_queue("BOQ")
    qm.define_queue("Q", redelivery_delay_ms=0, backout_threshold=1, backout_queue="BOQ")
    qm.put("Q", Message(b"handed back"))
    assert qm.get("Q", confirm_id=1) is not None
    assert qm.undo("Q", 1, count_backout=False) == 1
    again = qm.browse("Q")
    assert [(m.data, m.backout_count) for m in again] == [(b"handed back", 0)]
    assert qm.depth("BOQ") == 0


def test_an_expired_message_is_never_moved(boq: QueueManager, clock: ManualClock, rule: Recorder) -> None:
    qm = boq
    qm.add_rule("Q", rule)
    qm.put("Q", Message(b"late", expiry=Int32(1_000)))
    poison(qm, "Q", 2)
    assert qm.get("Q", confirm_id=10) is not None
    clock.advance(1_000)  # expires while locked by the third get
    qm.undo("Q", 10)
    assert qm.depth("BOQ") == 0
    assert qm.get("Q") is None  # it expires as usual, at the next check point
    assert rule.expired() == [(b"late", "get")]
    assert not [e for e in rule.events if e.reason == "backout"]


def test_a_message_without_expiry_stays_without_one_on_the_backout_queue(qm: QueueManager) -> None:
    qm.define_queue("BOQ", expiry_ms=1_000)  # the backout queue's own expiry does not re-time a move
    qm.define_queue("Q", redelivery_delay_ms=0, backout_threshold=1, backout_queue="BOQ")
    qm.put("Q", Message(b"keep"))
    poison(qm, "Q", 1)
    [moved] = qm.browse("BOQ")
    assert moved.remaining_expiry_ms is None


def test_a_full_backout_queue_keeps_the_message_where_it_is(
    qm: QueueManager, caplog: pytest.LogCaptureFixture
) -> None:
    qm.define_queue("BOQ", max_depth=1)
    qm.define_queue("Q", redelivery_delay_ms=0, backout_threshold=1, backout_queue="BOQ")
    qm.put("BOQ", Message(b"occupant"))
    uid = qm.put("Q", Message(b"poison"))
    with caplog.at_level(logging.WARNING, logger="edgeq"):
        poison(qm, "Q", 1)
    kept = qm.browse("Q")
    assert [(m.uid, m.backout_count) for m in kept] == [(uid, 1)]  # backed out as usual
    assert "backout queue 'BOQ'" in caplog.text and "full" in caplog.text
    assert qm.get("BOQ") is not None  # room again: the next backout moves it
    poison(qm, "Q", 1, first_confirm_id=2)
    assert qm.depth("Q") == 0 and [m.uid for m in qm.browse("BOQ")] == [uid]


def test_a_backout_queue_that_discards_to_make_room_makes_room(qm: QueueManager) -> None:
    qm.define_queue("BOQ", max_depth=1, on_full="discard-oldest")
    qm.define_queue("Q", redelivery_delay_ms=0, backout_threshold=1, backout_queue="BOQ")
    on_boq = Recorder()
    qm.add_rule("BOQ", on_boq)
    qm.put("BOQ", Message(b"oldest"))
    qm.put("Q", Message(b"poison"))
    poison(qm, "Q", 1)
    assert [m.data for m in qm.browse("BOQ")] == [b"poison"]
    assert on_boq.removed() == [(b"oldest", "overflow")]
    assert qm.queue_usage("BOQ").overflowed == 1


def test_a_uid_already_on_the_backout_queue_is_not_moved_twice(
    qm: QueueManager, caplog: pytest.LogCaptureFixture
) -> None:
    qm.define_queue("BOQ")
    qm.define_queue("Q", redelivery_delay_ms=0, backout_threshold=1, backout_queue="BOQ")
    uid = qm.put("Q", Message(b"poison"))
    qm.put("BOQ", Message(b"a copy", uid=uid))
    with caplog.at_level(logging.WARNING, logger="edgeq"):
        poison(qm, "Q", 1)
    assert [m.uid for m in qm.browse("Q")] == [uid]
    assert [m.data for m in qm.browse("BOQ")] == [b"a copy"]
    assert "already holds" in caplog.text


def test_a_clear_queue_backs_out_to_an_encrypted_one(tmp_path: Path) -> None:
    with QueueManager(tmp_path / "d.db", name="DEV1", keys=STORE_KEYS) as qm:
        qm.define_queue("BOQ", encryption="aes-256-gcm")
        qm.define_queue("Q", redelivery_delay_ms=0, backout_threshold=1, backout_queue="BOQ")
        qm.put("Q", Message(b"secret", fields={"k": "v"}))
        poison(qm, "Q", 1)
        [row] = stored_rows(tmp_path / "d.db", "BOQ")
        assert row.key_id is not None and b"secret" not in row.data  # sealed for BOQ
        moved = qm.get("BOQ")
        assert moved is not None and (moved.data, dict(moved.fields)) == (b"secret", {"k": "v"})
        assert qm.check().clean


def test_a_remote_queue_may_be_the_backout_queue(qm: QueueManager) -> None:
    qm.define_remote_queue("HOME.BOQ", target_qmgr="HOME")
    qm.define_queue("Q", redelivery_delay_ms=0, backout_threshold=1, backout_queue="HOME.BOQ")
    uid = qm.put("Q", Message(b"for the operator at home"))
    poison(qm, "Q", 1)
    assert [m.uid for m in qm.exchange.next_for_transmission("HOME.BOQ", 10)] == [uid]


# -- defining and altering --------------------------------------------------------------------


def test_attributes_are_defined_altered_and_shown(qm: QueueManager) -> None:
    qm.define_queue("BOQ")
    qm.define_queue("BOQ2")
    qm.define_queue("Q", redelivery_delay_ms=0, backout_threshold=5, backout_queue="BOQ")
    a = qm.queue_attributes("Q")
    assert (a.backout_threshold, a.backout_queue) == (5, "BOQ")
    assert a.as_dict()["backout_queue"] == "BOQ"
    assert qm.alter_queue("Q", backout_threshold=2).backout_threshold == 2
    assert qm.alter_queue("Q", backout_queue="BOQ2").backout_queue == "BOQ2"
    off = qm.alter_queue("Q", backout_threshold=None, backout_queue=None)
    assert (off.backout_threshold, off.backout_queue) == (None, None)
    qm.define_home_server_queue("INBOX", server="HOME", backout_threshold=3, backout_queue="BOQ")
    assert qm.queue_attributes("INBOX").backout_queue == "BOQ"


@pytest.mark.parametrize(
    ("attrs", "error", "match"),
    [
        ({"backout_threshold": 3}, InvalidArgument, "backout_threshold needs a backout_queue"),
        ({"backout_queue": "BOQ"}, InvalidArgument, "backout_queue needs a backout_threshold"),
        ({"backout_threshold": 0, "backout_queue": "BOQ"}, InvalidArgument,
         "backout_threshold must be a positive"),
        ({"backout_threshold": True, "backout_queue": "BOQ"}, InvalidType,
         "backout_threshold must be a positive"),
        ({"backout_threshold": 2, "backout_queue": "bad name!"}, InvalidArgument, "backout queue name"),
        ({"backout_threshold": 2, "backout_queue": 7}, InvalidType, "backout queue name"),
        ({"backout_threshold": 2, "backout_queue": "NOPE"}, QueueNotFound, "backout queue 'NOPE'"),
        ({"backout_threshold": 2, "backout_queue": "Q"}, InvalidArgument, "its own backout queue"),
    ],
)
def test_bad_backout_attributes_define_nothing(
    qm: QueueManager, attrs: dict[str, object], error: type[Exception], match: str
) -> None:
    qm.define_queue("BOQ")
    with pytest.raises(error, match=match):
        qm.define_queue("Q", **attrs)  # type: ignore[arg-type]
    assert "Q" not in qm.queue_names()


def test_alter_keeps_threshold_and_queue_together(boq: QueueManager) -> None:
    qm = boq
    with pytest.raises(InvalidArgument, match="backout_threshold needs a backout_queue"):
        qm.alter_queue("Q", backout_queue=None)
    with pytest.raises(InvalidArgument, match="backout_queue needs a backout_threshold"):
        qm.alter_queue("Q", backout_threshold=None)
    with pytest.raises(QueueNotFound, match="backout queue 'NOPE'"):
        qm.alter_queue("Q", backout_queue="NOPE")
    with pytest.raises(InvalidArgument, match="its own backout queue"):
        qm.alter_queue("BOQ", backout_threshold=1, backout_queue="BOQ")
    a = qm.queue_attributes("Q")
    assert (a.backout_threshold, a.backout_queue) == (3, "BOQ")


def test_a_remote_queue_has_no_backout_threshold(qm: QueueManager) -> None:
    qm.define_queue("BOQ")
    qm.define_remote_queue("OUT", target_qmgr="HOME")  # (define_remote_queue has no such keywords)
    with pytest.raises(InvalidArgument, match="remote queue"):
        qm.alter_queue("OUT", backout_threshold=1, backout_queue="BOQ")


def test_an_encrypted_queue_never_backs_out_to_a_clear_one(tmp_path: Path) -> None:
    with QueueManager(tmp_path / "d.db", name="DEV1", keys=STORE_KEYS) as qm:
        qm.define_queue("CLEAR")
        with pytest.raises(InvalidArgument, match="in clear"):
            qm.define_queue("SECRET", encryption="aes-256-gcm", backout_threshold=1, backout_queue="CLEAR")
        qm.define_queue("SECRET", encryption="aes-256-gcm")
        with pytest.raises(InvalidArgument, match="in clear"):
            qm.alter_queue("SECRET", backout_threshold=1, backout_queue="CLEAR")


def test_a_backout_queue_in_use_cannot_be_deleted(boq: QueueManager) -> None:
    qm = boq
    with pytest.raises(InvalidArgument, match="backout queue of 'Q'"):
        qm.delete_queue("BOQ")
    qm.alter_queue("Q", backout_threshold=None, backout_queue=None)
    qm.delete_queue("BOQ")
    assert qm.queue_names() == ["Q"]


# -- one transaction ------------------------------------------------------------------------

_LOOP = textwrap.dedent(
    """
    import sys
    from edgeq import QueueManager
    qm = QueueManager(sys.argv[1])
    n = 1
    while True:
        got = qm.get("Q", confirm_id=n)
        if got is None:
            break
        qm.undo("Q", n)
        print(got.uid, flush=True)
        n += 1
    print("done", flush=True)
    """
)


def test_a_kill_mid_loop_leaves_every_message_on_exactly_one_queue(tmp_path: Path) -> None:
    """SIGKILL a process undoing poison messages (each undo moves one): whatever instant
    the kill hits, each message is on Q or on BOQ, never both nor neither, with the
    counters in step and every row's checksum that of its queue."""
    path = tmp_path / "d.db"
    with QueueManager(path, name="DEV1") as qm:
        qm.define_queue("BOQ")
        qm.define_queue("Q", redelivery_delay_ms=0, backout_threshold=1, backout_queue="BOQ")
        sent = {str(qm.put("Q", Message(f"m{i}".encode() * 50))) for i in range(400)}
    child = subprocess.Popen([sys.executable, "-c", _LOOP, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        moved = [child.stdout.readline().strip() for _ in range(40)]  # 40 moves committed and reported
    finally:
        child.kill()
        child.wait()
        if child.stdout is not None:
            child.stdout.close()
    with QueueManager(path) as qm:
        qm.release_locks("Q")  # the get in flight when killed, if any, was locked: count it back (moved)
        on_q = {str(m.uid) for m in qm.browse("Q")}
        on_boq = {str(m.uid) for m in qm.browse("BOQ")}
        assert not on_q & on_boq
        assert on_q | on_boq == sent
        assert set(moved) <= on_boq
        assert qm.depth("Q") + qm.depth("BOQ") == 400
        assert qm.check().clean


# -- undoing part of a batch -------------------------------------------------------------------


def test_undo_of_some_uids_leaves_the_rest_locked(qm: QueueManager) -> None:
    qm.define_queue("Q", ordering="fifo")
    for data in (b"a", b"b", b"c"):
        qm.put("Q", Message(data))
    a, b, c = qm.get_many("Q", 3, confirm_id=8)
    assert qm.undo("Q", 8, uids=[b.uid], count_backout=False) == 1
    assert [(m.data, m.backout_count) for m in qm.browse("Q")] == [(b"b", 0)]
    qm.confirm_get("Q", a.uid)  # the others are still locked under 8
    assert qm.undo("Q", 8, uids=[str(c.uid), a.uid]) == 1
    assert [(m.data, m.backout_count) for m in qm.browse("Q")] == [(b"b", 0), (b"c", 1)]
    with pytest.raises(ConfirmIdNotFound, match="none of the 1 uid"):
        qm.undo("Q", 8, uids=[a.uid])
    with pytest.raises(InvalidType, match="sequence of uids"):
        qm.undo("Q", 8, uids=str(a.uid))  # type: ignore[arg-type]

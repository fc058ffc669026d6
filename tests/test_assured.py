"""Assured (two-phase) put and get, duplicates and resends."""

from __future__ import annotations

import pytest

from edgeq import Int32, ManualClock, Message, MessageUID, QueueManager
from edgeq.errors import ConfirmIdNotFound, DuplicateMessage, MessageExpired, MessageNotFound
from tests.conftest import Recorder


def test_assured_put_is_invisible_until_confirmed(qm: QueueManager) -> None:
    qm.define_queue("Q")
    uid = qm.put("Q", Message(b"x"), confirm_id=17)
    assert qm.get("Q") is None and qm.browse("Q") == []
    assert qm.depth("Q") == 1  # depth counts locked messages
    qm.confirm_put("Q", uid)
    qm.confirm_put("Q", uid)  # twice is harmless
    got = qm.get("Q")
    assert got is not None and got.uid == uid


def test_confirmed_puts_are_ordered_by_confirm_time(qm: QueueManager) -> None:
    qm.define_queue("Q", ordering="fifo")
    first = qm.put("Q", Message(b"first"), confirm_id=1)
    qm.put("Q", Message(b"plain"))
    second = qm.put("Q", Message(b"second"), confirm_id=2)
    qm.confirm_put("Q", second)
    qm.confirm_put("Q", first)
    assert [m.data for m in qm.browse("Q")] == [b"plain", b"second", b"first"]


def test_undo_removes_a_failed_assured_put(qm: QueueManager, rule: Recorder) -> None:
    qm.define_queue("Q")
    qm.add_rule("Q", rule)
    uid = qm.put("Q", Message(b"x"), confirm_id=5)
    assert qm.undo("Q", 5) == 1
    assert qm.depth("Q") == 0
    assert rule.removed() == [(b"x", "deleted")]
    with pytest.raises(MessageNotFound, match="put it again"):
        qm.confirm_put("Q", uid)


def test_assured_get_confirm_deletes(qm: QueueManager, rule: Recorder) -> None:
    qm.define_queue("Q")
    qm.add_rule("Q", rule)
    qm.put("Q", Message(b"x"))
    got = qm.get("Q", confirm_id=18)
    assert got is not None
    assert qm.get("Q") is None  # locked: nobody else gets it
    qm.confirm_get("Q", got.uid)
    assert qm.depth("Q") == 0
    assert rule.removed() == [(b"x", "confirmed")]
    with pytest.raises(MessageNotFound, match="not on the queue"):
        qm.confirm_get("Q", got.uid)


def test_undo_restores_a_failed_assured_get_in_place(qm: QueueManager, clock: ManualClock) -> None:
    qm.define_queue("Q", ordering="fifo")
    qm.put("Q", Message(b"a"))
    qm.put("Q", Message(b"b"))
    got = qm.get("Q", confirm_id=3)
    assert got is not None and got.data == b"a" and got.backout_count == 0
    qm.undo("Q", 3)
    other = qm.get("Q", confirm_id=5)  # a waits out its redelivery delay (1 s); b is not held up
    assert other is not None and other.data == b"b"
    qm.undo("Q", 5, count_backout=False)  # handed back: no backout, no delay
    clock.advance(1_000)
    again = qm.get("Q", confirm_id=4)
    assert again is not None and again.data == b"a" and again.backout_count == 1
    with pytest.raises(ConfirmIdNotFound, match="confirm id 3"):
        qm.undo("Q", 3)


def test_get_many_with_confirm_id_locks_all_and_undo_restores_all(qm: QueueManager) -> None:
    qm.define_queue("Q")
    qm.put_many("Q", [Message(b"%d" % i) for i in range(5)])
    got = qm.get_many("Q", 3, confirm_id=9)
    assert [m.data for m in got] == [b"0", b"1", b"2"]
    assert [m.data for m in qm.browse("Q")] == [b"3", b"4"]
    assert qm.undo("Q", 9) == 3
    assert len(qm.browse("Q")) == 5


def test_confirm_get_of_expired_locked_message_discards_and_raises(
    qm: QueueManager, clock: ManualClock, rule: Recorder
) -> None:
    qm.define_queue("Q")
    qm.add_rule("Q", rule)
    qm.put("Q", Message(b"x", expiry=Int32(100)))
    got = qm.get("Q", confirm_id=1)
    assert got is not None
    clock.advance(100)
    with pytest.raises(MessageExpired, match="expired while locked"):
        qm.confirm_get("Q", got.uid)
    assert rule.expired() == [(b"x", "get")]
    assert qm.depth("Q") == 0


def test_confirm_put_of_expired_message_discards_and_raises(
    qm: QueueManager, clock: ManualClock, rule: Recorder
) -> None:
    qm.define_queue("Q")
    qm.add_rule("Q", rule)
    uid = qm.put("Q", Message(b"x", expiry=Int32(100)), confirm_id=1)
    clock.advance(150)
    with pytest.raises(MessageExpired):
        qm.confirm_put("Q", uid)
    assert rule.expired() == [(b"x", "add")]


def test_duplicate_uid_is_refused_unless_resend_replaces_unconfirmed(qm: QueueManager) -> None:
    qm.define_queue("Q")
    uid = MessageUID("DEV9", 1_000_000)
    qm.put("Q", Message(b"v1", uid=uid), confirm_id=1)
    with pytest.raises(DuplicateMessage, match="resend=True"):
        qm.put("Q", Message(b"v2", uid=uid), confirm_id=2)
    qm.put("Q", Message(b"v2", uid=uid, resend=True), confirm_id=2)
    assert qm.depth("Q") == 1
    with pytest.raises(ConfirmIdNotFound):
        qm.undo("Q", 1)  # the replaced copy's confirm id is gone
    qm.confirm_put("Q", uid)
    with pytest.raises(DuplicateMessage, match="already holds confirmed"):
        qm.put("Q", Message(b"v3", uid=uid, resend=True))
    got = qm.get("Q")
    assert got is not None and got.data == b"v2"


def test_put_many_is_atomic(qm: QueueManager) -> None:
    qm.define_queue("Q", max_depth=3)
    qm.put("Q", Message(b"keep"))
    from edgeq.errors import QueueFull

    with pytest.raises(QueueFull):
        qm.put_many("Q", [Message(b"1"), Message(b"2"), Message(b"3")])
    assert [m.data for m in qm.browse("Q")] == [b"keep"]
    uid = MessageUID("X", 5)
    with pytest.raises(DuplicateMessage, match="twice"):
        qm.put_many("Q", [Message(b"a", uid=uid), Message(b"b", uid=uid)])
    assert qm.depth("Q") == 1


def test_uids_strictly_increase_even_when_clock_steps_back(
    open_qm: object, clock: ManualClock
) -> None:
    qm = open_qm()  # type: ignore[operator]
    qm.define_queue("Q")
    a = qm.put("Q", Message(b"a"))
    clock.set(clock() - 3_600_000)
    b = qm.put("Q", Message(b"b"))
    qm.close()
    qm2 = open_qm()  # type: ignore[operator]
    c = qm2.put("Q", Message(b"c"))
    assert a.stamp < b.stamp < c.stamp
    assert str(a) == f"{qm2.origin}.{a.stamp}" and MessageUID.parse(str(a)) == a
    assert a.qmgr == "DEV1" and a.origin == c.origin  # the incarnation is the store's, kept across opens

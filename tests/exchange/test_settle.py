"""Store identity and settling: incarnations, low-water marks, remembered uids that
are forgotten only once their sender has settled them (no time window)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from edgeq import ManualClock, Message, MessageUID, QueueManager
from edgeq.errors import EdgeqError, InvalidArgument

DEVICE = "DEV1:abcde23456"


def confirmed(qm: QueueManager, queue: str, uid: MessageUID) -> None:
    qm.put_each(queue, [Message(b"x", uid=uid)], confirm_id=1)
    assert [r.status for r in qm.confirm_put_each(queue, [uid])] == ["confirmed"]


def test_each_store_file_has_its_own_incarnation_kept_across_opens(tmp_path: Path) -> None:
    with QueueManager(tmp_path / "a.db", name="DEV1") as a:
        origin = a.origin
    with QueueManager(tmp_path / "a.db") as again, QueueManager(tmp_path / "b.db", name="DEV1") as b:
        assert again.origin == origin and b.origin != origin
        assert MessageUID.parse(f"{origin}.5").qmgr == "DEV1" == b.name


def test_uid_forms_old_and_new_parse_and_bad_ones_are_refused() -> None:
    assert MessageUID.parse("DEV1.42").incarnation is None
    assert MessageUID.parse("HOME.SRV:k3x9.42") == MessageUID("HOME.SRV:k3x9", 42)
    for bad in ["DEV1:.42", "DEV1:UPPER.42", "DEV1:a:b.42", ":abc.42", "DEV1:" + "a" * 17 + ".42"]:
        with pytest.raises(InvalidArgument):
            MessageUID.parse(bad)


def test_a_settled_origin_is_never_forgotten_by_age(
    open_qm: Callable[..., QueueManager], clock: ManualClock
) -> None:
    qm = open_qm(name="HOME", remember_confirmed_ms=60_000)
    qm.define_queue("Q")
    settling, legacy = MessageUID(DEVICE, 10), MessageUID("OLD1", 10)
    confirmed(qm, "Q", settling)
    confirmed(qm, "Q", legacy)
    assert qm.exchange.settle(DEVICE, 5) == 0  # the device still holds stamp 5 and up: nothing forgotten
    clock.advance(7 * 86_400_000)
    qm.confirm_put_each("Q", [])  # a confirm prunes the window
    assert qm.exchange.remembered_count(DEVICE) == 1 and qm.exchange.remembered_count("OLD1") == 0
    assert qm.put_each("Q", [Message(b"x", uid=settling, resend=True)], confirm_id=2)[0].status == "duplicate"
    assert qm.exchange.settle(DEVICE, 11) == 1 and qm.exchange.remembered_count() == 0
    assert qm.exchange.settle(DEVICE, 3) == 0  # an older mark (a replayed request) changes nothing


def test_settled_below_is_the_oldest_held_stamp_or_the_next_one(qm: QueueManager) -> None:
    qm.define_remote_queue("A", target_qmgr="HOME")
    qm.define_remote_queue("B", target_qmgr="HOME")
    qm.define_queue("LOCAL")
    first = qm.put("A", Message(b"1"))
    second = qm.put("B", Message(b"2"))
    qm.put("LOCAL", Message(b"not transmitted"))
    assert qm.exchange.settled_below() == first.stamp
    qm.exchange.transmitted("A", [first])
    assert qm.exchange.settled_below() == second.stamp
    qm.exchange.transmitted("B", [second])
    third = qm.put("A", Message(b"3"))
    assert second.stamp < qm.exchange.settled_below() == third.stamp
    qm.exchange.transmitted("A", [third])
    assert qm.exchange.settled_below() == third.stamp + 1


def test_settle_queue_keeps_what_the_sender_still_holds(qm: QueueManager) -> None:
    qm.define_queue("INBOX")
    qm.define_queue("OTHER")
    for uid in (MessageUID("HOME:aaaa", 1), MessageUID("HOME:aaaa", 5), MessageUID("X:bbbb", 2)):
        confirmed(qm, "INBOX", uid)
    confirmed(qm, "OTHER", MessageUID("X:bbbb", 3))
    # The server still holds HOME:aaaa from stamp 5 on, and nothing of X:bbbb.
    assert qm.exchange.settle_queue("INBOX", {"HOME:aaaa": 5}) == 2
    counts = (qm.exchange.remembered_count("HOME:aaaa"), qm.exchange.remembered_count("X:bbbb"))
    assert counts == (1, 1)  # OTHER untouched
    statuses = [r.status for r in qm.put_each("INBOX", [Message(b"x", uid=MessageUID("HOME:aaaa", 5))])]
    assert statuses == ["duplicate"]


def test_held_low_water_covers_every_state(qm: QueueManager) -> None:
    qm.define_queue("Q")
    qm.put_each("Q", [Message(b"a", uid=MessageUID("D:aa", 9))], confirm_id=4)  # put-locked
    qm.put("Q", Message(b"b", uid=MessageUID("D:aa", 12)))
    qm.put("Q", Message(b"c", uid=MessageUID("E", 3)))
    assert qm.get("Q", confirm_id=5) is not None  # get-locked
    assert qm.exchange.held_low_water("Q") == {"D:aa": 9, "E": 3}


@pytest.mark.parametrize("call", [
    lambda qm: qm.exchange.settle("not an origin!", 1),
    lambda qm: qm.exchange.settle(DEVICE, -1),
    lambda qm: qm.exchange.settle(DEVICE, True),
    lambda qm: qm.exchange.settle_queue("Q", {"HOME": "5"}),
    lambda qm: qm.exchange.settle_queue("Q", [("HOME", 5)]),
    lambda qm: qm.exchange.remembered_count("bad origin"),
])
def test_bad_arguments_are_refused_clearly(qm: QueueManager, call: Callable[[QueueManager], object]) -> None:
    qm.define_queue("Q")
    with pytest.raises(EdgeqError) as caught:
        call(qm)
    assert "must" in str(caught.value) or "not valid" in str(caught.value)

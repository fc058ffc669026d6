"""MQe expiry semantics: the five check points, discard order, queue vs message expiry, caps."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from freezegun import freeze_time

from edgeq import Int32, Int64, ManualClock, Message, QueueManager
from edgeq.errors import ExpiryError, QueueNotEmpty
from tests.conftest import T0, Recorder


def msg(data: bytes, ms: int | None = None, **kw: object) -> Message:
    return Message(data, expiry=None if ms is None else Int32(ms), **kw)  # type: ignore[arg-type]


# -- the five check points -----------------------------------------------------------------


def test_added_already_expired_is_discarded_and_never_stored(qm: QueueManager, rule: Recorder) -> None:
    qm.define_queue("Q")
    qm.add_rule("Q", rule)
    uid = qm.put("Q", Message(b"stale", expiry=Int64(T0 - 1)))
    assert uid.origin == qm.origin and uid.qmgr == "DEV1"
    assert rule.expired() == [(b"stale", "add")]
    assert qm.depth("Q") == 0
    assert ("added", "stale") not in [(k, getattr(m, "data", b"").decode()) for k, m, _ in rule.calls]


def test_absolute_expiry_equal_to_now_is_expired(qm: QueueManager, rule: Recorder) -> None:
    qm.define_queue("Q")
    qm.add_rule("Q", rule)
    qm.put("Q", Message(b"edge", expiry=Int64(T0)))
    assert rule.expired() == [(b"edge", "add")]


def test_removed_get_discards_expired_and_never_returns_it(
    qm: QueueManager, clock: ManualClock, rule: Recorder
) -> None:
    qm.define_queue("Q", ordering="fifo")
    qm.add_rule("Q", rule)
    qm.put("Q", msg(b"short", 100))
    qm.put("Q", msg(b"long", 10_000))
    clock.advance(100)  # exactly at the deadline: expired
    got = qm.get("Q")
    assert got is not None and got.data == b"long"
    assert rule.expired() == [(b"short", "get")]


def test_get_on_only_expired_returns_none(qm: QueueManager, clock: ManualClock, rule: Recorder) -> None:
    qm.define_queue("Q")
    qm.add_rule("Q", rule)
    qm.put("Q", msg(b"a", 10))
    clock.advance(11)
    assert qm.get("Q") is None
    assert rule.expired() == [(b"a", "get")]


def test_activated_discards_expired_in_every_state(
    open_qm: Callable[..., QueueManager], clock: ManualClock
) -> None:
    qm = open_qm()
    qm.define_queue("Q")
    qm.put("Q", msg(b"ready", 50))
    qm.put("Q", msg(b"put-locked", 50), confirm_id=1)
    qm.put("Q", msg(b"get-locked", 50, priority=9))
    assert qm.get("Q", confirm_id=2) is not None
    qm.put("Q", msg(b"alive", 10_000))
    qm.close()
    clock.advance(60)
    qm2 = open_qm()
    rule = Recorder()
    qm2.add_rule("Q", rule)  # attaching does not activate: first use below does
    assert [m.data for m in qm2.browse("Q")] == [b"alive"]
    assert (sorted(rule.expired())
            == [(b"get-locked", "activate"), (b"put-locked", "activate"), (b"ready", "activate")])
    assert ("activated", "Q", None) in rule.calls
    assert qm2.depth("Q") == 1


def test_activate_explicitly_returns_count(qm: QueueManager, clock: ManualClock, rule: Recorder) -> None:
    qm.define_queue("Q")
    qm.add_rule("Q", rule)
    qm.put("Q", msg(b"a", 5))
    qm.put("Q", msg(b"b", 5))
    clock.advance(5)
    assert qm.activate("Q") == 2
    assert [w for _, w in rule.expired()] == ["activate", "activate"]


def test_deleted_purges_expired_first_then_requires_empty(
    qm: QueueManager, clock: ManualClock, rule: Recorder
) -> None:
    qm.define_queue("Q")
    qm.add_rule("Q", rule)
    qm.put("Q", msg(b"old", 10))
    qm.put("Q", msg(b"new", 1_000))
    clock.advance(10)
    with pytest.raises(QueueNotEmpty, match="1 unexpired"):
        qm.delete_queue("Q")
    assert rule.expired() == [(b"old", "delete")]
    clock.advance(1_000)
    qm.delete_queue("Q")
    assert rule.expired()[-1] == (b"new", "delete")
    assert ("queue_deleted", "Q", None) in rule.calls
    assert qm.queue_names() == []


def test_depth_purges_first_and_never_counts_expired(
    qm: QueueManager, clock: ManualClock, rule: Recorder
) -> None:
    qm.define_queue("Q")
    qm.add_rule("Q", rule)
    for i in range(5):
        qm.put("Q", msg(b"m%d" % i, 100 * (i + 1)))
    clock.advance(250)
    assert qm.depth("Q") == 3
    assert rule.expired() == [(b"m0", "depth"), (b"m1", "depth")]


def test_browse_discards_and_never_returns_expired_or_locked(
    qm: QueueManager, clock: ManualClock, rule: Recorder
) -> None:
    qm.define_queue("Q")
    qm.add_rule("Q", rule)
    qm.put("Q", msg(b"exp", 10))
    qm.put("Q", msg(b"live", 1_000))
    qm.put("Q", msg(b"locked", 1_000, priority=9))
    assert qm.get("Q", confirm_id=7) is not None
    clock.advance(10)
    assert [m.data for m in qm.browse("Q")] == [b"live"]
    assert rule.expired() == [(b"exp", "browse")]


def test_sweep_discards_all_expired(qm: QueueManager, clock: ManualClock, rule: Recorder) -> None:
    qm.define_queue("A")
    qm.define_queue("B")
    qm.add_rule("A", rule)
    qm.put("A", msg(b"a", 10))
    qm.put("B", msg(b"b", 10))
    qm.put("B", msg(b"b2", 100))
    clock.advance(10)
    assert qm.sweep_expired() == 2
    assert rule.expired() == [(b"a", "sweep")]
    assert qm.sweep_expired("B") == 0


def test_sweep_on_a_freshly_opened_queue_manager_counts_what_activation_discards(
    open_qm: Callable[..., QueueManager], clock: ManualClock
) -> None:
    qm = open_qm()
    qm.define_queue("Q")
    qm.put("Q", msg(b"old", 1_000))
    qm.close()
    clock.advance(1_000)
    assert open_qm().sweep_expired() == 1


# -- discard order ---------------------------------------------------------------------------


def test_fifo_get_discards_up_to_first_unexpired_only(
    qm: QueueManager, clock: ManualClock, rule: Recorder
) -> None:
    qm.define_queue("Q", ordering="fifo")
    qm.add_rule("Q", rule)
    qm.put("Q", msg(b"e1", 10, priority=9))
    qm.put("Q", msg(b"e2", 10))
    qm.put("Q", msg(b"live", 1_000))
    qm.put("Q", msg(b"e3-behind", 10))
    clock.advance(10)
    got = qm.get("Q")
    assert got is not None and got.data == b"live"
    assert rule.expired() == [(b"e1", "get"), (b"e2", "get")]
    assert qm.get("Q") is None
    assert rule.expired()[-1] == (b"e3-behind", "get")


def test_priority_get_discards_only_expired_ahead(
    qm: QueueManager, clock: ManualClock, rule: Recorder
) -> None:
    qm.define_queue("Q")  # priority ordering
    qm.add_rule("Q", rule)
    qm.put("Q", msg(b"p9-exp", 10, priority=9))
    qm.put("Q", msg(b"p5-exp-before", 10, priority=5))
    qm.put("Q", msg(b"p5-live", 1_000, priority=5))
    qm.put("Q", msg(b"p5-exp-after", 10, priority=5))
    qm.put("Q", msg(b"p1-exp", 10, priority=1))
    clock.advance(10)
    got = qm.get("Q")
    assert got is not None and got.data == b"p5-live"
    assert rule.expired() == [(b"p9-exp", "get"), (b"p5-exp-before", "get")]


def test_priority_then_arrival_order(qm: QueueManager) -> None:
    qm.define_queue("Q", default_priority=4)
    for data, prio in [(b"a", 1), (b"b", None), (b"c", 9), (b"d", 4), (b"e", 9)]:
        qm.put("Q", Message(data, priority=prio))
    order = []
    while (m := qm.get("Q")) is not None:
        order.append((m.data, m.priority))
    assert order == [(b"c", 9), (b"e", 9), (b"b", 4), (b"d", 4), (b"a", 1)]


# -- remaining expiry, relative vs absolute, helpers ----------------------------------------


def test_remaining_expiry_reported_on_get(qm: QueueManager, clock: ManualClock) -> None:
    qm.define_queue("Q")
    qm.put("Q", msg(b"x", 60_000))
    qm.put("Q", Message(b"forever"))
    clock.advance(15_000)
    got = qm.get("Q")
    assert got is not None and got.remaining_expiry_ms == 45_000 and got.expiry == Int32(60_000)
    forever = qm.get("Q")
    assert forever is not None and forever.remaining_expiry_ms is None


def test_relative_counts_from_creation_absolute_is_absolute(qm: QueueManager, clock: ManualClock) -> None:
    qm.define_queue("Q")
    qm.put("Q", Message(b"rel").expire_after(timedelta(seconds=2)))
    qm.put("Q", Message(b"abs").expire_at(datetime.fromtimestamp((T0 + 3_000) / 1000, tz=UTC)))
    clock.advance(2_500)
    assert [m.data for m in qm.browse("Q")] == [b"abs"]
    clock.advance(500)
    assert qm.browse("Q") == []


def test_forwarded_message_keeps_identity_and_relative_deadline(
    open_qm: Callable[..., QueueManager], tmp_path: object, clock: ManualClock
) -> None:
    src = open_qm()
    src.define_queue("OUT")
    uid = src.put("OUT", msg(b"fwd", 1_000))
    clock.advance(400)
    got = src.get("OUT")
    assert got is not None
    from pathlib import Path

    home = QueueManager(Path(str(tmp_path)) / "home.db", name="HOME", clock=clock)
    try:
        home.define_queue("IN")
        assert home.put("IN", got) == uid
        again = home.get("IN")
        assert again is not None and again.uid == uid and again.remaining_expiry_ms == 600
    finally:
        home.close()


@pytest.mark.parametrize("bad", [60_000, 0, -5, True, 1.5, "60s"])
def test_bad_expiry_values_are_refused_with_help(bad: object) -> None:
    with pytest.raises(ExpiryError, match=r"Int32\(ms\).*Int64\(epoch_ms\)"):
        Message(b"x", expiry=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [Int32(0), Int32(-1), Int64(0), Int64(-10)])
def test_non_positive_typed_expiry_is_refused(bad: Int32 | Int64) -> None:
    with pytest.raises(ExpiryError):
        Message(b"x", expiry=bad)


def test_expire_helpers_validate() -> None:
    with pytest.raises(ExpiryError):
        Message(b"x").expire_after(2**31)
    with pytest.raises(ExpiryError, match="timezone-aware"):
        Message(b"x").expire_at(datetime(2030, 1, 1))
    assert Message(b"x").expire_after(2**31 - 1).expiry == Int32(2**31 - 1)


# -- queue expiry and caps -------------------------------------------------------------------


def test_queue_expiry_counts_from_arrival_and_message_expiry_overrides(
    qm: QueueManager, clock: ManualClock
) -> None:
    qm.define_queue("Q", expiry_ms=1_000, ordering="fifo")
    qm.put("Q", Message(b"queue-timed"))
    qm.put("Q", msg(b"own-longer", 5_000))
    qm.put("Q", msg(b"own-shorter", 500))
    clock.advance(500)
    assert [m.data for m in qm.browse("Q")] == [b"queue-timed", b"own-longer"]
    clock.advance(500)
    assert [m.data for m in qm.browse("Q")] == [b"own-longer"]


def test_altering_queue_expiry_retimes_messages_without_their_own(
    qm: QueueManager, clock: ManualClock
) -> None:
    qm.define_queue("Q", ordering="fifo")
    qm.put("Q", Message(b"plain"))
    qm.put("Q", msg(b"own", 10_000))
    clock.advance(2_000)
    qm.alter_queue("Q", expiry_ms=1_000)  # "plain" arrived 2 s ago: now expired
    assert [m.data for m in qm.browse("Q")] == [b"own"]
    qm.put("Q", Message(b"later"))
    qm.alter_queue("Q", expiry_ms=None)
    clock.advance(100_000)
    assert [m.data for m in qm.browse("Q")] == [b"later"]


def test_cap_reduces_longer_keeps_shorter_and_leaves_existing(qm: QueueManager, clock: ManualClock) -> None:
    qm.define_queue("Q", ordering="fifo")
    qm.put("Q", Message(b"before-cap"))
    qm.alter_queue("Q", cap_expiry_ms=1_000)
    qm.put("Q", msg(b"longer", 60_000))
    qm.put("Q", msg(b"shorter", 500))
    qm.put("Q", Message(b"unlimited"))
    msgs = {m.data: m for m in qm.browse("Q")}
    assert msgs[b"longer"].remaining_expiry_ms == 1_000
    assert msgs[b"longer"].expiry == Int64(T0 + 1_000)  # carried onward as the capped deadline
    assert msgs[b"shorter"].expiry == Int32(500)
    assert msgs[b"unlimited"].remaining_expiry_ms == 1_000
    assert msgs[b"before-cap"].remaining_expiry_ms is None
    clock.advance(1_000)
    assert [m.data for m in qm.browse("Q")] == [b"before-cap"]


def test_cap_and_queue_expiry_lowest_wins(qm: QueueManager, clock: ManualClock) -> None:
    qm.define_queue("Q", expiry_ms=300, cap_expiry_ms=1_000)
    qm.put("Q", Message(b"x"))
    assert qm.browse("Q")[0].remaining_expiry_ms == 300


# -- time comes from Python, so freezegun works ----------------------------------------------


def test_freezegun_controls_expiry(tmp_path: object) -> None:
    from pathlib import Path

    with freeze_time("2026-01-01 00:00:00") as frozen, QueueManager(Path(str(tmp_path)) / "f.db",
                                                                    name="DEV1") as qm:
        qm.define_queue("Q")
        qm.put("Q", Message(b"x").expire_after(timedelta(minutes=1)))
        frozen.tick(timedelta(seconds=59))
        assert qm.depth("Q") == 1
        frozen.tick(timedelta(seconds=1))
        assert qm.depth("Q") == 0

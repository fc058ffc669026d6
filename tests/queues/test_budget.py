"""The flash budget (edgeq.queues.budget): max_bytes beside max_depth per queue, max_store_bytes
per queue manager, and what a put does when they are reached (on_full: reject,
discard-oldest, discard-lowest-priority). Time is frozen (an injected ManualClock, and
freezegun once); every discard must be seen by the rules, across a reopen too, and by
concurrent putters (threads and a second process) the budget is never exceeded."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path

import pytest
from freezegun import freeze_time

from edgeq import Int32, Int64, ManualClock, Message, MessageUID, QueueManager
from edgeq.crypto import SEAL_OVERHEAD, IntegrityError, StoreKeys
from edgeq.errors import (
    InvalidArgument,
    InvalidType,
    MessageExpired,
    MessageTooLarge,
    QueueFull,
    StoreFull,
)
from edgeq.queues.attributes import QueueUsage
from tests.conftest import Recorder
from tests.test_batches import selects

ROOT = Path(__file__).resolve().parents[2]


def msg(data: bytes, priority: int | None = None, **kwargs: object) -> Message:
    return Message(data, priority=priority, **kwargs)  # type: ignore[arg-type]


def real_usage(path: Path) -> dict[str, tuple[int, int, int, int]]:
    """Per queue: (depth and bytes as kept, count and bytes as summed from the rows)."""
    with closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as conn:
        rows = conn.execute(
            "SELECT q.name, q.depth, q.bytes, count(m.id), "
            "ifnull(sum(length(m.data) + ifnull(length(m.fields), 0)), 0) "
            "FROM queues q LEFT JOIN messages m ON m.queue_id = q.id GROUP BY q.id"
        ).fetchall()
    return {name: (depth, held, count, size) for name, depth, held, count, size in rows}


def assert_in_step(path: Path) -> None:
    for name, (depth, held, count, size) in real_usage(path).items():
        assert (depth, held) == (count, size), (
            f"queue {name}: kept depth/bytes {depth}/{held}, rows {count}/{size}")


def removed(rule: Recorder, reason: str = "overflow") -> list[bytes]:
    return [data for data, why in rule.removed() if why == reason]


@pytest.fixture
def plain(db_path: Path, clock: ManualClock) -> Iterator[QueueManager]:
    """A queue manager without encryption: for tests that count bytes exactly."""
    qm = QueueManager(db_path, name="DEV1", clock=clock)
    yield qm
    qm.close()


# -- attributes -----------------------------------------------------------------------------------


def test_budget_attributes_are_defined_altered_and_kept(open_qm: Callable[..., QueueManager]) -> None:
    qm = open_qm()
    qm.define_queue("Q", max_bytes=1_000, on_full="discard-oldest")
    attrs = qm.queue_attributes("Q")
    assert (attrs.max_bytes, attrs.on_full, attrs.refusal_limit) == (1_000, "discard-oldest", None)
    assert qm.queue_attributes("Q").as_dict()["on_full"] == "discard-oldest"
    qm.define_queue("PLAIN")
    assert (qm.queue_attributes("PLAIN").max_bytes, qm.queue_attributes("PLAIN").on_full) == (None, "reject")
    altered = qm.alter_queue("Q", max_bytes=None, on_full="discard-lowest-priority")
    assert (altered.max_bytes, altered.on_full) == (None, "discard-lowest-priority")
    qm.close()
    again = open_qm()
    assert again.queue_attributes("Q").on_full == "discard-lowest-priority"


@pytest.mark.parametrize(
    ("kwargs", "error", "text"),
    [
        ({"max_bytes": 0}, InvalidArgument, "max_bytes must be a positive"),
        ({"max_bytes": True}, InvalidType, "max_bytes"),
        ({"on_full": "drop"}, InvalidArgument, "on_full must be one of 'reject', 'discard-oldest'"),
        ({"on_full": None}, InvalidArgument, "on_full must be one of"),
    ],
)
def test_bad_budget_attributes_are_refused(
    qm: QueueManager, kwargs: dict[str, object], error: type, text: str
) -> None:
    with pytest.raises(error, match=text):
        qm.define_queue("Q", **kwargs)  # type: ignore[arg-type]
    qm.define_queue("Q")
    with pytest.raises(error, match=text):
        qm.alter_queue("Q", **kwargs)


def test_refusal_limit_is_for_remote_queues(qm: QueueManager) -> None:
    qm.define_remote_queue("ORDERS", target_qmgr="HOME", refusal_limit=3, max_bytes=500,
                           on_full="discard-oldest")
    attrs = qm.queue_attributes("ORDERS")
    assert (attrs.refusal_limit, attrs.max_bytes, attrs.on_full) == (3, 500, "discard-oldest")
    assert qm.alter_queue("ORDERS", refusal_limit=None).refusal_limit is None
    assert qm.alter_queue("ORDERS", refusal_limit=10).refusal_limit == 10
    with pytest.raises(InvalidArgument, match="refusal_limit must be a positive"):
        qm.alter_queue("ORDERS", refusal_limit=0)
    qm.define_queue("LOCAL")
    with pytest.raises(InvalidArgument, match="refusal_limit applies to remote queues only"):
        qm.alter_queue("LOCAL", refusal_limit=3)
    with pytest.raises(InvalidArgument, match="refusal_limit applies to remote queues only"):
        qm.define_home_server_queue("INBOX", server="HOME", refusal_limit=3)
    assert "INBOX" not in qm.queue_names()


@pytest.mark.parametrize("bad", [0, -5, True, 1.5, "100"])
def test_max_store_bytes_is_checked(tmp_path: Path, bad: object) -> None:
    with pytest.raises((InvalidArgument, InvalidType), match="max_store_bytes"):
        QueueManager(tmp_path / "d.db", name="DEV1", max_store_bytes=bad)  # type: ignore[arg-type]
    assert not (tmp_path / "d.db").exists()


# -- reject ---------------------------------------------------------------------------------------


def test_reject_refuses_what_does_not_fit_in_max_bytes(plain: QueueManager, rule: Recorder) -> None:
    qm = plain
    qm.define_queue("Q", max_bytes=10, ordering="fifo")
    qm.add_rule("Q", rule)
    qm.put_many("Q", [msg(b"12345"), msg(b"6789")])
    with pytest.raises(QueueFull, match=r"max_bytes.*on_full") as caught:
        qm.put("Q", msg(b"ab"))
    assert not isinstance(caught.value, StoreFull)
    fits = qm.put("Q", msg(b"a"))
    results = qm.put_each("Q", [msg(b"b"), msg(b"")])
    assert [r.status for r in results] == ["refused", "stored"]
    assert isinstance(results[0].error, QueueFull)
    assert [m.data for m in qm.browse("Q")] == [b"12345", b"6789", b"a", b""]
    assert qm.queue_usage("Q") == QueueUsage("Q", 4, 10, None, 10, "reject", 0)
    assert removed(rule) == [] and fits is not None


def test_a_message_larger_than_the_whole_budget_is_too_large(plain: QueueManager) -> None:
    qm = plain
    qm.define_queue("Q", max_bytes=8, on_full="discard-oldest")
    qm.put("Q", msg(b"keep"))
    with pytest.raises(MessageTooLarge, match="max_bytes"):
        qm.put("Q", msg(b"x" * 9, fields={"k": "v"}))
    assert [m.data for m in qm.browse("Q")] == [b"keep"]


def test_max_depth_follows_on_full_too(qm: QueueManager, rule: Recorder) -> None:
    qm.define_queue("Q", max_depth=2, on_full="discard-oldest")
    qm.add_rule("Q", rule)
    qm.put_many("Q", [msg(b"1"), msg(b"2")])
    qm.put("Q", msg(b"3"))
    assert [m.data for m in qm.browse("Q")] == [b"2", b"3"]
    assert removed(rule) == [b"1"]
    qm.alter_queue("Q", on_full="reject")
    with pytest.raises(QueueFull, match="max_depth"):
        qm.put("Q", msg(b"4"))


# -- expired messages go first --------------------------------------------------------------------


@pytest.mark.parametrize("on_full", ["reject", "discard-oldest", "discard-lowest-priority"])
def test_a_full_queue_first_discards_its_expired_messages_at_add(
    plain: QueueManager, rule: Recorder, clock: ManualClock, on_full: str
) -> None:
    qm = plain
    qm.define_queue("Q", max_bytes=6, on_full=on_full)  # type: ignore[arg-type]
    qm.add_rule("Q", rule)
    qm.put("Q", msg(b"old", expiry=Int32(1_000)))
    qm.put("Q", msg(b"new", priority=9))
    clock.advance(1_000)
    qm.put("Q", msg(b"abc", priority=0))  # room made by the expired one alone: nothing overflows
    assert rule.expired() == [(b"old", "add")]
    assert removed(rule) == []
    assert sorted(m.data for m in qm.browse("Q")) == [b"abc", b"new"]


def test_frozen_wall_clock_decides_what_is_expired(tmp_path: Path) -> None:
    rule = Recorder()
    with freeze_time("2030-01-01T00:00:00Z") as frozen:
        qm = QueueManager(tmp_path / "d.db", name="DEV1")
        qm.define_queue("Q", max_depth=2, on_full="discard-oldest")
        qm.add_rule("Q", rule)
        qm.put("Q", msg(b"expires", expiry=Int32(60_000)))
        qm.put("Q", msg(b"lives"))
        frozen.tick(30)
        qm.put("Q", msg(b"third"))  # the first is still alive: it overflows
        assert removed(rule) == [b"expires"] and rule.expired() == []
        qm.put("Q", msg(b"dies", expiry=Int64(1_893_456_000_000 + 40_000)))  # the oldest, "lives", goes
        frozen.tick(10)  # "dies" is dead now: the next put discards it, nothing overflows
        qm.put("Q", msg(b"fifth"))
        assert rule.expired() == [(b"dies", "add")]
        assert removed(rule) == [b"expires", b"lives"]
        assert [m.data for m in qm.browse("Q")] == [b"third", b"fifth"]
        qm.close()


# -- discard-oldest ------------------------------------------------------------------------------


def test_discard_oldest_drops_ready_messages_by_arrival_and_tells_the_rules(
    plain: QueueManager, rule: Recorder
) -> None:
    qm = plain
    qm.define_queue("DLQ")
    qm.define_queue(
        "Q", max_bytes=12, on_full="discard-oldest",
        rules=["counters", ("dead-letter", {"queue": "DLQ", "reasons": ["overflow"]})],
    )
    qm.add_rule("Q", rule)
    qm.put("Q", msg(b"aaaa", priority=9))
    qm.put("Q", msg(b"bbbb", priority=0))
    qm.put("Q", msg(b"cccc", priority=5))
    qm.put("Q", msg(b"dddddddd", priority=1))  # needs two discards: the oldest two, whatever their priority
    assert removed(rule) == [b"aaaa", b"bbbb"]
    assert sorted(m.data for m in qm.browse("Q")) == [b"cccc", b"dddddddd"]
    assert qm.queue_stats("Q")["overflow"] == 2
    copies = {m.data: m.fields for m in qm.browse("DLQ")}
    assert set(copies) == {b"aaaa", b"bbbb"} and copies[b"aaaa"]["dlq.reason"] == "overflow"
    assert qm.queue_usage("Q").overflowed == 2


def test_locked_messages_are_never_discarded(qm: QueueManager, rule: Recorder) -> None:
    qm.define_queue("Q", max_depth=3, on_full="discard-oldest")
    qm.add_rule("Q", rule)
    in_flight = qm.put("Q", msg(b"put-locked"), confirm_id=1)
    qm.put_many("Q", [msg(b"got-1"), msg(b"got-2")])
    taken = qm.get_many("Q", 2, confirm_id=2)
    with pytest.raises(QueueFull, match="locked"):
        qm.put("Q", msg(b"no room"))  # an assured put and two assured gets in flight: all kept
    assert removed(rule) == []
    qm.confirm_put("Q", in_flight)
    qm.put("Q", msg(b"room"))  # the confirmed put is ready now, so it may go
    assert removed(rule) == [b"put-locked"]
    assert [r.status for r in qm.confirm_get_each("Q", [m.uid for m in taken if m.uid is not None])] == [
        "confirmed", "confirmed"]


def test_a_batch_never_discards_its_own_messages(qm: QueueManager, rule: Recorder) -> None:
    qm.define_queue("Q", max_depth=3, on_full="discard-oldest")
    qm.add_rule("Q", rule)
    qm.put_many("Q", [msg(b"x"), msg(b"y")])
    results = qm.put_each("Q", [msg(b"1"), msg(b"2"), msg(b"3"), msg(b"4")])
    assert [r.status for r in results] == ["stored", "stored", "stored", "refused"]
    assert removed(rule) == [b"x", b"y"]
    assert [m.data for m in qm.browse("Q")] == [b"1", b"2", b"3"]


def test_put_many_that_cannot_fit_discards_nothing(qm: QueueManager, rule: Recorder) -> None:
    qm.define_queue("Q", max_depth=2, on_full="discard-oldest")
    qm.add_rule("Q", rule)
    qm.put_many("Q", [msg(b"x"), msg(b"y")])
    with pytest.raises(QueueFull):
        qm.put_many("Q", [msg(b"1"), msg(b"2"), msg(b"3")])
    assert removed(rule) == []
    assert [m.data for m in qm.browse("Q")] == [b"x", b"y"]


# -- discard-lowest-priority ---------------------------------------------------------------------


def test_discard_lowest_priority_drops_the_lowest_oldest_first(qm: QueueManager, rule: Recorder) -> None:
    qm.define_queue("Q", max_depth=4, on_full="discard-lowest-priority")
    qm.add_rule("Q", rule)
    for data, priority in ((b"p5-old", 5), (b"p1-old", 1), (b"p1-new", 1), (b"p8", 8)):
        qm.put("Q", msg(data, priority))
    qm.put("Q", msg(b"p3", 3))
    qm.put("Q", msg(b"p1-newest", 1))  # equal to the lowest held: the older equal one goes
    assert removed(rule) == [b"p1-old", b"p1-new"]
    with pytest.raises(QueueFull, match="lower than"):
        qm.put("Q", msg(b"p0", 0))  # lower than every message held
    qm.put("Q", msg(b"p9", 9))
    assert removed(rule) == [b"p1-old", b"p1-new", b"p1-newest"]
    assert [m.data for m in qm.browse("Q")] == [b"p9", b"p8", b"p5-old", b"p3"]


def test_discard_lowest_priority_on_a_fifo_queue(plain: QueueManager, rule: Recorder) -> None:
    qm = plain
    qm.define_queue("Q", max_bytes=6, ordering="fifo", on_full="discard-lowest-priority")
    qm.add_rule("Q", rule)
    qm.put_many("Q", [msg(b"aa", 7), msg(b"bb", 2), msg(b"cc", 2)])
    results = qm.put_each("Q", [msg(b"dd", 1), msg(b"eeee", 4)])
    assert [r.status for r in results] == ["refused", "stored"]
    assert removed(rule) == [b"bb", b"cc"]
    assert [m.data for m in qm.browse("Q")] == [b"aa", b"eeee"]


# -- the store's budget ------------------------------------------------------------------------


def test_the_store_budget_takes_room_only_from_the_putting_queue(
    open_qm: Callable[..., QueueManager], rule: Recorder
) -> None:
    qm = open_qm(max_store_bytes=200)
    assert qm.max_store_bytes == 200
    qm.define_queue("KEEP")
    qm.define_queue("RING", on_full="discard-oldest")
    qm.add_rule("RING", rule)
    qm.put("KEEP", msg(b"k" * 60))
    qm.put("RING", msg(b"1" * 40))
    used = qm.store_usage().bytes
    qm.put("RING", msg(b"2" * (200 - used + 10)))  # over by 10 bytes: the ring's oldest makes room
    assert removed(rule) == [b"1" * 40]
    usage = qm.store_usage()
    assert usage.bytes <= 200 and usage.max_bytes == 200
    assert {u.name: u.depth for u in usage.queues} == {"KEEP": 1, "RING": 1}
    with pytest.raises(StoreFull, match="max_store_bytes") as caught:
        qm.put("KEEP", msg(b"k" * (201 - usage.bytes)))
    assert isinstance(caught.value, QueueFull)
    with pytest.raises(MessageTooLarge, match="max_store_bytes"):
        qm.put("RING", msg(b"x" * 201))
    qm.close()
    unbounded = open_qm()  # the budget belongs to the queue manager that was given it
    assert unbounded.max_store_bytes is None
    unbounded.put("KEEP", msg(b"k" * 50))


# -- rules see every discard, across a reopen ---------------------------------------------------


def test_discards_after_a_reopen_are_counted_by_the_stored_rules(
    open_qm: Callable[..., QueueManager], db_path: Path
) -> None:
    qm = open_qm()
    qm.define_queue("Q", max_depth=3, on_full="discard-oldest", rules=["counters"])
    qm.put_many("Q", [msg(b"%d" % i) for i in range(3)])
    qm.close()
    again = open_qm()
    assert again.queue_usage("Q").depth == 3
    for i in range(3, 8):
        again.put("Q", msg(b"%d" % i))
    stats = again.queue_stats("Q")
    assert (stats["added"], stats["overflow"]) == (8, 5)
    assert [m.data for m in again.browse("Q")] == [b"5", b"6", b"7"]
    assert_in_step(db_path)


def test_threshold_counts_the_depth_after_discards(qm: QueueManager, rule: Recorder) -> None:
    qm.define_queue("Q", max_depth=3, depth_threshold=3, on_full="discard-oldest")
    qm.add_rule("Q", rule)
    qm.put_many("Q", [msg(b"1"), msg(b"2"), msg(b"3")])
    qm.put("Q", msg(b"4"))  # depth stays 3: no new threshold crossing
    assert [e.depth for e in rule.events if e.kind == "threshold"] == [3]


def test_a_resend_replacing_an_unconfirmed_copy_frees_its_room(plain: QueueManager, db_path: Path) -> None:
    qm = plain
    qm.define_queue("Q", max_bytes=10)
    uid = MessageUID("DEV9:abc", 7)
    qm.put("Q", Message(b"x" * 8, uid=uid), confirm_id=1)
    assert [r.status for r in qm.put_each("Q", [Message(b"y" * 9, uid=uid, resend=True)], confirm_id=2)] == [
        "replaced"
    ]
    assert qm.queue_usage("Q").bytes == 9
    assert_in_step(db_path)


# -- cost ----------------------------------------------------------------------------------------


def test_a_budget_not_reached_costs_no_query_and_the_store_budget_one(tmp_path: Path) -> None:
    qm = QueueManager(tmp_path / "d.db", name="DEV1")
    qm.define_queue("FREE")
    qm.define_queue("CAPPED", max_bytes=10**9, max_depth=10**6, on_full="discard-oldest")
    for queue in ("FREE", "CAPPED"):
        qm.put(queue, msg(b"warm"))
    traced: list[str] = []
    with qm.tracer(traced.append):
        qm.put("CAPPED", msg(b"x"))
    assert not any("sum(bytes)" in s or "ORDER BY" in s for s in traced)
    free = selects(qm, lambda: qm.put("FREE", msg(b"x")))
    assert selects(qm, lambda: qm.put("CAPPED", msg(b"x"))) == free
    qm.close()
    budgeted = QueueManager(tmp_path / "d.db", max_store_bytes=10**9)
    budgeted.put("FREE", msg(b"warm"))
    assert selects(budgeted, lambda: budgeted.put("FREE", msg(b"x"))) == free + 1
    budgeted.close()


@pytest.mark.parametrize("on_full", ["discard-oldest", "discard-lowest-priority"])
def test_discarding_for_a_batch_costs_the_same_queries_for_10_or_500(tmp_path: Path, on_full: str) -> None:
    qm = QueueManager(tmp_path / "d.db", name="DEV1", max_store_bytes=10**9)
    qm.define_queue("Q", max_depth=1_000, on_full=on_full, rules=["counters"])  # type: ignore[arg-type]
    qm.put_many("Q", [msg(b"old", 1) for _ in range(1_000)])

    def discard(n: int) -> int:
        return selects(qm, lambda: qm.put_each("Q", [msg(b"new", 2) for _ in range(n)]))

    discard(3)
    assert discard(500) == discard(10)
    assert qm.queue_stats("Q")["overflow"] == 513
    qm.close()


# -- encrypted queues count what is stored -----------------------------------------------------


def test_an_encrypted_queue_budgets_its_sealed_size(qm: QueueManager, store_mode: str) -> None:
    qm.define_queue("Q", max_bytes=1_000)
    qm.put("Q", msg(b"x" * 100))
    assert qm.queue_usage("Q").bytes == 100 + (SEAL_OVERHEAD if store_mode == "encrypted" else 0)


# -- the bookkeeping every verb keeps ----------------------------------------------------------


def test_bytes_stay_in_step_through_every_path(tmp_path: Path, clock: ManualClock) -> None:
    """queues.bytes (and depth) equal what the rows hold after every verb that adds,
    removes or rewrites rows: puts, overflow, undo, gets, expiry at each check point,
    transmission, replacement, purge, key rotation and quarantine."""
    keys = StoreKeys.generate()
    path = tmp_path / "d.db"
    qm = QueueManager(path, name="DEV1", clock=clock, keys=keys, max_store_bytes=10_000)
    qm.define_queue("DLQ")
    qm.define_queue("Q", max_bytes=3_000, on_full="discard-oldest", rules=[("dead-letter", {"queue": "DLQ"})])
    qm.define_queue("SEALED", encryption="aes-256-gcm", max_depth=5, on_full="discard-lowest-priority")
    qm.define_remote_queue("OUT", target_qmgr="HOME", max_bytes=2_000)
    qm.define_queue("PLAIN")
    done: list[str] = []

    def after(label: str) -> None:
        done.append(label)
        try:
            assert_in_step(path)
        except AssertionError as exc:
            raise AssertionError(f"after {' > '.join(done)}: {exc}") from None

    qm.put_many("Q", [msg(b"p" * n, fields={"n": n}) for n in range(1, 40)])
    after("put_many")
    qm.put_many("Q", [msg(b"e" * 50, expiry=Int32(10)) for _ in range(5)])
    qm.put("Q", msg(b"a" * 70), confirm_id=5)
    after("assured put")
    qm.put_many("Q", [msg(b"o" * 300) for _ in range(6)])
    assert qm.queue_usage("Q").overflowed > 0
    after("overflow")
    qm.undo("Q", 5)
    after("undo")
    qm.get_many("Q", 3)
    after("get")
    for m in qm.get_many("Q", 2, confirm_id=9):
        qm.confirm_get("Q", m.uid or "")
    after("assured get")
    clock.advance(20)
    qm.browse("Q", limit=2)
    after("browse expired")
    for n in range(9):
        qm.put("SEALED", msg(b"s" * 40, priority=n))
    after("sealed overflow")
    qm.close()
    keys = keys.with_new_key()
    qm = QueueManager(path, clock=clock, keys=keys)
    assert qm.rotate_keys() == 5
    after("rotation")
    qm.put_many("OUT", [msg(b"r" * 20) for _ in range(10)])
    qm.exchange.transmitted(
        "OUT", [m.uid for m in qm.exchange.next_for_transmission("OUT", 4) if m.uid is not None])
    after("transmitted")
    qm.delete_message("Q", qm.browse("Q", limit=1)[0].uid or "")
    after("delete_message")
    uid = MessageUID("DEV9:x", 1)
    qm.put_each("PLAIN", [Message(b"z" * 5, uid=uid)], confirm_id=3)
    qm.put_each("PLAIN", [Message(b"z" * 50, uid=uid, resend=True)], confirm_id=4)
    after("resend")
    qm.confirm_put("PLAIN", uid)
    late = qm.put("PLAIN", msg(b"late", expiry=Int32(5)), confirm_id=8)
    clock.advance(10)
    with pytest.raises(MessageExpired):
        qm.confirm_put("PLAIN", late)
    after("confirm_put expired")
    qm.purge("PLAIN")
    after("purge without observers")
    qm.put("Q", msg(b"x", expiry=Int32(1)))
    clock.advance(5)
    qm.depth("Q")
    qm.sweep_expired()
    after("depth and sweep")
    qm.purge("Q")
    after("purge with observers")
    qm.put("SEALED", msg(b"victim", priority=9))
    qm.close()
    conn = sqlite3.connect(path)
    (stamp, blob) = conn.execute("SELECT stamp, data FROM messages ORDER BY id DESC LIMIT 1").fetchone()
    conn.execute("UPDATE messages SET data = ? WHERE stamp = ?", (blob[:-1] + bytes([blob[-1] ^ 1]), stamp))
    conn.commit()
    conn.close()
    qm = QueueManager(path, clock=clock, keys=keys)
    with pytest.raises(IntegrityError):
        qm.get("SEALED")
    assert len(qm.quarantined()) == 1
    after("quarantine")
    qm.close()


# -- concurrent putters --------------------------------------------------------------------------


WORKER = """
import sys
from edgeq import Message, QueueManager
from edgeq.errors import QueueFull
path, tag, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
qm = QueueManager(path, max_store_bytes=int(sys.argv[4]))
print("ready", flush=True)
sys.stdin.readline()
for i in range(count):
    try:
        qm.put("Q", Message(b"%s:%d:" % (tag.encode(), i) + b"." * (i % 90), priority=i % 10))
        print("put", tag, i, flush=True)
    except QueueFull as exc:
        print("full", tag, i, type(exc).__name__, flush=True)
qm.close()
print("done", flush=True)
"""


@pytest.mark.parametrize("on_full", ["discard-oldest", "discard-lowest-priority"])
def test_concurrent_putters_never_exceed_the_budget_and_every_discard_is_seen(
    tmp_path: Path, on_full: str
) -> None:
    path = tmp_path / "d.db"
    max_bytes, store_bytes, per_putter = 2_000, 10_000_000, 150
    setup = QueueManager(path, name="DEV1")
    setup.define_queue("DLQ")
    setup.define_queue(
        "Q", max_bytes=max_bytes, max_depth=40, on_full=on_full,  # type: ignore[arg-type]
        rules=["counters", ("dead-letter", {"queue": "DLQ", "reasons": ["overflow"]})],
    )
    setup.close()
    child = subprocess.Popen(
        [sys.executable, "-c", WORKER, str(path), "proc", str(per_putter), str(store_bytes)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().strip() == "ready", child.stderr.read() if child.stderr else ""
        qm = QueueManager(path, max_store_bytes=store_bytes)
        stop = threading.Event()
        worst: list[tuple[int, int]] = []

        def watch() -> None:
            conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
            while not stop.wait(0.001):  # pacing only: each read sees some committed state
                worst.append(conn.execute("SELECT depth, bytes FROM queues WHERE name = 'Q'").fetchone())
            conn.close()

        full: list[str] = []

        def putter(tag: str) -> None:
            for i in range(per_putter):
                try:
                    qm.put("Q", Message(b"%s:%d:" % (tag.encode(), i) + b"." * (i % 90), priority=i % 10))
                except QueueFull:
                    full.append(f"{tag}:{i}")

        watcher = threading.Thread(target=watch)
        watcher.start()
        threads = [threading.Thread(target=putter, args=(f"t{n}",)) for n in range(4)]
        child.stdin.write("go\n")
        child.stdin.flush()
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        out, err = child.communicate(timeout=120)
        stop.set()
        watcher.join(timeout=30)
        assert child.returncode == 0, err
        lines = out.split("\n")
        assert "done" in lines
        full += [f"{w[1]}:{w[2]}" for w in (line.split() for line in lines) if w and w[0] == "full"]
        assert all(depth <= 40 and held <= max_bytes for depth, held in worst), max(worst)
        held = {m.data.split(b":")[0] + b":" + m.data.split(b":")[1] for m in qm.browse("Q")}
        copied = [m.data.split(b":")[0] + b":" + m.data.split(b":")[1] for m in qm.browse("DLQ")]
        stored = 5 * per_putter - len(full)
        assert len(copied) == len(set(copied)), "a discard was copied twice"
        assert not held & set(copied), "a held message was also reported discarded"
        assert len(held) + len(copied) == stored
        assert len(copied) > stored // 2, "the budget should have forced many discards"
        assert {key.split(b":")[0] for key in [*held, *copied]} == {b"proc", b"t0", b"t1", b"t2", b"t3"}
        assert len(worst) > 1
        stats = qm.queue_stats("Q")
        assert (stats["added"], stats.get("overflow", 0)) == (stored, len(copied))
        usage = qm.queue_usage("Q")
        assert usage.bytes <= max_bytes and usage.depth <= 40
        qm.close()
        assert_in_step(path)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()

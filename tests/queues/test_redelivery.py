"""The redelivery delay (edgeq.queues.backout, edgeq.consume.waiting, edgeq.consume.consumers):
a message whose assured get failed is got again only after a delay that doubles with its
backouts (1 s up to 5 minutes by default), kept in the store with the message, never past its expiry,
while the messages behind it flow. Time is the test's ManualClock (moving it wakes
waiting gets); waits for another thread are bounded conditions, never sleeps."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlite_utils import Database

from edgeq import Int32, ManualClock, Message, QueueManager
from edgeq.aio import AsyncQueueManager
from edgeq.consume.consumers import TRACEBACK_EVERY_MS
from edgeq.encoding.fields import encode_fields
from edgeq.errors import InvalidArgument, InvalidType
from edgeq.queues.backout import redelivery_delay_ms
from edgeq.store.integrity import register, row_crc
from edgeq.store.opening import APPLICATION_ID
from edgeq.store.schema import MIGRATIONS, SCHEMA_VERSION
from tests.conftest import T0, Recorder
from tests.waits import LONG, until

OpenQM = Callable[..., QueueManager]


class Poisoned(Exception):
    """What the test's handler raises on the poison message."""


def fail_once(qm: QueueManager, queue: str, confirm_id: int) -> Message:
    """Get the next message assured and undo it as a failed consumer does (a backout)."""
    got = qm.get(queue, confirm_id=confirm_id)
    assert got is not None, f"nothing to get on {queue}"
    assert qm.undo(queue, confirm_id) == 1
    return got


# -- listen and consume ------------------------------------------------------------------------


def test_a_failing_callback_is_retried_on_the_schedule_while_other_messages_flow(
    open_qm: OpenQM, clock: ManualClock
) -> None:
    qm = open_qm()
    qm.define_queue("Q", ordering="fifo")
    qm.put("Q", Message(b"poison"))
    attempts: list[int] = []  # ms since T0 of every attempt on the poison message
    healthy: list[bytes] = []

    def handle(message: Message) -> None:
        if message.data == b"poison":
            attempts.append(clock() - T0)
            raise Poisoned("cannot parse")
        healthy.append(message.data)

    with qm.listen("Q", handle) as listener:
        until(lambda: listener.failed == 1, "the first failure")
        # 40 s in steps of 250 ms; after each a healthy message, put behind the poison one,
        # must be delivered: the listener has looked at the queue since the clock moved.
        for step in range(1, 161):
            clock.advance(250)
            qm.put("Q", Message(b"h%d" % step))
            until(lambda n=step: len(healthy) == n, f"healthy message {step}")
    assert attempts == [0, 1_000, 3_000, 7_000, 15_000, 31_000]  # 1 s, doubling: next at 63 s
    assert healthy == [b"h%d" % step for step in range(1, 161)]
    assert listener.failed == 6 and listener.delivered == 160
    assert [(m.data, m.backout_count) for m in qm.browse("Q")] == [(b"poison", 6)]


def test_a_listener_logs_one_line_per_failure_and_a_traceback_at_most_once_a_minute(
    open_qm: OpenQM, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    qm = open_qm()
    qm.define_queue("Q")
    uid = qm.put("Q", Message(b"poison"))
    failed_at: list[int] = []

    def handle(message: Message) -> None:
        failed_at.append(clock() - T0)
        raise Poisoned("cannot parse")

    caplog.set_level(logging.INFO, logger="edgeq")
    with qm.listen("Q", handle) as listener:
        until(lambda: listener.failed == 1, "the first failure")
        for second in range(1, 131):
            clock.advance(1_000)
            # the poison message is due at 1, 3, 7, 15, 31, 63 and 127 s: wait for those attempts
            expected = sum(1 for at in (0, 1, 3, 7, 15, 31, 63, 127) if at <= second)
            until(lambda n=expected: listener.failed == n, f"failure {expected}")
    assert failed_at == [0, 1_000, 3_000, 7_000, 15_000, 31_000, 63_000, 127_000]
    lines = [r for r in caplog.records if r.name == "edgeq" and str(uid) in r.getMessage()]
    assert len(lines) == 8  # one line per failure, nothing else about the message
    traced = [n for n, r in enumerate(lines) if r.exc_info is not None]
    assert traced == [0, 6, 7]  # at 0 s, then 63 s and 127 s: at least TRACEBACK_EVERY_MS apart
    assert TRACEBACK_EVERY_MS == 60_000
    assert "Poisoned: cannot parse" in lines[1].getMessage()
    assert "undone (backout 2), offered again in 2 s" in lines[1].getMessage()
    assert "traceback logged within the last minute" in lines[1].getMessage()
    assert "undone (backout 8), offered again in 128 s" in lines[7].getMessage()


def test_a_consume_loop_that_fails_finds_the_next_message_not_the_same_one(
    open_qm: OpenQM, clock: ManualClock
) -> None:
    qm = open_qm()
    qm.define_queue("Q", ordering="fifo")
    qm.put_many("Q", [Message(b"poison"), Message(b"fine")])
    with pytest.raises(Poisoned), qm.consume("Q", wait=0) as messages:
        for message in messages:
            raise Poisoned(message.data.decode())
    with qm.consume("Q", wait=0) as messages:
        assert [m.data for m in messages] == [b"fine"]  # the poison message waits out its delay
    clock.advance(1_000)
    with qm.consume("Q", wait=0) as messages:
        assert [(m.data, m.backout_count) for m in messages] == [(b"poison", 1)]


def test_a_waiting_get_wakes_when_the_delay_passes_without_any_change_to_the_store(tmp_path: Path) -> None:
    with QueueManager(tmp_path / "d.db", name="DEV1") as qm:  # the real clock: the waker's own timer
        qm.define_queue("Q", redelivery_delay_ms=200)
        qm.put("Q", Message(b"poison"))
        fail_once(qm, "Q", 1)
        assert qm.get("Q") is None
        got = qm.get("Q", wait=LONG)  # nothing is written meanwhile: only the delay's end wakes it
        assert got is not None and got.data == b"poison" and got.backout_count == 1


def test_an_async_waiting_get_wakes_when_the_delay_passes(tmp_path: Path) -> None:
    async def main() -> Message | None:
        async with AsyncQueueManager(tmp_path / "d.db", name="DEV1") as qm:
            await qm.define_queue("Q", redelivery_delay_ms=200)
            await qm.put("Q", Message(b"poison"))
            assert await qm.get("Q", confirm_id=1) is not None
            assert await qm.undo("Q", 1) == 1
            assert await qm.get("Q") is None
            return await qm.get("Q", wait=LONG)  # no change to the store: the delay's end wakes it

    got = asyncio.run(main())
    assert got is not None and got.data == b"poison" and got.backout_count == 1


def test_moving_a_manual_clock_wakes_a_waiting_get(open_qm: OpenQM, clock: ManualClock) -> None:
    qm = open_qm()
    qm.define_queue("Q", redelivery_delay_ms=60_000, max_redelivery_delay_ms=60_000)
    qm.put("Q", Message(b"poison"))
    fail_once(qm, "Q", 1)
    got: list[Message | None] = []
    waiter = threading.Thread(target=lambda: got.append(qm.get("Q", wait=LONG)))
    waiter.start()
    until(lambda: qm._waker.waiting == 1, "the get to wait")
    clock.advance(60_000)
    waiter.join(LONG)
    assert not waiter.is_alive() and got and got[0] is not None and got[0].data == b"poison"


# -- kept with the message ------------------------------------------------------------------------


def test_the_delay_survives_reopening_the_store(open_qm: OpenQM, clock: ManualClock) -> None:
    qm = open_qm()
    qm.define_queue("Q", ordering="fifo")
    qm.put("Q", Message(b"poison"))
    for n, wait in enumerate((1_000, 2_000, 0)):
        fail_once(qm, "Q", n + 1)
        clock.advance(wait)
    qm.close()  # backed out three times at 3 s: due at 7 s
    qm = open_qm()
    qm.put("Q", Message(b"fresh"))
    fresh = qm.get("Q")
    assert fresh is not None and fresh.data == b"fresh"  # not held up behind it
    clock.advance(3_999)
    assert qm.get("Q") is None and qm.depth("Q") == 1
    clock.advance(1)
    got = qm.get("Q")
    assert got is not None and (got.data, got.backout_count) == (b"poison", 3)


def test_the_delay_never_outlives_the_message(open_qm: OpenQM, clock: ManualClock, rule: Recorder) -> None:
    qm = open_qm()
    qm.define_queue("Q")
    qm.add_rule("Q", rule)
    qm.put("Q", Message(b"short", expiry=Int32(1_500)))
    fail_once(qm, "Q", 1)
    clock.advance(1_000)
    fail_once(qm, "Q", 2)  # a 2 s delay, capped at the 0.5 s it has left
    clock.advance(499)
    assert qm.get("Q") is None and qm.depth("Q") == 1
    clock.advance(1)
    assert qm.get("Q") is None  # due and expired at once: discarded by this get, as usual
    assert rule.expired() == [(b"short", "get")] and qm.depth("Q") == 0


def test_handing_back_and_releasing_locks_redeliver_at_once(open_qm: OpenQM) -> None:
    qm = open_qm()
    qm.define_queue("Q")
    qm.put("Q", Message(b"m"))
    assert qm.get("Q", confirm_id=1) is not None
    qm.undo("Q", 1, count_backout=False)  # not the message's fault: no backout, no delay
    assert qm.get("Q", confirm_id=2) is not None
    assert qm.release_locks("Q") == 1  # its getter is gone: counted, offered again now
    got = qm.get("Q")
    assert got is not None and got.backout_count == 1


def test_releasing_locks_on_a_queue_with_a_backout_threshold_redelivers_at_once(open_qm: OpenQM) -> None:
    qm = open_qm()
    qm.define_queue("BOQ")
    qm.define_queue("Q", backout_threshold=3, backout_queue="BOQ")
    qm.put("Q", Message(b"m"))
    assert qm.get("Q", confirm_id=1) is not None
    assert qm.release_locks("Q") == 1  # counted toward the threshold, but not delayed
    got = qm.get("Q", confirm_id=2)
    assert got is not None and got.backout_count == 1
    assert qm.release_locks("Q") == 1
    assert qm.get("Q", confirm_id=3) is not None
    assert qm.release_locks("Q") == 1  # the third backout: moved
    assert [m.data for m in qm.browse("BOQ")] == [b"m"] and qm.depth("Q") == 0


def test_each_queue_sets_its_own_schedule(open_qm: OpenQM, clock: ManualClock) -> None:
    qm = open_qm()
    qm.define_queue("NOW", redelivery_delay_ms=0)
    qm.define_queue("SLOW", redelivery_delay_ms=10_000, max_redelivery_delay_ms=15_000)
    for queue in ("NOW", "SLOW"):
        qm.put(queue, Message(b"x"))
    fail_once(qm, "NOW", 1)
    fail_once(qm, "NOW", 2)  # 0: got again at once, as before there were delays
    fail_once(qm, "SLOW", 3)
    clock.advance(9_999)
    assert qm.get("SLOW") is None
    clock.advance(1)
    fail_once(qm, "SLOW", 4)
    clock.advance(14_999)  # 20 s, capped at 15 s
    assert qm.get("SLOW") is None
    clock.advance(1)
    assert qm.get("SLOW") is not None
    attrs = qm.alter_queue("NOW", redelivery_delay_ms=500)
    assert (attrs.redelivery_delay_ms, attrs.max_redelivery_delay_ms) == (500, 300_000)


def test_the_schedule_doubles_from_the_first_delay_up_to_the_most() -> None:
    assert [redelivery_delay_ms(1_000, 300_000, n) for n in range(1, 11)] == [
        1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 64_000, 128_000, 256_000, 300_000,
    ]
    assert redelivery_delay_ms(1_000, 300_000, 10**9) == 300_000  # a huge count cannot overflow
    assert redelivery_delay_ms(0, 300_000, 7) == 0


@pytest.mark.parametrize(
    ("attrs", "error", "match"),
    [
        ({"redelivery_delay_ms": -1}, InvalidArgument, r"from 0 to 86400000 ms \(a day\), not -1"),
        ({"redelivery_delay_ms": 1.5}, InvalidType, "must be an int of milliseconds"),
        ({"redelivery_delay_ms": True}, InvalidType, "must be an int of milliseconds"),
        ({"max_redelivery_delay_ms": 0}, InvalidArgument, "from 1 to 86400000"),
        ({"max_redelivery_delay_ms": 86_400_001}, InvalidArgument, "from 1 to 86400000"),
        ({"redelivery_delay_ms": 5_000, "max_redelivery_delay_ms": 1_000}, InvalidArgument,
         r"redelivery_delay_ms \(5000\) is longer than max_redelivery_delay_ms \(1000\)"),
        ({"redelivery_delay_ms": 400_000}, InvalidArgument, "longer than max_redelivery_delay_ms"),
    ],
)
def test_delays_are_checked_before_anything_is_defined(
    open_qm: OpenQM, attrs: dict[str, object], error: type[Exception], match: str
) -> None:
    qm = open_qm()
    with pytest.raises(error, match=match):
        qm.define_queue("Q", **attrs)  # type: ignore[arg-type]
    assert "Q" not in qm.queue_names()
    qm.define_queue("Q")
    with pytest.raises(error, match=match):
        qm.alter_queue("Q", **attrs)
    assert qm.queue_attributes("Q").redelivery_delay_ms == 1_000


def test_a_remote_queue_takes_no_redelivery_delay(open_qm: OpenQM) -> None:
    qm = open_qm()
    qm.define_remote_queue("OUT", target_qmgr="HOME")
    with pytest.raises(InvalidArgument, match="remote queue: nothing gets from it here"):
        qm.alter_queue("OUT", redelivery_delay_ms=5_000)


# -- old stores ---------------------------------------------------------------------------------


def test_a_v9_store_migrates_its_messages_keep_their_checksums_and_check_accepts_the_column(
    db_path: Path, clock: ManualClock
) -> None:
    conn = sqlite3.connect(db_path, isolation_level=None)  # a store as edgeq's schema v9 wrote it
    register(conn)
    for step in MIGRATIONS[:9]:
        step(Database(conn))
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.execute("PRAGMA user_version = 9")
    conn.execute("INSERT INTO edgeq_meta (key, value) VALUES ('name', 'DEV1'), ('incarnation', 'abc')")
    conn.execute("INSERT INTO queues (name, default_priority, ordering, created_ms, depth, bytes) "
                 "VALUES ('Q', 4, 'fifo', 1, 3, 0)")
    for n in range(3):
        fields, data = encode_fields({"n": Int32(n)}), b"old-%d" % n
        stamp = T0 * 1000 + n
        crc = row_crc("Q", "DEV1:abc", stamp, 4, T0, T0, 0, None, None, None, None, None, None, None, fields,
                      data)
        conn.execute(
            "INSERT INTO messages (queue_id, origin, stamp, state, rank, seq, priority, created_ms, "
            "arrived_ms, expiry_kind, backout_count, fields, data, crc) "
            "VALUES (1, 'DEV1:abc', ?, 0, 0, ?, 4, ?, ?, 0, 0, ?, ?, ?)",
            (stamp, stamp, T0, T0, fields, data, crc),
        )
        conn.execute("UPDATE queues SET bytes = bytes + ? WHERE name = 'Q'", (len(fields) + len(data),))
    conn.execute("UPDATE edgeq_clock SET stamp = ?", (T0 * 1000 + 2,))
    conn.close()
    with QueueManager(db_path, clock=clock) as qm:
        report = qm.check()
        assert report.clean, report  # every old row's checksum still holds; not_before NULL is sound
        assert qm.queue_attributes("Q").redelivery_delay_ms == 1_000  # the defaults, on old queues too
        fail_once(qm, "Q", 2)
        got = qm.get("Q")
        assert got is not None and got.data == b"old-1"
        clock.advance(1_000)
        got = qm.get("Q")
        assert got is not None and got.data == b"old-0" and got.fields == {"n": Int32(0)}
        report = qm.check()
        assert report.clean, report
    conn = sqlite3.connect(db_path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    finally:
        conn.close()


def test_check_reports_a_redelivery_time_that_is_not_a_time(db_path: Path, clock: ManualClock) -> None:
    with QueueManager(db_path, name="DEV1", clock=clock) as qm:
        qm.define_queue("Q")
        qm.put("Q", Message(b"m"))
        fail_once(qm, "Q", 1)
    conn = sqlite3.connect(db_path)
    conn.execute("UPDATE messages SET not_before = 'soon'")
    conn.commit()
    conn.close()
    with QueueManager(db_path, clock=clock) as qm:
        report = qm.check()
        assert not report.clean
        assert any("not_before is text" in m.what for m in report.messages), report

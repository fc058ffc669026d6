"""edgeq.aio: the queue manager's verbs as coroutines, on a real store and a real event loop
(asyncio.run in each test): waiting gets that hold no thread and wake for a put, cancellation
that loses no message, concurrent puts, a loop that never blocks."""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import TypeVar

import pytest

from edgeq import Int32, ManualClock, Message, QueueManager
from edgeq.aio import AsyncQueueManager
from edgeq.errors import InvalidArgument, InvalidType, QueueManagerClosed, QueueNotFound
from tests.conftest import T0

T = TypeVar("T")
BOUND = 10.0  # seconds any single await may take before the test calls it hung


def run(path: Path, body: Callable[[AsyncQueueManager], Awaitable[T]], **options: object) -> T:
    """Run ``body`` with an AsyncQueueManager on ``path`` (queue manager DEV1) in a fresh loop."""

    async def main() -> T:
        async with AsyncQueueManager(path, name="DEV1", **options) as qm:
            return await asyncio.wait_for(body(qm), 60)

    return asyncio.run(main())


async def eventually(check: Callable[[], Awaitable[bool]], what: str) -> None:
    """Poll an async condition until it holds (bounded): for states another task reaches."""
    deadline = time.monotonic() + BOUND
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        await asyncio.sleep(0.005)


async def waiting(qm: AsyncQueueManager) -> None:
    """Until a get of ``qm`` waits on the doorbell (found the queue empty, and sleeps)."""

    async def listening() -> bool:
        bell = qm._bell
        return bell is not None and bell._listening > 0

    await eventually(listening, "a get waits")


# -- the verbs -----------------------------------------------------------------------------------


def test_the_verbs_round_trip(db_path: Path) -> None:
    async def body(qm: AsyncQueueManager) -> None:
        # undone: back at once
        await qm.define_queue("Q", ordering="fifo", max_depth=100, redelivery_delay_ms=0)
        assert await qm.queue_names() == ["Q"]
        uid = await qm.put("Q", Message(b"a", fields={"k": "v"}))
        await qm.put_many("Q", [Message(b"b"), Message(b"c")])
        assert [m.data for m in await qm.browse("Q")] == [b"a", b"b", b"c"]
        assert await qm.depth("Q") == 3
        got = await qm.get("Q")
        assert got is not None and (got.uid, got.data, got.fields["k"]) == (uid, b"a", "v")
        locked = await qm.get_many("Q", 2, confirm_id=7)
        assert [m.data for m in locked] == [b"b", b"c"]
        assert await qm.undo("Q", 7) == 2
        again = await qm.get("Q", confirm_id=8)
        assert again is not None and again.backout_count == 1
        await qm.confirm_get("Q", again.uid)
        put_uid = await qm.put("Q", Message(b"d"), confirm_id=9)
        await qm.confirm_put("Q", put_uid)
        assert (await qm.alter_queue("Q", max_depth=5)).max_depth == 5
        assert (await qm.queue_attributes("Q")).ordering == "fifo"
        assert (await qm.queue_usage("Q")).depth == 2
        assert await qm.purge("Q") == 2
        await qm.delete_queue("Q")
        assert await qm.queue_names() == []
        assert (await qm.run(lambda sync: sync.check())).clean
        assert qm.sync.name == "DEV1"

    run(db_path, body)


def test_a_plain_get_is_gone_for_the_next_call(db_path: Path) -> None:
    async def body(qm: AsyncQueueManager) -> None:
        await qm.define_queue("Q")
        await qm.put("Q", Message(b"x"))
        assert await qm.get("Q") is not None
        assert await qm.depth("Q") == 0  # its confirm, in the background, came first
        assert await qm.run(lambda sync: sync.depth("Q")) == 0

    run(db_path, body)


def test_errors_are_raised_in_the_coroutine(db_path: Path) -> None:
    async def body(qm: AsyncQueueManager) -> None:
        with pytest.raises(QueueNotFound):
            await qm.get("NOPE")
        with pytest.raises(InvalidArgument, match="wait must be a non-negative"):
            await qm.get("Q", wait=-1)
        with pytest.raises(InvalidType, match="wait must be seconds"):
            await qm.get("Q", wait="5s")  # type: ignore[arg-type]

    run(db_path, body)
    with pytest.raises(InvalidArgument, match="max_workers"):
        AsyncQueueManager(db_path, max_workers=0)


def test_a_closed_manager_refuses_calls(db_path: Path) -> None:
    async def main() -> None:
        qm = AsyncQueueManager(db_path, name="DEV1")
        await qm.define_queue("Q")
        await qm.close()
        await qm.close()  # twice is harmless
        with pytest.raises(QueueManagerClosed):
            await qm.put("Q", Message(b"x"))

    asyncio.run(main())


# -- waiting -------------------------------------------------------------------------------------


def test_a_waiting_get_wakes_for_a_put_from_another_coroutine(db_path: Path) -> None:
    async def body(qm: AsyncQueueManager) -> None:
        await qm.define_queue("Q")
        getter = asyncio.create_task(qm.get("Q", wait=BOUND))
        await waiting(qm)
        await qm.put("Q", Message(b"ping"))
        got = await asyncio.wait_for(getter, BOUND)
        assert got is not None and got.data == b"ping"

    run(db_path, body)


def test_a_waiting_get_wakes_for_a_put_from_another_process(db_path: Path) -> None:
    async def body(qm: AsyncQueueManager) -> None:
        await qm.define_queue("Q")
        getter = asyncio.create_task(qm.get("Q", wait=timedelta(seconds=BOUND)))
        await waiting(qm)
        script = "import sys; from edgeq import QueueManager, Message; " \
                 "QueueManager(sys.argv[1]).put('Q', Message(b'from afar'))"
        proc = await asyncio.create_subprocess_exec(sys.executable, "-c", script, str(db_path))
        assert await asyncio.wait_for(proc.wait(), 60) == 0
        got = await asyncio.wait_for(getter, BOUND)
        assert got is not None and got.data == b"from afar"

    run(db_path, body)


def test_a_wait_that_passes_returns_none(db_path: Path) -> None:
    async def body(qm: AsyncQueueManager) -> None:
        await qm.define_queue("Q")
        started = time.monotonic()
        assert await qm.get("Q", wait=0.3) is None
        assert time.monotonic() - started >= 0.3
        assert await qm.get_many("Q", 5, wait=0) == []

    run(db_path, body)


def test_an_expired_message_is_never_returned_to_a_waiting_get(db_path: Path) -> None:
    clock = ManualClock(T0)

    async def body(qm: AsyncQueueManager) -> None:
        await qm.define_queue("Q")
        await qm.put("Q", Message(b"stale", expiry=Int32(1_000)))
        clock.advance(1_000)
        getter = asyncio.create_task(qm.get("Q", wait=BOUND))
        await qm.put("Q", Message(b"fresh"))  # wakes the getter: it discards the stale one first
        got = await asyncio.wait_for(getter, BOUND)
        assert got is not None and got.data == b"fresh"
        assert await qm.depth("Q") == 0

    run(db_path, body, clock=clock)


def test_closing_ends_a_waiting_get(db_path: Path) -> None:
    async def main() -> None:
        qm = AsyncQueueManager(db_path, name="DEV1")
        await qm.define_queue("Q")
        getter = asyncio.create_task(qm.get("Q", wait=math.inf))
        await waiting(qm)
        await asyncio.wait_for(qm.close(), BOUND)
        with pytest.raises(QueueManagerClosed):
            await asyncio.wait_for(getter, BOUND)

    asyncio.run(main())


# -- cancellation ---------------------------------------------------------------------------------


def test_a_cancelled_waiting_get_leaves_the_next_message_for_the_next_getter(db_path: Path) -> None:
    async def body(qm: AsyncQueueManager) -> None:
        await qm.define_queue("Q")
        getter = asyncio.create_task(qm.get("Q", wait=BOUND))
        await waiting(qm)
        getter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await getter
        await qm.put("Q", Message(b"kept"))
        got = await qm.get("Q", wait=BOUND)
        assert got is not None and (got.data, got.backout_count) == (b"kept", 0)

    run(db_path, body)


def test_cancellation_at_any_moment_loses_no_message(db_path: Path) -> None:
    """Getters cancelled at random moments while producers put: every message ends in
    exactly one getter's hands, none lost, none twice, none left locked."""
    rng = random.Random(11)
    count = 150

    async def body(qm: AsyncQueueManager) -> None:
        await qm.define_queue("Q")
        received: list[bytes] = []
        finished = asyncio.Event()

        async def consumer(assured: bool) -> None:
            while not finished.is_set():
                confirm_id = rng.randrange(1, 2**40) if assured else None
                try:
                    got = await asyncio.wait_for(qm.get("Q", wait=0.05, confirm_id=confirm_id),
                                                 rng.choice((0.0005, 0.002, 0.01, 0.05)))
                except TimeoutError:
                    continue  # cancelled by the timeout, wherever it was
                if got is None:
                    continue
                if assured:
                    await qm.confirm_get("Q", got.uid)
                received.append(got.data)
                if len(received) >= count:
                    finished.set()

        consumers = [asyncio.create_task(consumer(assured=n % 2 == 0)) for n in range(6)]
        for n in range(count):
            await qm.put("Q", Message(b"m%d" % n))
            if n % 10 == 0:
                await asyncio.sleep(rng.random() / 100)
        await asyncio.wait_for(finished.wait(), 60)
        await asyncio.gather(*consumers)
        assert sorted(received) == sorted(b"m%d" % n for n in range(count))  # each exactly once
        assert await qm.depth("Q") == 0  # nothing left, locked or not

    run(db_path, body)


async def _depth_is(qm: AsyncQueueManager, depth: int) -> bool:
    return await qm.depth("Q") == depth


@contextlib.contextmanager
def lock_held_up(qm: AsyncQueueManager) -> Iterator[tuple[threading.Event, threading.Event]]:
    """Hold the next get up inside its transaction, just as it locks its message: the
    test then cancels the awaiting coroutine while the work is surely in progress."""
    entered, release = threading.Event(), threading.Event()

    def trace(sql: str) -> None:
        if sql.startswith("UPDATE messages SET state = 2") and not entered.is_set():
            entered.set()
            release.wait(BOUND)

    with qm.sync.tracer(trace):
        try:
            yield entered, release
        finally:
            release.set()


async def cancel_mid_lock(qm: AsyncQueueManager, get: Awaitable[Message | None], ready: list[bytes]) -> None:
    """Start ``get``, cancel it while its worker is locking a message, let the worker
    finish; return once the queue's ready messages are ``ready`` (the message handed back)."""
    with lock_held_up(qm) as (entered, release):
        getter = asyncio.ensure_future(get)
        assert await asyncio.to_thread(entered.wait, BOUND)
        getter.cancel()
        await asyncio.sleep(0)  # the cancellation lands in the coroutine
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await getter
        # (inside the tracer: removing it while the worker's statement runs would deadlock)
        await eventually(lambda: _browsed(qm, ready), f"{ready} are ready again")


@pytest.mark.parametrize("confirm_id", [None, 5])
def test_a_get_cancelled_while_it_locks_hands_the_message_back(db_path: Path, confirm_id: int | None) -> None:
    async def body(qm: AsyncQueueManager) -> None:
        await qm.define_queue("Q")
        await qm.put("Q", Message(b"x"))
        await cancel_mid_lock(qm, qm.get("Q", confirm_id=confirm_id), [b"x"])
        assert (await qm.browse("Q"))[0].backout_count == 0  # never delivered: no backout
        got = await qm.get("Q", wait=BOUND)
        assert got is not None and got.data == b"x"

    run(db_path, body)


def test_a_cancelled_assured_get_hands_back_only_its_own_message(db_path: Path) -> None:
    async def body(qm: AsyncQueueManager) -> None:
        await qm.define_queue("Q", ordering="fifo")
        await qm.put_many("Q", [Message(b"first"), Message(b"second")])
        first = await qm.get("Q", confirm_id=5)
        assert first is not None and first.data == b"first"
        await cancel_mid_lock(qm, qm.get("Q", confirm_id=5), [b"second"])  # the second, under the same id
        await qm.confirm_get("Q", first.uid)  # still locked under 5: not handed back with it
        assert await qm.depth("Q") == 1

    run(db_path, body)


async def _browsed(qm: AsyncQueueManager, data: list[bytes]) -> bool:
    return [m.data for m in await qm.browse("Q")] == data


# -- concurrency and the loop ---------------------------------------------------------------------


def test_a_hundred_coroutines_putting_all_land(db_path: Path) -> None:
    async def body(qm: AsyncQueueManager) -> None:
        await qm.define_queue("Q")

        async def producer(n: int) -> list[str]:
            return [str(await qm.put("Q", Message(b"%d:%d" % (n, i)))) for i in range(5)]

        uids = [uid for batch in await asyncio.gather(*(producer(n) for n in range(100))) for uid in batch]
        assert len(set(uids)) == 500
        assert await qm.depth("Q") == 500
        held = {m.data for m in await qm.browse("Q")}
        assert held == {b"%d:%d" % (n, i) for n in range(100) for i in range(5)}

    run(db_path, body)
    with QueueManager(db_path) as qm:  # durable: another queue manager reads them all
        assert qm.depth("Q") == 500


def test_the_loop_keeps_ticking_while_gets_wait_and_puts_run(db_path: Path) -> None:
    async def body(qm: AsyncQueueManager) -> None:
        await qm.define_queue("Q")
        gaps: list[float] = []
        stop = asyncio.Event()

        async def heartbeat() -> None:
            last = time.monotonic()
            while not stop.is_set():
                await asyncio.sleep(0.01)
                now = time.monotonic()
                gaps.append(now - last)
                last = now

        beat = asyncio.create_task(heartbeat())
        waiters = [asyncio.create_task(qm.get("Q", wait=1.0, filter={"never": "sent"})) for _ in range(20)]
        await asyncio.gather(*(qm.put("Q", Message(b"x")) for _ in range(50)))
        assert await asyncio.gather(*waiters) == [None] * 20
        stop.set()
        await beat
        # About 1 s of 10 ms beats. A get that blocked the loop for its wait would stop the
        # beats for the whole second: bounds far from both, so a busy machine cannot fail it.
        assert len(gaps) > 20
        assert max(gaps) < 0.9, f"the loop was blocked for {max(gaps):.3f} s"

    run(db_path, body)


# -- consuming -------------------------------------------------------------------------------------


def test_consume_confirms_each_message_after_the_body(db_path: Path) -> None:
    async def body(qm: AsyncQueueManager) -> None:
        await qm.define_queue("Q", ordering="fifo")
        await qm.put_many("Q", [Message(b"a"), Message(b"b"), Message(b"c")])
        seen = []
        async with qm.consume("Q", wait=0) as messages:
            async for message in messages:
                seen.append(message.data)
                assert await qm.depth("Q") == 4 - len(seen)  # the one in hand is still held (locked)
        assert seen == [b"a", b"b", b"c"]
        assert await qm.depth("Q") == 0

    run(db_path, body)


def test_an_exception_in_the_body_undoes_and_counts_toward_the_backout_queue(db_path: Path) -> None:
    async def body(qm: AsyncQueueManager) -> None:
        await qm.define_queue("BOQ")
        await qm.define_queue("Q", backout_threshold=2, backout_queue="BOQ", redelivery_delay_ms=0)
        await qm.put("Q", Message(b"poison"))
        for attempt in (1, 2):
            with pytest.raises(ValueError, match="cannot parse"):
                async with qm.consume("Q", wait=0) as messages:
                    async for message in messages:
                        assert message.backout_count == attempt - 1
                        raise ValueError("cannot parse")
        assert await qm.depth("Q") == 0
        assert [m.data for m in await qm.browse("BOQ")] == [b"poison"]

    run(db_path, body)


def test_break_confirms_and_a_consumer_waits_for_new_messages(db_path: Path) -> None:
    async def body(qm: AsyncQueueManager) -> None:
        await qm.define_queue("Q")

        async def first_two() -> list[bytes]:
            out = []
            async with qm.consume("Q", wait=BOUND) as messages:
                async for message in messages:
                    out.append(message.data)
                    if len(out) == 2:
                        break
            return out

        consumer = asyncio.create_task(first_two())
        for data in (b"one", b"two", b"three"):
            await qm.put("Q", Message(data))
        assert await asyncio.wait_for(consumer, BOUND) == [b"one", b"two"]
        assert [m.data for m in await qm.browse("Q")] == [b"three"]

    run(db_path, body)


def test_consume_without_confirm_and_bad_arguments(db_path: Path) -> None:
    async def body(qm: AsyncQueueManager) -> None:
        await qm.define_queue("Q")
        await qm.put("Q", Message(b"x", fields={"k": "v"}))
        await qm.put("Q", Message(b"y"))
        got = [m.data async for m in qm.consume("Q", wait=0, confirm=False, filter={"k": "v"})]
        assert got == [b"x"]
        assert [m.data for m in await qm.browse("Q")] == [b"y"]
        with pytest.raises(InvalidType, match="confirm must be"):
            qm.consume("Q", confirm=1)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument, match="queue name"):
            qm.consume("bad name")

    run(db_path, body)


def test_a_bare_loop_left_by_an_exception_undoes_the_message(db_path: Path) -> None:
    async def body(qm: AsyncQueueManager) -> None:
        await qm.define_queue("Q")
        await qm.put("Q", Message(b"x"))
        with pytest.raises(RuntimeError):
            async for _message in qm.consume("Q", wait=0):
                raise RuntimeError("boom")
        await eventually(lambda: _browsed(qm, [b"x"]), "the message is ready again")
        assert (await qm.browse("Q"))[0].backout_count == 1

    run(db_path, body)


def test_a_subprocess_put_wakes_a_consumer(db_path: Path) -> None:
    """consume, waiting across processes: a put from another process arrives in the loop."""

    async def body(qm: AsyncQueueManager) -> None:
        await qm.define_queue("Q")
        consumer = qm.consume("Q", wait=BOUND)
        script = "import sys; from edgeq import QueueManager, Message; " \
                 "QueueManager(sys.argv[1]).put('Q', Message(b'remote'))"
        proc = await asyncio.create_subprocess_exec(sys.executable, "-c", script, str(db_path))
        message = await asyncio.wait_for(consumer.__anext__(), 60)
        assert await asyncio.wait_for(proc.wait(), 60) == 0
        assert message.data == b"remote"
        await consumer.aclose()  # undone: it was not confirmed
        assert [m.backout_count for m in await qm.browse("Q")] == [1]

    run(db_path, body)

"""edgeq for asyncio: :class:`AsyncQueueManager`, the queue manager's verbs as coroutines (docs/aio.md)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import secrets
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, Self, TypeVar

from edgeq.args import check_positive
from edgeq.consume.doorbell import Doorbell
from edgeq.consume.waiting import check_wait
from edgeq.errors import (
    ConfirmIdNotFound,
    InvalidArgument,
    InvalidType,
    MessageExpired,
    MessageNotFound,
    QueueManagerClosed,
)
from edgeq.manager import QueueManager
from edgeq.message import Message, check_fields
from edgeq.names import check_name
from edgeq.types import MAX_CONFIRM_ID, Filter
from edgeq.uid import MessageUID

__all__ = ["AsyncConsumer", "AsyncQueueManager"]

log = logging.getLogger("edgeq")

T = TypeVar("T")
R = TypeVar("R")
P = ParamSpec("P")
Wait = float | timedelta | None


def _fresh_confirm_id() -> int:
    """A confirm id for a get this object locks itself: random, so never another getter's."""
    return secrets.randbelow(MAX_CONFIRM_ID) + 1


def _verb(verb: Callable[Concatenate[QueueManager, P], R]) -> Callable[
        Concatenate[AsyncQueueManager, P], Coroutine[Any, Any, R]]:
    """A :class:`QueueManager` verb as a coroutine method, with its signature, run in the pool."""

    async def run(self: AsyncQueueManager, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await self._call(verb, *args, **kwargs)

    functools.update_wrapper(run, verb, assigned=("__name__",), updated=())  # inspect.signature: verb's
    run.__qualname__ = f"AsyncQueueManager.{verb.__name__}"
    run.__doc__ = f"``QueueManager.{verb.__name__}`` as a coroutine, run in the pool."
    return run


class AsyncQueueManager:
    """A :class:`~edgeq.manager.QueueManager` for asyncio, on one event loop; SQLite work runs in a pool."""

    def __init__(
        self, path: str | Path, name: str | None = None, *, max_workers: int = 32, **options: Any
    ) -> None:
        check_positive(max_workers, "max_workers")
        self._open_args = (path, name, options)
        self._pool = ThreadPoolExecutor(max_workers, thread_name_prefix="edgeq-aio")
        self._qm: QueueManager | None = None
        self._opening = asyncio.Lock()
        self._bell: Doorbell | None = None
        self._closing = False
        self._closed = False
        self._jobs: set[Future[Any]] = set()  # every job in the pool: close() waits for them
        self._jobs_done = threading.Condition()
        self._confirming: set[asyncio.Future[Any]] = set()  # plain gets' confirms in flight
        self._calls = 0  # calls in progress: close() lets them settle what they took
        self._no_calls = asyncio.Event()
        self._no_calls.set()

    # -- the object --------------------------------------------------------------------------

    @property
    def sync(self) -> QueueManager:
        """The underlying queue manager (opened by the first call), e.g. for threads."""
        if self._qm is None:
            raise InvalidArgument("the store is not open yet: await a call first (or use async with)")
        return self._qm

    async def open(self) -> Self:
        await self._ready()
        return self

    async def close(self) -> None:
        """Wait for the calls in progress, then close; waiting gets raise :class:`QueueManagerClosed`."""
        if self._closing:
            return
        self._closing = True
        if self._bell is not None:
            self._bell.close()  # waiting gets raise QueueManagerClosed
        await self._no_calls.wait()  # a get in progress hands out or back what it took first
        await asyncio.to_thread(self._shut)
        self._closed = True

    def _shut(self) -> None:
        with self._jobs_done:
            self._jobs_done.wait_for(lambda: not self._jobs)
        if self._qm is not None:
            self._qm.close()
        self._pool.shutdown(wait=True)

    async def __aenter__(self) -> Self:
        return await self.open()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closing else "open" if self._qm is not None else "not yet open"
        return f"AsyncQueueManager({str(self._open_args[0])!r}, {state})"

    async def run(self, work: Callable[[QueueManager], T]) -> T:
        """Run ``work(queue_manager)`` in the pool: any verb without a coroutine here."""
        return await self._call(work)

    # -- the pool ------------------------------------------------------------------------------

    async def _ready(self) -> QueueManager:
        if self._closing:
            raise QueueManagerClosed("the AsyncQueueManager is closed; make a new one")
        if self._qm is None:
            async with self._opening:
                if self._qm is None:
                    path, name, options = self._open_args
                    self._qm = await asyncio.wrap_future(self._spawn(QueueManager, path, name, **options))
        return self._qm

    def _spawn(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        """Run ``fn`` in the pool, counted until it is done (close() waits for it)."""
        job = self._pool.submit(fn, *args, **kwargs)
        with self._jobs_done:
            self._jobs.add(job)
        job.add_done_callback(self._forget)
        return job

    def _forget(self, job: Future[Any]) -> None:
        with self._jobs_done:
            self._jobs.discard(job)
            self._jobs_done.notify_all()

    @contextlib.asynccontextmanager
    async def _counted(self) -> AsyncIterator[QueueManager]:
        """A call in progress (close() waits for it), with the store open."""
        qm = await self._ready()
        self._calls += 1
        self._no_calls.clear()
        try:
            yield qm
        finally:
            self._calls -= 1
            if not self._calls:
                self._no_calls.set()

    async def _call(
        self, work: Callable[Concatenate[QueueManager, P], T], /, *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """``work(queue_manager, ...)`` in the pool, once the plain gets before it are confirmed."""
        async with self._counted() as qm:
            await self._confirmed()
            return await asyncio.wrap_future(self._spawn(work, qm, *args, **kwargs))

    async def _confirmed(self) -> None:
        """Wait for the confirms of the plain gets already handed out (read your writes)."""
        if self._confirming:
            await asyncio.wait(set(self._confirming))

    # -- getting ---------------------------------------------------------------------------------

    async def _take(
        self, queue: str, count: int, wait: Wait, confirm_id: int | None, filter: Filter | None
    ) -> list[Message]:
        """Up to ``count`` messages, waiting up to ``wait``; locked under ``confirm_id`` or taken in hand."""
        seconds = check_wait(wait)
        async with self._counted() as qm:
            await self._confirmed()
            hold = confirm_id if confirm_id is not None else _fresh_confirm_id()
            if not seconds:  # None or 0: one attempt
                got = await self._lock(qm, queue, count, hold, filter)
            else:
                got = await self._wait_for(qm, queue, count, hold, filter, seconds)
            if got and confirm_id is None:
                self._confirm_later(qm, queue, got)
            return got

    async def _wait_for(
        self, qm: QueueManager, queue: str, count: int, hold: int, filter: Filter | None, seconds: float
    ) -> list[Message]:
        """An attempt after each change of the store (or a due redelivery) until one finds something."""
        loop = asyncio.get_running_loop()
        deadline = None if math.isinf(seconds) else loop.time() + seconds
        bell = self._doorbell(qm, loop)
        bell.listen()
        try:
            while True:
                seen = bell.rings
                got = await self._lock(qm, queue, count, hold, filter)
                if got:
                    return got
                # when a message waiting out its redelivery delay is due (edgeq.consume.waiting)
                later = await asyncio.wrap_future(self._spawn(qm._gets.due_in, queue))
                due = None if later is None else loop.time() + later
                wake = due if deadline is None else deadline if due is None else min(due, deadline)
                if not await bell.after(seen, wake) and wake == deadline:
                    return got
        finally:
            bell.leave()

    def _doorbell(self, qm: QueueManager, loop: asyncio.AbstractEventLoop) -> Doorbell:
        if self._bell is None:
            self._bell = Doorbell(qm._waker, loop)  # the facade's waker: edgeq.consume.waiting
        return self._bell

    async def _lock(
        self, qm: QueueManager, queue: str, count: int, hold: int, filter: Filter | None
    ) -> list[Message]:
        """One attempt in the pool; if the coroutine is cancelled meanwhile, what it locked is handed back."""
        job = self._spawn(qm.get_many, queue, count, confirm_id=hold, filter=filter)
        try:
            return await asyncio.wrap_future(job)
        except asyncio.CancelledError:
            self._spawn(_hand_back, qm, job, queue, hold)
            raise

    def _confirm_later(self, qm: QueueManager, queue: str, got: Sequence[Message]) -> None:
        """A plain get's messages are in the coroutine's hands: confirm them in the pool."""
        done = asyncio.wrap_future(
            self._spawn(_confirm, qm, queue, [m.uid for m in got if m.uid is not None]))
        self._confirming.add(done)
        done.add_done_callback(self._confirming.discard)

    async def get(
        self, queue: str, *, wait: Wait = None, confirm_id: int | None = None, filter: Filter | None = None,
    ) -> Message | None:
        """The next message, waiting up to ``wait``; None if none came. Cancelling it loses nothing."""
        got = await self._take(queue, 1, wait, confirm_id, filter)
        return got[0] if got else None

    async def get_many(
        self, queue: str, count: int, *, wait: Wait = None, confirm_id: int | None = None,
        filter: Filter | None = None,
    ) -> list[Message]:
        return await self._take(queue, count, wait, confirm_id, filter)

    def consume(
        self, queue: str, *, wait: Wait = None, confirm: bool = True, filter: Filter | None = None
    ) -> AsyncConsumer:
        """The messages of ``queue`` for ``async for``, as ``QueueManager.consume`` (docs/aio.md)."""
        check_name(queue, "queue name")
        seconds = check_wait(wait)
        if not isinstance(confirm, bool):
            raise InvalidType(f"confirm must be True or False, not {confirm!r}")
        if filter is not None:
            check_fields(filter)
        return AsyncConsumer(self, queue, math.inf if seconds is None else seconds, confirm, filter)

    # -- the other verbs: QueueManager's, each run in the pool by _call (docs/aio.md) -------------
    # (ignore[arg-type]: a verb with **attributes might take a keyword named self, says mypy; it
    # still gives the coroutine that verb's signature)

    put = _verb(QueueManager.put)
    put_many = _verb(QueueManager.put_many)
    put_each = _verb(QueueManager.put_each)
    confirm_put = _verb(QueueManager.confirm_put)
    confirm_put_each = _verb(QueueManager.confirm_put_each)
    browse = _verb(QueueManager.browse)
    confirm_get = _verb(QueueManager.confirm_get)
    confirm_get_each = _verb(QueueManager.confirm_get_each)
    undo = _verb(QueueManager.undo)
    delete_message = _verb(QueueManager.delete_message)
    release_locks = _verb(QueueManager.release_locks)
    define_queue = _verb(QueueManager.define_queue)
    define_remote_queue = _verb(QueueManager.define_remote_queue)
    define_home_server_queue = _verb(QueueManager.define_home_server_queue)  # type: ignore[arg-type]
    alter_queue = _verb(QueueManager.alter_queue)  # type: ignore[arg-type]
    queue_attributes = _verb(QueueManager.queue_attributes)
    queue_usage = _verb(QueueManager.queue_usage)
    store_usage = _verb(QueueManager.store_usage)
    queue_names = _verb(QueueManager.queue_names)
    delete_queue = _verb(QueueManager.delete_queue)
    depth = _verb(QueueManager.depth)
    purge = _verb(QueueManager.purge)
    activate = _verb(QueueManager.activate)
    sweep_expired = _verb(QueueManager.sweep_expired)


class AsyncConsumer:
    """The messages of one queue for ``async for``: see :meth:`AsyncQueueManager.consume`."""

    def __init__(
        self, owner: AsyncQueueManager, queue: str, wait: float, confirm: bool, filter: Filter | None
    ) -> None:
        self._owner = owner
        self.queue = queue
        self._wait = wait
        self._confirm = confirm
        self._filter = filter
        self._held: tuple[int, Message] | None = None  # the assured get the body works on
        self._ended = False

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Message:
        await self._settle(done=True)
        if self._ended:
            raise StopAsyncIteration
        hold = _fresh_confirm_id() if self._confirm else None
        try:
            got = await self._owner._take(self.queue, 1, self._wait, hold, self._filter)
        except QueueManagerClosed:
            got = []
        if not got:
            self._ended = True
            raise StopAsyncIteration
        if hold is not None:
            self._held = (hold, got[0])
        return got[0]

    async def _settle(self, *, done: bool) -> None:
        held, self._held = self._held, None
        if held is not None:
            await self._owner._call(lambda qm: _settle(qm, self.queue, held, done))

    async def aclose(self) -> None:
        """Stop: the message in hand, if any, is undone (one more backout)."""
        self._ended = True
        await self._settle(done=False)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._ended = True
        await self._settle(done=exc_type is None)

    def __del__(self) -> None:
        held, self._held = self._held, None
        if held is None:
            return
        try:  # a bare async for left early: undo in the pool rather than lose the message
            self._owner._spawn(_undo_dropped, self._owner.sync, self.queue, held)
        except Exception as exc:  # nothing may escape a finaliser: say what is left behind
            log.warning("a consumer of %s was dropped holding message %s, which could not be undone (%s): "
                        "it stays locked until release_locks(%r)", self.queue, held[1].uid, exc, self.queue)


# -- what runs in the pool ---------------------------------------------------------------------------


def _hand_back(qm: QueueManager, job: Future[list[Message]], queue: str, hold: int) -> None:
    """Once ``job`` completes, make what it locked for a cancelled coroutine ready again (no backout)."""
    if job.cancelled() or job.exception() is not None:
        return  # it never ran, or took nothing
    got = job.result()
    if not got:
        return
    uids = [m.uid for m in got if m.uid is not None]
    try:
        qm.undo(queue, hold, count_backout=False, uids=uids)
    except ConfirmIdNotFound as exc:  # released or expired meanwhile: nothing left to hand back
        log.warning("a cancelled get's messages on %s could not be handed back: %s", queue, exc)
    except Exception:  # nobody awaits this: say what is left behind
        log.exception("a cancelled get's messages %s on %s could not be handed back: they stay locked until "
                      "release_locks(%r)", [str(u) for u in uids], queue, queue)


def _confirm(qm: QueueManager, queue: str, uids: list[MessageUID]) -> None:
    """A plain get's messages reached the coroutine: delete them."""
    try:
        results = qm.confirm_get_each(queue, uids)
    except Exception:  # nobody awaits this: say what is left behind
        log.exception("messages %s of %s were handed out but could not be deleted: they stay locked until "
                      "release_locks(%r), then come again", [str(u) for u in uids], queue, queue)
        return
    for result in results:
        if result.status == "unknown":
            log.warning("message %s of %s was handed out, but its lock was released before it was deleted: "
                        "it may be delivered again", result.uid, queue)


def _settle(qm: QueueManager, queue: str, held: tuple[int, Message], done: bool) -> None:
    """Confirm (``done``) or undo a consumer's message, unless it expired or was released meanwhile."""
    confirm_id, message = held
    try:
        if done and message.uid is not None:
            qm.confirm_get(queue, message.uid)
        else:
            qm.undo(queue, confirm_id)
    except MessageExpired:
        log.warning("message %s of %s expired while it was processed; it has been discarded",
                    message.uid, queue)
    except MessageNotFound as exc:  # ConfirmIdNotFound too
        log.warning("message %s of %s could not be settled: %s", message.uid, queue, exc)


def _undo_dropped(qm: QueueManager, queue: str, held: tuple[int, Message]) -> None:
    """A consumer dropped holding a message (nobody awaits this): undo it, or say why not."""
    try:
        _settle(qm, queue, held, False)
    except Exception:
        log.exception("a consumer of %s was dropped holding message %s, which could not be undone: it stays "
                      "locked until release_locks(%r)", queue, held[1].uid, queue)


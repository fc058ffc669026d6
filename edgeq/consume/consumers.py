"""Consumer loops (:class:`Consumer`) and listeners (:class:`Listener`): each message got assured,
confirmed once the application is done with it, undone if it failed. See docs/consumers.md."""

from __future__ import annotations

import logging
import math
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Self

from edgeq.consume.waiting import Waker, check_wait
from edgeq.errors import (
    ConfirmIdNotFound,
    InvalidArgument,
    InvalidType,
    MessageExpired,
    MessageNotFound,
    QueueManagerClosed,
)
from edgeq.gets import Gets
from edgeq.message import Message, check_fields
from edgeq.names import check_name
from edgeq.queues.attributes import readable_queue
from edgeq.store.tx import Tx
from edgeq.types import MAX_CONFIRM_ID, FieldValue, Filter

__all__ = ["TRACEBACK_EVERY_MS", "Consumer", "Consumers", "Listener", "check_readable"]

log = logging.getLogger("edgeq")

#: A listener logs the traceback of a message's failing callback at most this often.
TRACEBACK_EVERY_MS = 60_000


def _confirm_id() -> int:
    """A fresh confirm id: random, so consumers in other threads and processes never share one."""
    return secrets.randbelow(MAX_CONFIRM_ID) + 1


def check_readable(gets: Gets, queue: str) -> None:
    """Raise now, in the caller's thread, if ``queue`` is missing or cannot be got from."""
    with gets.sink.db.read() as conn:
        readable_queue(Tx(conn), gets.qm_name, queue)


class _Taker:
    """Takes one message at a time from a queue and settles it (for both loops)."""

    def __init__(
        self, gets: Gets, queue: str, *, confirm: bool, wanted: Mapping[str, FieldValue] | None
    ) -> None:
        self.gets = gets
        self.queue = queue
        self.confirm = confirm
        self.wanted = dict(wanted) if wanted is not None else None

    def take(self) -> list[tuple[int | None, Message]]:
        """The next message, if any, with its fresh confirm id (None without ``confirm``)."""
        confirm_id = _confirm_id() if self.confirm else None
        got = self.gets.get_many(self.queue, 1, confirm_id=confirm_id, filter=self.wanted)
        return [(confirm_id, message) for message in got]

    def done(self, message: Message) -> None:
        """Confirm an assured get; one that expired or lost its lock meanwhile is logged."""
        assert message.uid is not None  # a got message always has one
        try:
            self.gets.confirm_get(self.queue, message.uid)
        except MessageExpired:
            log.warning("message %s of %s expired while it was processed; it has been discarded",
                        message.uid, self.queue)
        except MessageNotFound as exc:
            log.warning("message %s of %s could not be confirmed: %s", message.uid, self.queue, exc)

    def failed(self, confirm_id: int, message: Message) -> tuple[bool, str]:
        """Undo a failed assured get (one more backout); return whether it was undone and what
        became of it, for a log line."""
        try:
            _, due = self.gets.undo_due(self.queue, confirm_id)
        except ConfirmIdNotFound as exc:
            return False, f"it could not be undone: {exc}"
        backouts = f"undone (backout {message.backout_count + 1})"
        if message.uid is None or (message.uid.origin, message.uid.stamp) not in due:
            return True, f"{backouts} and moved to the queue's backout queue"
        at = due[(message.uid.origin, message.uid.stamp)]
        if at is None:
            return True, f"{backouts}, offered again at once (no redelivery delay)"
        return True, f"{backouts}, offered again in {max(0, at - self.gets.clock()) / 1000:g} s"

    def due_in(self) -> float | None:
        return self.gets.due_in(self.queue)


class Consumer:
    """The messages of one queue, for a loop: see ``QueueManager.consume`` and docs/consumers.md."""

    def __init__(
        self, gets: Gets, waker: Waker, queue: str, *, wait: float, confirm: bool,
        wanted: Mapping[str, FieldValue] | None,
    ) -> None:
        self._taker = _Taker(gets, queue, confirm=confirm, wanted=wanted)
        self._waker = waker
        self._wait = wait
        self._held: tuple[int, Message] | None = None  # the assured get the body works on
        self._ended = False

    @property
    def queue(self) -> str:
        return self._taker.queue

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> Message:
        self._settle(done=True)
        if self._ended:
            raise StopIteration
        try:
            got = self._waker.until(self._taker.take, self._wait, due=self._taker.due_in)
        except QueueManagerClosed:
            got = []
        if not got:
            self._ended = True
            raise StopIteration
        confirm_id, message = got[0]
        if confirm_id is not None:
            self._held = (confirm_id, message)
        return message

    def _settle(self, *, done: bool) -> None:
        held, self._held = self._held, None
        if held is None:
            return
        confirm_id, message = held
        with self._waker.busy():
            if done:
                self._taker.done(message)
            else:
                undone, what = self._taker.failed(confirm_id, message)
                if not undone:
                    log.warning("message %s of %s: %s", message.uid, self.queue, what)

    def close(self) -> None:
        """Stop consuming: the message in hand, if any, is undone; iterating afterwards ends."""
        self._ended = True
        self._settle(done=False)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._ended = True
        self._settle(done=exc_type is None)

    def __del__(self) -> None:
        if self._held is None:
            return
        try:  # a bare for loop left early: undo rather than lose the message
            self._settle(done=False)
        except Exception as exc:  # nothing may escape a finaliser; say what is left behind
            log.warning("a consumer of %s was dropped holding a message, which could not be undone (%s): "
                        "it stays locked until release_locks(%r)", self._taker.queue, exc, self._taker.queue)


class Listener:
    """Threads handing every message of a queue to a callback: see ``QueueManager.listen``."""

    def __init__(
        self, gets: Gets, waker: Waker, queue: str, callback: Callable[[Message], object], *,
        threads: int, confirm: bool, wanted: Mapping[str, FieldValue] | None,
    ) -> None:
        self._taker = _Taker(gets, queue, confirm=confirm, wanted=wanted)
        self._waker = waker
        self._callback = callback
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._error: BaseException | None = None
        self._delivered = 0
        self._failed = 0
        self._traced: dict[str, int] = {}  # uid -> when its callback's traceback was last logged (clock ms)
        self._threads = [
            threading.Thread(target=self._run, name=f"edgeq-listen:{queue}:{n}", daemon=True)
            for n in range(threads)
        ]
        for thread in self._threads:
            thread.start()

    @property
    def queue(self) -> str:
        return self._taker.queue

    @property
    def error(self) -> BaseException | None:
        """The error of the store that stopped the listener (None: none)."""
        with self._lock:
            return self._error

    @property
    def delivered(self) -> int:
        """Messages the callback returned from (each confirmed, with ``confirm=True``)."""
        with self._lock:
            return self._delivered

    @property
    def failed(self) -> int:
        """Messages the callback raised on (each undone, with ``confirm=True``)."""
        with self._lock:
            return self._failed

    @property
    def running(self) -> bool:
        return any(thread.is_alive() for thread in self._threads)

    def stop(self, timeout: float | None = None) -> bool:
        """Stop listening; wait up to ``timeout`` s (None: no limit) for callbacks in progress.

        Return whether every thread has ended. Safe twice, and from the callback itself."""
        self._stopping.set()
        self._waker.poke()
        return self.join(timeout)

    def join(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` s for the listener to stop; return whether it has."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in self._threads:
            if thread is threading.current_thread():
                continue
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self._threads if t is not threading.current_thread())

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<Listener {self.queue!r} {state}, {self.delivered} delivered, {self.failed} failed>"

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                self._waker.until(self._deliver, math.inf, stop=self._stopping.is_set, due=self._taker.due_in)
            except QueueManagerClosed:
                return
            except BaseException as exc:  # the store's error, not the callback's: stop, and say why
                with self._lock:
                    self._error = self._error or exc
                log.error("the listener on %s stopped: %s", self.queue, exc)
                self._stopping.set()
                self._waker.poke()
                return

    def _deliver(self) -> list[tuple[int | None, Message]]:
        """Take one message and hand it to the callback, inside the waker's busy section."""
        got = self._taker.take()
        if not got:
            return got
        confirm_id, message = got[0]
        try:
            self._callback(message)
        except BaseException as exc:
            what = (
                self._taker.failed(confirm_id, message)[1] if confirm_id is not None
                else "it is gone (confirm=False)"
            )
            with self._lock:
                self._failed += 1
            if not isinstance(exc, Exception):
                raise  # SystemExit and the like stop the listener
            traced = self._trace_due(str(message.uid))
            log.error("the listener's callback failed on message %s of %s (%s: %s); %s%s",
                      message.uid, self.queue, type(exc).__name__, exc, what,
                      "" if traced else " (traceback logged within the last minute)",
                      exc_info=exc if traced else None)
        else:
            if confirm_id is not None:
                self._taker.done(message)
            with self._lock:
                self._delivered += 1
        return got

    def _trace_due(self, uid: str) -> bool:
        """Whether this failure of ``uid`` logs its traceback: at most once per
        :data:`TRACEBACK_EVERY_MS` a message."""
        now = self._taker.gets.clock()
        with self._lock:
            last = self._traced.get(uid)
            if last is not None and 0 <= now - last < TRACEBACK_EVERY_MS:
                return False
            self._traced = {u: t for u, t in self._traced.items() if 0 <= now - t < TRACEBACK_EVERY_MS}
            self._traced[uid] = now
            return True


class Consumers:
    """Opens consumer loops and listeners on one store's gets and waker (``QueueManager.consume``,
    ``QueueManager.listen``), checking their arguments before anything starts."""

    def __init__(self, gets: Gets, waker: Waker) -> None:
        self.gets = gets
        self.waker = waker

    def consume(self, queue: str, wait: object, confirm: bool, filter: Filter | None) -> Consumer:
        """A :class:`Consumer` of ``queue`` (``wait`` None: it never ends by itself)."""
        check_name(queue, "queue name")
        seconds = check_wait(wait)
        wanted = _checked(confirm, filter)
        return Consumer(self.gets, self.waker, queue, wait=math.inf if seconds is None else seconds,
                        confirm=confirm, wanted=wanted)

    def listen(
        self, queue: str, callback: Callable[[Message], object], threads: int, confirm: bool,
        filter: Filter | None,
    ) -> Listener:
        """A running :class:`Listener` of ``queue``; raises now if ``queue`` cannot be got from."""
        check_name(queue, "queue name")
        if not callable(callback):
            raise InvalidType(
                f"listen takes a callable, called with each message, not {type(callback).__name__}")
        if isinstance(threads, bool) or not isinstance(threads, int):
            raise InvalidType(f"threads must be a positive int, not {threads!r}")
        if threads < 1:
            raise InvalidArgument(f"threads must be a positive int, not {threads}")
        wanted = _checked(confirm, filter)
        check_readable(self.gets, queue)
        return Listener(self.gets, self.waker, queue, callback, threads=threads, confirm=confirm,
                        wanted=wanted)


def _checked(confirm: object, filter: Filter | None) -> dict[str, FieldValue] | None:
    """The arguments both verbs share, checked before anything starts."""
    if not isinstance(confirm, bool):
        raise InvalidType(f"confirm must be True or False, not {confirm!r}")
    return check_fields(filter) if filter is not None else None

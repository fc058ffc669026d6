"""Flat combining: one thread runs the writes other threads have queued, so each caller blocks
once (docs/storage.md, "Group commit"). A queued function runs on the leading thread: it must
use only the connection it is given (and thread-safe objects it closes over).
"""

from __future__ import annotations

import copy
import sqlite3
import threading
from collections import deque
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from edgeq.errors import StoreError
from edgeq.store.combining import Combiner, Group, Member, lost_whole, release_statements, undo

__all__ = ["Lead", "Request", "Writer"]

T = TypeVar("T")

_NAME = "edgeq_run"  # the savepoint of each body (edgeq_write is write()'s)
_SAVEPOINT = f"SAVEPOINT {_NAME}"
_RELEASE = f"RELEASE {_NAME}"


class Writer(Protocol):
    """What a lead needs of the connection factory (edgeq.store.connection implements it)."""

    path: str
    timeout: float

    @property
    def turns(self) -> Combiner: ...

    def writer_connection(self) -> sqlite3.Connection: ...

    def wrote(self, conn: sqlite3.Connection, before: int) -> bool: ...

    def durable(self) -> bool: ...

    def writing(self, conn: sqlite3.Connection | None) -> None: ...

    def translate(self, exc: sqlite3.Error | UnicodeDecodeError) -> StoreError: ...

    def flushed(self) -> None: ...


class Request(Member, Generic[T]):
    """One caller's queued write; its thread blocks on ``lock`` until the lead fails it, names it
    the next lead or finishes it, or its group's committer wakes it."""

    __slots__ = ("body", "error", "finished", "flush", "group", "lead", "result", "wanted")

    def __init__(self, body: Callable[[sqlite3.Connection], T], durable: bool) -> None:
        super().__init__(durable)
        self.body = body
        self.wanted = durable  # durable is set again when the change joins a group
        self.result: T | None = None
        self.error: BaseException | None = None
        self.group: Group | None = None
        self.finished = False
        self.flush = False  # finished, and its caller waits for the flush itself
        self.lead = False

    def fail(self, error: BaseException) -> None:
        self.error = error
        self.lock.release()

    def finish(self, *, flush: bool) -> None:
        """Wake this caller: its change is committed (``flush``: it waits for the disk)."""
        self.finished, self.flush = True, flush
        self.lock.release()


class _Batch:
    """The kept writes of one lead's transaction: the first alone (``lone``, no group made) until
    a second joins it, then all in ``group``."""

    __slots__ = ("changed", "durable", "group", "lone")

    def __init__(self, group: Group | None) -> None:
        self.group = group  # one the turn came with holds other threads' writes already
        self.lone: Request[object] | None = None
        self.changed = self.durable = False

    def keep(self, request: Request[object], *, fresh: bool, changed: bool, durable: bool) -> None:
        if fresh and self.group is None:
            self.lone, self.changed, self.durable = request, changed, durable
            return
        group = self.group if self.group is not None else Group()
        self.group = group
        if self.lone is not None:
            _join(group, self.lone, self.changed, self.durable)
            self.lone = None
        _join(group, request, changed, durable)

    def lost(self, error: StoreError) -> None:
        """SQLite rolled back the whole transaction: every kept write of it fails."""
        if self.lone is not None:
            self.lone.fail(error)
            self.lone = None
        if self.group is not None:
            self.group.committed(error)
            self.group = None


def _join(group: Group, request: Request[object], changed: bool, durable: bool) -> None:
    request.group = group
    group.join(kept=True, changed=changed, durable=durable, member=request)


def _copy(
    error: BaseException, path: str, *, committed: str = "it was not committed"
) -> BaseException:
    """An error like ``error`` for another thread to raise; a StoreError for an interruption of
    the writing thread (the caller's own thread was not interrupted)."""
    if not isinstance(error, Exception):
        return StoreError(f"{path}: the thread writing this write was interrupted ({type(error).__name__}); "
                          f"{committed}: retry")
    try:
        twin = copy.copy(error)
    except Exception:  # an exception that cannot be copied: say what it said
        return StoreError(str(error))
    twin.__traceback__ = None
    return twin


class Lead:
    """The thread that runs the queued writes of others in one transaction."""

    def __init__(self, writer: Writer, limit: int) -> None:
        self._writer = writer
        self._limit = limit
        self._mutex = threading.Lock()
        self._queue: deque[Request[object]] = deque()
        self._leading = False
        self._taking = False  # the lead waits for the turn (its body still queued)

    def run(self, body: Callable[[sqlite3.Connection], T], durable: bool) -> T:
        """Queue ``body``, lead if nobody does, and return its outcome."""
        request: Request[T] = Request(body, durable)
        with self._mutex:
            self._queue.append(request)  # type: ignore[arg-type]
            lead = not self._leading
            self._leading = True
        if lead:
            self._lead()
        while True:
            try:
                request.lock.acquire()
            except BaseException:  # interrupted: the others must not wait for this thread
                self._abandon(request)  # type: ignore[arg-type]
                raise
            if not request.lead:
                break
            request.lead = False
            self._lead()
        if request.error is not None:
            error, request.error = request.error, None
            raise error
        if request.finished:
            if request.flush:
                self._writer.flushed()
        else:
            if request.group is None:
                # unreachable: a kept write joined a group
                raise StoreError("a write ended without an outcome")
            request.group.settle(request)
        return request.result  # type: ignore[return-value]

    def _lead(self) -> None:
        """Write a batch, then hand the lead to the oldest caller still queued."""
        try:
            self._write()
        finally:
            with self._mutex:
                self._hand_on()

    def _hand_on(self) -> None:
        """Name the oldest queued caller the lead (under the mutex), or lead no more."""
        following = self._queue[0] if self._queue else None
        self._leading = following is not None
        if following is not None:
            following.lead = True
            following.lock.release()

    def _abandon(self, request: Request[object]) -> None:
        """A caller stops waiting: its body, if still queued, never runs; if it was the lead, the next
        caller leads."""
        with self._mutex:
            try:
                self._queue.remove(request)
            except ValueError:
                return
            if request.lead:
                request.lead = False
                self._hand_on()

    def queued(self, turn_waiters: int) -> int:
        """The writes waiting: the queued bodies and the turn's other waiters."""
        with self._mutex:
            return len(self._queue) + turn_waiters - int(self._taking)

    def _take(self, most: int) -> list[Request[object]]:
        with self._mutex:
            return [self._queue.popleft() for _ in range(min(most, len(self._queue)))]

    def _write(self) -> None:
        """Take the turn, run the queued bodies in its transaction, end the turn; raises only an
        interruption (every caller gets its outcome)."""
        w = self._writer
        turns = w.turns
        self._taking = True
        try:
            batch = _Batch(turns.take(w.timeout))
        except BaseException as exc:
            self._taking = False
            for request in self._take(self._limit):
                request.fail(_copy(exc, w.path))
            if not isinstance(exc, Exception):
                raise
            return
        self._taking = False
        conn: sqlite3.Connection | None = None
        done = -1  # bodies run; -1: none taken yet
        try:
            conn = w.writer_connection()
            taken, done = self._take(self._limit), 0
            while taken:  # and what was queued meanwhile, up to the limit
                for index, request in enumerate(taken):
                    try:
                        self._one(conn, batch, request)
                    except BaseException as exc:  # could not begin, or interrupted: the rest fail too
                        for rest in taken[index + 1:]:
                            rest.fail(_copy(exc, w.path))
                        raise
                done += len(taken)
                taken = self._take(self._limit - done) if self._queue else []
        except BaseException as exc:
            for request in self._take(self._limit) if done < 0 else ():
                request.fail(_copy(exc, w.path))
            self._end(conn, batch)
            if not isinstance(exc, Exception):
                raise
            return
        self._end(conn, batch)

    def _end(self, conn: sqlite3.Connection | None, batch: _Batch) -> None:
        """End the turn; a lone write's caller waits for the flush itself, once the lead is handed on."""
        turns, lone = self._writer.turns, batch.lone
        if lone is None:
            turns.end(conn, batch.group, kept=False, changed=False, durable=False)
            return
        try:
            turns.end(conn, None, kept=True, changed=batch.changed, durable=False)
        except BaseException as exc:
            lone.fail(exc if isinstance(exc, Exception) else _copy(
                exc, self._writer.path, committed="whether it was committed is not known"))
            if not isinstance(exc, Exception):
                raise
        else:
            lone.finish(flush=batch.durable)

    def _one(self, conn: sqlite3.Connection, batch: _Batch, request: Request[object]) -> None:
        """Run one body in the open transaction (or a new one), keeping its change in ``batch`` or
        failing its caller. Raises if the write cannot begin, or on an interruption."""
        w = self._writer
        fresh = not conn.in_transaction
        try:
            conn.execute("BEGIN IMMEDIATE" if fresh else _SAVEPOINT)
        except sqlite3.Error as exc:
            error = w.translate(exc)
            request.fail(error)
            raise _copy(error, w.path) from exc
        before = conn.total_changes
        w.writing(conn)
        try:
            result = request.body(conn)
            wrote = w.wrote(conn, before)
            if not conn.in_transaction:
                raise StoreError("SQLite rolled back this write transaction under it; retry")
            if not fresh:
                conn.execute(_RELEASE)
        except BaseException as exc:
            w.writing(None)
            self._undo(conn, batch, fresh, exc)
            if isinstance(exc, (sqlite3.Error, UnicodeDecodeError)):
                translated = w.translate(exc)
                translated.__cause__ = exc
                request.fail(translated)
            else:  # its own error; an interruption of this thread, as an error its caller can take
                request.fail(_copy(exc, w.path) if not isinstance(exc, Exception) else exc)
            if not isinstance(exc, Exception):
                raise
            return
        w.writing(None)
        request.result = result
        batch.keep(request, fresh=fresh, changed=conn.total_changes != before,
                   durable=request.wanted and w.durable() and wrote)

    def _undo(
        self, conn: sqlite3.Connection, batch: _Batch, fresh: bool, exc: BaseException
    ) -> None:
        """Undo one body's changes; if SQLite lost the whole transaction, the batch fails too."""
        release_statements(exc)  # a statement in progress would stop the ROLLBACK TO and the COMMIT
        undo(conn, None if fresh else _NAME)
        if not conn.in_transaction:
            batch.lost(lost_whole(self._writer.path, exc))

"""Transaction combining: concurrent writes of one process share one transaction, one COMMIT and
one flush, each in a SAVEPOINT of it (docs/storage.md, "Group commit")."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from edgeq.args import check_positive
from edgeq.errors import StoreBusy, StoreError
from edgeq.store.commits import SyncBarrier

__all__ = [
    "GROUP_LIMIT", "Baton", "CombineStats", "Combiner", "Group", "Member", "lost_whole", "release_statements",
    "undo",
]

#: The most writes one transaction combines (bounds the wait of the first).
GROUP_LIMIT = 64

_SAVEPOINT_NAME = "edgeq_write"
_SAVEPOINT = f"SAVEPOINT {_SAVEPOINT_NAME}"
_RELEASE = f"RELEASE {_SAVEPOINT_NAME}"


def release_statements(exc: BaseException) -> None:
    """Let go of the cursors a failed statement's frames hold: while held, the statement stays
    "in progress" and no later COMMIT on the connection goes through."""
    traceback.clear_frames(exc.__traceback__)


def undo(conn: sqlite3.Connection, savepoint: str | None) -> None:
    """Undo one write: back to its ``savepoint``, or the whole transaction (None, or if that fails)."""
    try:
        if _in_transaction(conn):
            if savepoint is None:
                conn.execute("ROLLBACK")
            else:
                conn.execute(f"ROLLBACK TO {savepoint}")
                conn.execute(f"RELEASE {savepoint}")
    except sqlite3.Error:
        with contextlib.suppress(sqlite3.Error):  # cannot undo this write alone: undo all
            conn.execute("ROLLBACK")


def lost_whole(path: str, exc: BaseException) -> StoreError:
    """The error of every write of a transaction SQLite rolled back whole after ``exc``."""
    return StoreError(
        f"{path}: SQLite rolled back the whole write transaction this write shared with other writes "
        f"(another write in it failed: {exc}); nothing of it was committed: retry"
    )


def _in_transaction(conn: sqlite3.Connection) -> bool:
    try:
        return conn.in_transaction
    except sqlite3.Error:
        return False


@dataclass(frozen=True)
class CombineStats:
    """COMMITs made, the writes they held (``writes / transactions``: mean group size), threads queued now."""

    transactions: int
    writes: int
    queued: int = 0


class Member:
    """A write waiting in a group's transaction; its thread blocks on ``lock`` until the committer."""

    __slots__ = ("durable", "lock")

    def __init__(self, durable: bool) -> None:
        self.durable = durable
        self.lock = threading.Lock()
        self.lock.acquire()


class Group:
    """The writes waiting in one open transaction for its COMMIT (the durable ones for its flush).
    Touched only by the turn's holder, then the committer; members only wait."""

    __slots__ = ("_barrier", "_durable", "_failure", "_flusher", "_lost", "_mark", "_members", "changed",
                 "turns", "writes")

    def __init__(self) -> None:
        self.turns = 0  # writers that had their turn in the transaction
        self.writes = 0  # those of them whose changes are in it (the others failed alone)
        self.changed = False  # whether any of those changed a row
        self._members: list[Member] = []
        self._failure: StoreError | None = None  # nothing of the group was committed
        self._lost: StoreError | None = None  # committed, but its flush failed
        self._durable = 0  # members waiting for the flush
        # A member that flushes for the group, when its committer needs no flush itself.
        self._flusher: Member | None = None
        self._barrier: SyncBarrier | None = None
        self._mark = 0

    def join(
        self, *, kept: bool, changed: bool, durable: bool, member: Member | None = None
    ) -> Member | None:
        """Count the turn's holder; if ``kept``, return the member it waits as (``member``, if given)."""
        self.turns += 1
        if not kept:
            return None
        self.writes += 1
        self.changed = self.changed or changed
        if member is None:
            member = Member(durable)
        else:
            member.durable = durable
        self._members.append(member)
        return member

    def committed(self, failure: StoreError | None) -> int:
        """Wake the members that need no flush; return how many wait for it (after a ``failure``,
        wake all to fail: 0)."""
        if self._failure is not None:
            return 0
        if failure is not None:
            self._failure = failure
            for member in self._members:
                member.lock.release()
            return 0
        durable = 0
        for member in self._members:
            if member.durable:
                durable += 1
            else:
                member.lock.release()
        self._durable = durable
        return durable

    def flush(self, barrier: SyncBarrier, mark: int) -> None:
        """Wait for the flush covering the COMMIT (``mark``) for every durable member, then wake them."""
        lost: StoreError | None = StoreError("the flush of a commit was interrupted; retry")
        try:
            barrier.wait(mark, callers=self._durable)
            lost = None
        except StoreError as exc:
            lost = exc
        finally:
            self._lost = lost
            for member in self._members:
                if member.durable:
                    member.lock.release()

    def delegate(self, barrier: SyncBarrier, mark: int) -> None:
        """Let the first durable member flush for the group: its committer needs no flush."""
        self._barrier, self._mark = barrier, mark
        flusher = self._flusher = next(m for m in self._members if m.durable)
        flusher.lock.release()

    def wait(self, member: Member) -> None:
        """Block until ``member``'s outcome is known; raise (an error of its own) if its change is lost."""
        member.lock.acquire()
        self.settle(member)

    def settle(self, member: Member) -> None:
        """Once ``member`` is woken: flush for the group if chosen to (:meth:`delegate`), raise if lost."""
        if member is self._flusher and self._barrier is not None:
            self._flusher = None
            self.flush(self._barrier, self._mark)
        failure = self._failure or (self._lost if member.durable else None)
        if failure is not None:
            raise type(failure)(str(failure))


class _Waiter:
    """A thread blocked on ``lock`` until handed the turn, with ``group``."""

    __slots__ = ("group", "lock")

    def __init__(self) -> None:
        self.group: Group | None = None
        self.lock = threading.Lock()
        self.lock.acquire()


class Baton:
    """The turn to write, handed with the open transaction to the longest waiting thread (kept
    here in order: ``threading.RLock`` exposes no waiters).

    >>> baton = Baton()
    >>> baton.take(1.0) is None, baton.pass_on(Group())   # free; nobody to hand on to
    (True, False)
    """

    def __init__(self, limit: int = GROUP_LIMIT) -> None:
        self.limit = check_positive(limit, "a group's limit")
        self._mutex = threading.Lock()
        self._held = False
        self._waiters: deque[_Waiter] = deque()
        self._transactions = 0
        self._writes = 0

    def take(self, timeout: float) -> Group | None:
        """Wait up to ``timeout`` s (else TimeoutError) for the turn and its group (None: begin one)."""
        with self._mutex:
            if not self._held:
                self._held = True
                return None
            waiter = _Waiter()
            self._waiters.append(waiter)
        if not waiter.lock.acquire(timeout=timeout):
            with self._mutex:
                try:
                    self._waiters.remove(waiter)
                except ValueError:
                    pass  # handed the turn just as the wait ended: it is this thread's now
                else:
                    raise TimeoutError
        return waiter.group

    @property
    def queued(self) -> int:
        return len(self._waiters)

    def pass_on(self, group: Group) -> bool:
        """Hand the turn and ``group`` on if one waits and the group may grow; False: commit."""
        with self._mutex:
            if not self._waiters or group.turns >= self.limit:
                return False
            waiter = self._waiters.popleft()
            waiter.group = group
        waiter.lock.release()
        return True

    def release(self, committed: int | None = None) -> None:
        """Give up the turn, no transaction open; ``committed``: the writes its COMMIT held."""
        with self._mutex:
            if committed is not None:
                self._transactions += 1
                self._writes += committed
            if not self._waiters:
                self._held = False
                return
            waiter = self._waiters.popleft()
        waiter.lock.release()

    def stats(self) -> CombineStats:
        with self._mutex:
            return CombineStats(self._transactions, self._writes, len(self._waiters))


class Combiner:
    """The turns of one writer connection: :meth:`take`, :meth:`begin`, then :meth:`finish`,
    :meth:`fail` or :meth:`abandon`, each ending the turn once."""

    def __init__(
        self, path: str, barrier: SyncBarrier,
        translate: Callable[[sqlite3.Error | UnicodeDecodeError], StoreError],
        *, limit: int = GROUP_LIMIT,
    ) -> None:
        self.path = path
        self.barrier = barrier
        self.translate = translate
        self.notify: Callable[[], None] | None = None
        self.baton = Baton(limit)
        #: Set by close(): a turn is no longer handed on, its holder commits.
        self.closing = False

    def take(self, timeout: float) -> Group | None:
        """Wait for this thread's turn; StoreBusy past ``timeout``."""
        try:
            return self.baton.take(timeout)
        except TimeoutError:
            raise StoreBusy(
                f"{self.path}: other threads of this process held the write lock past the busy "
                f"timeout ({timeout:g} s); retry, or raise QueueManager(timeout=...)"
            ) from None

    def begin(self, conn: sqlite3.Connection, group: Group | None) -> None:
        """Begin this turn's write: a transaction of its own, or a SAVEPOINT in ``group``'s."""
        try:
            conn.execute(_SAVEPOINT if group is not None else "BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise self.translate(exc) from exc

    def abandon(self, conn: sqlite3.Connection | None, group: Group | None) -> None:
        """End a turn whose write never began (what ``group`` left open is still committed)."""
        self.end(conn, group, kept=False, changed=False, durable=False)

    def fail(
        self, conn: sqlite3.Connection, group: Group | None, exc: BaseException
    ) -> StoreError | None:
        """Undo this write's changes and end the turn; return the error to raise (None: ``exc``)."""
        if group is not None or isinstance(exc, (sqlite3.Error, UnicodeDecodeError)):
            # a statement left in progress would stop the ROLLBACK TO and the COMMIT
            release_statements(exc)
        undo(conn, None if group is None else _SAVEPOINT_NAME)
        if group is not None and not _in_transaction(conn):
            group.committed(lost_whole(self.path, exc))
        self.end(conn, group, kept=False, changed=False, durable=False)
        return self.translate(exc) if isinstance(exc, (sqlite3.Error, UnicodeDecodeError)) else None

    def finish(
        self, conn: sqlite3.Connection, group: Group | None, *, changed: bool, durable: bool
    ) -> None:
        """Keep this write's changes and end the turn; return once committed (and flushed)."""
        try:
            if not conn.in_transaction:  # the body went on after SQLite had rolled back under it
                raise StoreError(
                    f"{self.path}: SQLite rolled back this write transaction under it; retry"
                )
            if group is not None:
                conn.execute(_RELEASE)
        except (sqlite3.Error, StoreError) as exc:
            error = self.fail(conn, group, exc)
            if error is None:
                raise
            raise error from exc
        self.end(conn, group, kept=True, changed=changed, durable=durable)

    def end(
        self, conn: sqlite3.Connection | None, group: Group | None, *,
        kept: bool, changed: bool, durable: bool,
    ) -> None:
        """Hand the turn on with the open transaction if someone waits, else COMMIT and flush it."""
        if conn is None or not _in_transaction(conn):  # nothing open: rolled back whole
            self.baton.release()
            if group is not None:
                group.committed(
                    StoreError(f"{self.path}: the write transaction was rolled back; retry")
                )
            return
        member = None
        if group is not None or (self.baton.queued and not self.closing):
            group = group if group is not None else Group()
            member = group.join(kept=kept, changed=changed, durable=durable)
            if not self.closing and self.baton.pass_on(group):
                if member is not None:
                    group.wait(member)
                return
        self._commit(conn, group, kept=kept, changed=changed, durable=durable)
        if group is not None and member is not None:
            group.wait(member)  # woken already: raises if the COMMIT or the flush failed

    def _commit(
        self, conn: sqlite3.Connection, group: Group | None, *, kept: bool, changed: bool, durable: bool
    ) -> None:
        """COMMIT, let the turn go, then flush for the durable writes (or delegate it) and wake them."""
        failure: StoreError | None = StoreError(
            f"{self.path}: a write transaction was interrupted at its COMMIT (whether it was "
            "committed is not known); check what it wrote"
        )
        mark = 0
        flushing = 0
        committed = None
        try:
            try:
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                failure = self.translate(exc)
                failure.__cause__ = exc
                with contextlib.suppress(sqlite3.Error):
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
            else:
                failure = None
                if group is not None:  # alone, a plain wait() marks the same flush
                    mark = self.barrier.mark()
                committed = group.writes if group is not None else int(kept)
        finally:
            self.baton.release(committed)
            if group is not None:
                flushing = group.committed(None if failure is None else StoreError(
                    f"{failure}; the write transaction this write shared with other threads' writes "
                    "was not committed (nothing of it was): retry"
                ))
        if failure is not None:
            if group is None and kept:
                raise failure
            return
        own = kept and durable
        try:
            if self.notify is not None and (changed or (group is not None and group.changed)):
                self.notify()  # visible now: a waiting get may find what it waits for
        finally:
            if group is None:
                if own:
                    self.barrier.wait()
            elif own:
                group.flush(self.barrier, mark)
            elif flushing:
                group.delegate(self.barrier, mark)

"""Transaction combining: the writes of concurrent threads of one process share one
transaction, one COMMIT and one flush.

Every write of a store runs on the one writer connection, one thread at a time
(:meth:`ConnectionFactory.write <edgeq.connection.ConnectionFactory.write>`); a
thread's turn is the :class:`Baton`, handed directly to the longest waiting thread.
A writer whose body finished while other threads wait for their turn does not
COMMIT: it hands the turn on *with the transaction still open*, and waits for the
outcome of the :class:`Group` it joined. The next writer runs its body in a
SAVEPOINT of that transaction, and so on; the last one (nobody waiting, or the
group's ``limit`` reached, which bounds a writer's wait) COMMITs once for all of
them, then waits for the flush that covers the COMMIT on behalf of those that need
it (:meth:`SyncBarrier.wait <edgeq.commits.SyncBarrier.wait>`; if its own write
needs none, the group's first durable member does), and wakes each. A group costs
one COMMIT and one flush, its pages are written to the WAL once rather than once
per writer, and each member thread blocks once, not once for the COMMIT and again
for the flush: thread switches cost CPU that GIL-bound threads share.

What a caller sees is unchanged:

- ``write()`` returns only once its change is committed (visible) and, when
  durable, flushed.
- A body that raises is rolled back to its own SAVEPOINT: that caller gets its
  error, its neighbours' changes stay and commit.
- If SQLite aborts the whole transaction (it rolls back on some I/O errors, or a
  trigger's ``RAISE(ROLLBACK)``) or the COMMIT fails, nothing of the group is
  committed and every member gets a :class:`~edgeq.errors.StoreError`; the next
  writer begins a new transaction. (edgeq's schema has no deferred constraint, so
  nothing a body does can make the COMMIT fail: only the disk can.)
- One producer's writes keep their order: each returns after its COMMIT, before
  the next one begins.
- A lone writer (nobody waiting when its body ends) commits at once, exactly as
  without combining: nothing waits for company, and no SAVEPOINT is made (the
  first writer of a transaction runs in it directly; if its body fails, the
  transaction holds nothing else and is rolled back whole).
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from edgeq.args import check_positive
from edgeq.commits import SyncBarrier
from edgeq.errors import StoreBusy, StoreError

__all__ = [
    "GROUP_LIMIT", "Baton", "CombineStats", "Combiner", "Group", "Member", "lost_whole", "release_statements", "undo",
]

#: The most writes one transaction combines: the last of a long line waits for at
#: most this many bodies before its COMMIT.
GROUP_LIMIT = 64

_SAVEPOINT_NAME = "edgeq_write"
_SAVEPOINT = f"SAVEPOINT {_SAVEPOINT_NAME}"
_RELEASE = f"RELEASE {_SAVEPOINT_NAME}"


def release_statements(exc: BaseException) -> None:
    """Let go of the cursors the frames of a failed statement hold: a write statement an
    error interrupted stays "in progress" (and no later COMMIT on the connection goes
    through) for as long as anything, such as a caller keeping the error, holds them."""
    traceback.clear_frames(exc.__traceback__)


def undo(conn: sqlite3.Connection, savepoint: str | None) -> None:
    """Undo one write's changes: back to its ``savepoint`` (then released), or the whole
    transaction (None: the write began it); the whole transaction if that fails."""
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
        f"{path}: SQLite rolled back the whole write transaction this write shared with other writes (another "
        f"write in it failed: {exc}); nothing of it was committed: retry"
    )


def _in_transaction(conn: sqlite3.Connection) -> bool:
    """Whether a transaction is open on ``conn`` (False once it is closed)."""
    try:
        return conn.in_transaction
    except sqlite3.Error:
        return False


@dataclass(frozen=True)
class CombineStats:
    """What transaction combining has done: ``transactions`` COMMITs made, holding
    ``writes`` callers' changes (``writes / transactions`` is the mean group size);
    ``queued``, the threads waiting for their turn right now."""

    transactions: int
    writes: int
    queued: int = 0


class Member:
    """A write whose changes wait in a group's transaction; its thread blocks on
    ``lock`` (taken here) until the group's committer releases it."""

    __slots__ = ("durable", "lock")

    def __init__(self, durable: bool) -> None:
        self.durable = durable
        self.lock = threading.Lock()
        self.lock.acquire()


class Group:
    """The writes whose changes wait in one open transaction for its COMMIT (and,
    for the durable ones, for the flush after it). Touched only by the thread whose
    turn it is, then by the committer; a member only waits, then reads the outcome.

    >>> group = Group()
    >>> member = group.join(kept=True, changed=True, durable=False)
    >>> group.turns, group.writes, group.committed(None)   # no member waits for a flush
    (1, 1, 0)
    >>> group.wait(member)   # returns at once: it was woken at the COMMIT
    """

    __slots__ = ("_barrier", "_durable", "_failure", "_flusher", "_lost", "_mark", "_members", "changed", "turns",
                 "writes")

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

    def join(self, *, kept: bool, changed: bool, durable: bool, member: Member | None = None) -> Member | None:
        """Count the turn's holder: ``kept``, its changes are in the transaction (and
        then it is a member, returned, to wait with: ``member`` if given, made for a
        caller whose write another thread ran, edgeq.flat); ``durable``, it waits for
        the flush too."""
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
        """The COMMIT went through (``failure`` None): wake the members that wait for
        no flush, and return how many do. Else nothing of the group was committed:
        wake every member to fail (only the first failure counts)."""
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
        """Wait for the flush that covers the COMMIT (``mark``) on behalf of every
        durable member, then wake them (failed, if the flush failed)."""
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
        """Let the first durable member flush for the group (see :meth:`flush`): its
        committer wrote nothing that needs the disk, and returns at once."""
        self._barrier, self._mark = barrier, mark
        flusher = self._flusher = next(m for m in self._members if m.durable)
        flusher.lock.release()

    def wait(self, member: Member) -> None:
        """Block until ``member``'s outcome is known; raise if its change is lost (each
        member an error of its own: one exception object must not travel through
        several threads)."""
        member.lock.acquire()
        self.settle(member)

    def settle(self, member: Member) -> None:
        """What :meth:`wait` does once ``member`` is woken: flush for the group if it was
        chosen to (:meth:`delegate`), then raise if its change is lost."""
        if member is self._flusher and self._barrier is not None:
            self._flusher = None
            self.flush(self._barrier, self._mark)
        failure = self._failure or (self._lost if member.durable else None)
        if failure is not None:
            raise type(failure)(str(failure))


class _Waiter:
    """A thread waiting for the turn: it blocks on ``lock`` (taken here) until the
    holder hands it the turn, with ``group``, the transaction left open."""

    __slots__ = ("group", "lock")

    def __init__(self) -> None:
        self.group: Group | None = None
        self.lock = threading.Lock()
        self.lock.acquire()


class Baton:
    """The turn to write on the writer connection, handed directly to the longest
    waiting thread together with the transaction the writers before left open.

    ``threading.RLock`` exposes no waiters, and a writer must know whether anyone is
    waiting when its body ends, so the waiters are kept here, in order.

    >>> baton = Baton()
    >>> baton.take(1.0) is None   # free, and no transaction open
    True
    >>> baton.queued, baton.pass_on(Group())   # nobody waiting: the holder commits itself
    (0, False)
    >>> baton.release(); baton.stats()
    CombineStats(transactions=0, writes=0, queued=0)
    """

    def __init__(self, limit: int = GROUP_LIMIT) -> None:
        self.limit = check_positive(limit, "a group's limit")
        self._mutex = threading.Lock()
        self._held = False
        self._waiters: deque[_Waiter] = deque()
        self._transactions = 0
        self._writes = 0

    def take(self, timeout: float) -> Group | None:
        """Wait (up to ``timeout`` seconds) for the turn; return the group whose open
        transaction comes with it (None: none is open, begin one). Raises
        :class:`TimeoutError` if the turn did not come."""
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
        """How many threads wait for the turn."""
        return len(self._waiters)

    def pass_on(self, group: Group) -> bool:
        """Hand the turn and ``group``'s open transaction (the holder has joined it) to
        the longest waiting writer, if one waits and the group may grow (``limit``
        turns in all); False: the holder keeps the turn, and commits."""
        with self._mutex:
            if not self._waiters or group.turns >= self.limit:
                return False
            waiter = self._waiters.popleft()
            waiter.group = group
        waiter.lock.release()
        return True

    def release(self, committed: int | None = None) -> None:
        """Give up the turn with no transaction open (to the next waiter, if any);
        ``committed``: the turn ended in a COMMIT holding that many callers' changes."""
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
        """COMMITs made and the writes they held so far; threads waiting now."""
        with self._mutex:
            return CombineStats(self._transactions, self._writes, len(self._waiters))


class Combiner:
    """The turns of one writer connection: each write's ``BEGIN IMMEDIATE`` or
    SAVEPOINT, its undo, and the end of its turn (hand on, or COMMIT and flush).
    :meth:`ConnectionFactory.write <edgeq.connection.ConnectionFactory.write>` calls
    :meth:`take`, :meth:`begin`, then :meth:`finish` or :meth:`fail` (:meth:`abandon`
    if the write never began): each ends the turn exactly once.

    ``translate`` turns a sqlite3 error into edgeq's; :attr:`notify`, if set, is called
    after each COMMIT that changed a row (waiting getters look again).
    """

    def __init__(
        self, path: str, barrier: SyncBarrier, translate: Callable[[sqlite3.Error | UnicodeDecodeError], StoreError],
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
        """Wait for this thread's turn (see :meth:`Baton.take`); :class:`StoreBusy` past ``timeout``."""
        try:
            return self.baton.take(timeout)
        except TimeoutError:
            raise StoreBusy(
                f"{self.path}: other threads of this process held the write lock past the busy timeout "
                f"({timeout:g} s); retry, or raise QueueManager(timeout=...)"
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

    def fail(self, conn: sqlite3.Connection, group: Group | None, exc: BaseException) -> StoreError | None:
        """Undo this write's own changes after ``exc`` (the whole transaction if it began
        it, else back to its savepoint) and end the turn. Returns the error to raise
        instead of ``exc`` (a sqlite3 error translated), None to raise ``exc`` itself.
        If SQLite rolled back the whole transaction, the writes of ``group`` fail too."""
        if group is not None or isinstance(exc, (sqlite3.Error, UnicodeDecodeError)):
            release_statements(exc)  # a statement left in progress would stop the ROLLBACK TO and the COMMIT
        undo(conn, None if group is None else _SAVEPOINT_NAME)
        if group is not None and not _in_transaction(conn):
            group.committed(lost_whole(self.path, exc))
        self.end(conn, group, kept=False, changed=False, durable=False)
        return self.translate(exc) if isinstance(exc, (sqlite3.Error, UnicodeDecodeError)) else None

    def finish(self, conn: sqlite3.Connection, group: Group | None, *, changed: bool, durable: bool) -> None:
        """Keep this write's changes and end the turn; return once they are committed
        (and, if ``durable``, flushed). Raises :class:`StoreError` if they are lost."""
        try:
            if not conn.in_transaction:  # the body went on after SQLite had rolled back under it
                raise StoreError(f"{self.path}: SQLite rolled back this write transaction under it; retry")
            if group is not None:
                conn.execute(_RELEASE)
        except (sqlite3.Error, StoreError) as exc:
            error = self.fail(conn, group, exc)
            if error is None:
                raise
            raise error from exc
        self.end(conn, group, kept=True, changed=changed, durable=durable)

    def end(
        self, conn: sqlite3.Connection | None, group: Group | None, *, kept: bool, changed: bool, durable: bool
    ) -> None:
        """End the turn: hand it on with the open transaction if someone waits (and
        wait for the group's outcome), else COMMIT what is open and flush it for every
        durable write in it. Raises only for this write's own ``kept`` changes (a turn
        that ran other callers' writes, edgeq.flat, ends with ``kept=False``: they
        joined ``group`` already, and wait for its outcome themselves)."""
        if conn is None or not _in_transaction(conn):  # nothing open: rolled back whole
            self.baton.release()
            if group is not None:
                group.committed(StoreError(f"{self.path}: the write transaction was rolled back; retry"))
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
        """COMMIT in this turn, let the turn go, then flush for the durable writes (or
        let one of them flush, if this one needs no flush) and wake the members.
        Alone (no group), raises if this write's changes are lost."""
        failure: StoreError | None = StoreError(
            f"{self.path}: a write transaction was interrupted at its COMMIT (whether it was committed is "
            "not known); check what it wrote"
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
                    f"{failure}; the write transaction this write shared with other threads' writes was not "
                    "committed (nothing of it was): retry"
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

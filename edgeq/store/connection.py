"""All SQLite policy for a queue manager's connections: pragmas, busy timeout, write transactions and
group commit (docs/storage.md, "Writes"); recognising a file: :mod:`edgeq.store.opening`."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn, TypeVar

from edgeq.args import check_seconds
from edgeq.errors import InvalidArgument, QueueManagerClosed, StoreBusy, StoreError
from edgeq.store.commits import SyncBarrier, SyncStats
from edgeq.store.integrity import register
from edgeq.store.opening import open_address, store_error
from edgeq.types import Durability

T = TypeVar("T")

__all__ = ["ConnectionFactory", "WriteStats", "release_statements"]

_DURABILITIES = ("full", "normal")


def release_statements(exc: BaseException) -> None:
    """Let go of the cursors a failed statement's frames hold: while held, the statement stays
    "in progress" and no ROLLBACK or later COMMIT on the connection goes through."""
    traceback.clear_frames(exc.__traceback__)


@dataclass(frozen=True)
class WriteStats:
    """Write transactions committed, and threads of this process waiting now for their turn."""

    transactions: int
    waiting: int = 0


class ConnectionFactory:
    """The connections to one database file: one per thread for reading, one for every thread's writes.

    >>> import tempfile, os
    >>> factory = ConnectionFactory(os.path.join(tempfile.mkdtemp(), "x.db"))
    >>> with factory.write() as conn:
    ...     _ = conn.execute("CREATE TABLE t (x)")
    >>> factory.run(lambda conn: conn.execute("INSERT INTO t VALUES (1)").rowcount)
    1
    >>> factory.sync_stats(), factory.write_stats()  # one thread: a flush per durable write
    (SyncStats(commits=2, syncs=2, waiting=0), WriteStats(transactions=2, waiting=0))
    >>> factory.close()
    """

    def __init__(self, path: str | Path, *, durability: Durability = "full", timeout: float = 30.0) -> None:
        if durability not in _DURABILITIES:
            raise InvalidArgument(f"durability must be 'full' or 'normal', not {durability!r}")
        timeout = check_seconds(timeout, "timeout")
        self.path = str(path)
        #: This user may only read the store: check points discard nothing, readers skip the expired.
        self.read_only = open_address(self.path)[1]
        self.durability: Durability = durability
        self.timeout = timeout
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._closed = False
        self._tracer: Callable[[str], None] | None = None
        # The WAL's real name is known once SQLite has opened the file (_new).
        self._barrier = SyncBarrier(f"{Path(self.path).resolve()}-wal")
        self._barrier.settle = self._settle
        # One write transaction at a time, on the writer connection. Threads of this process wait
        # here, not in SQLite's busy handler (which sleeps in steps of up to 100 ms).
        self._turn = threading.Lock()
        self._count = threading.Lock()  # guards _waiting
        self._waiting = 0
        self._transactions = 0  # moved under the turn
        self._notify: Callable[[], None] | None = None
        self._version = -1  # the writer's PRAGMA data_version when ``known`` was last valid
        #: What the hot paths keep of the store between their transactions (queue definitions and
        #: counters, the last stamp: edgeq.store.tx, edgeq.store.uids), for
        #: use inside a write only: emptied when another connection has committed, when a
        #: :meth:`write` commits a change, and when a write rolls back.
        self.known: dict[tuple[object, ...], object] = {}
        self._located = False
        # One writer connection for every thread: its page cache stays warm (SQLite drops a
        # connection's cache whenever another one has committed).
        self._writer: sqlite3.Connection | None = None
        self._schema_seen = 0  # the schema version the writer last saw

    def _open(self) -> sqlite3.Connection:
        # isolation_level=None: edgeq issues BEGIN/COMMIT itself, never a deferred transaction.
        address, read_only = open_address(self.path)
        try:
            conn = sqlite3.connect(
                address, timeout=self.timeout, isolation_level=None, check_same_thread=False, uri=read_only
            )
        except sqlite3.Error as exc:
            raise StoreError(
                f"{self.path}: cannot open the database file ({exc}); check that its directory "
                "exists and is writable"
            ) from exc
        if self._tracer is not None:
            conn.set_trace_callback(self._tracer)
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")
            mode = conn.execute(
                "PRAGMA journal_mode" if read_only else "PRAGMA journal_mode = WAL"
            ).fetchone()[0]
            if mode.lower() != "wal" and not read_only:
                raise StoreError(f"{self.path}: SQLite refused WAL mode (got {mode}); use a local filesystem")
            # NORMAL at either durability: at "full" a write waits for a shared flush after its
            # COMMIT instead (docs/storage.md, "Writes and group commit": why it is as durable as FULL).
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute("PRAGMA temp_store = MEMORY")
            register(conn)
        except (sqlite3.Error, UnicodeDecodeError) as exc:
            conn.close()
            raise store_error(exc, self.path) from exc
        return conn

    def connection(self) -> sqlite3.Connection:
        """This thread's connection for reading; inside its own write, the writer's (reads see it)."""
        if self._closed:
            raise QueueManagerClosed(f"{self.path}: the queue manager is closed; open a new one")
        writing: sqlite3.Connection | None = getattr(self._local, "writing", None)
        if writing is not None:
            return writing
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self._new()
        return conn

    def _new(self) -> sqlite3.Connection:
        with self._lock:
            if self._closed:
                raise QueueManagerClosed(f"{self.path}: the queue manager is closed; open a new one")
            conn = self._open()
            self._all.append(conn)
            if not self._located:
                # SQLite names the WAL after the path it resolved (symbolic links followed).
                file = conn.execute("PRAGMA database_list").fetchone()[2]
                if file:
                    self._barrier.path = f"{file}-wal"
                self._located = True
        return conn

    def _schema(self, conn: sqlite3.Connection) -> int:
        try:
            return int(conn.execute("PRAGMA schema_version").fetchone()[0])
        except (sqlite3.Error, UnicodeDecodeError) as exc:
            raise store_error(exc, self.path) from exc

    @contextmanager
    def write(self, *, durable: bool = True) -> Iterator[sqlite3.Connection]:
        """A ``BEGIN IMMEDIATE`` transaction; a body that raises rolls it back; nested: a
        :class:`StoreError`. Returns once committed and, at "full" unless ``durable=False``, on disk."""
        conn = self._begin()
        before = conn.total_changes
        try:
            yield conn
        except BaseException as exc:
            self._abort(conn, exc)
        self._commit(conn, before, durable, keep=False)

    def run(self, body: Callable[[sqlite3.Connection], T], *, durable: bool = True) -> T:
        """``body(conn)``'s result, in the transaction :meth:`write` makes: the hot paths' form, whose
        changes leave :attr:`known` valid (they never change a queue's definition)."""
        conn = self._begin()
        before = conn.total_changes
        try:
            result = body(conn)
        except BaseException as exc:
            self._abort(conn, exc)
        self._commit(conn, before, durable, keep=True)
        return result

    def _begin(self) -> sqlite3.Connection:
        """Take this thread's turn and begin its transaction on the writer connection."""
        if getattr(self._local, "writing", None) is not None:
            raise StoreError(
                f"{self.path}: this thread is inside a write transaction already, and a write cannot begin "
                "inside another: finish the outer one first"
            )
        if not self._turn.acquire(blocking=False):
            self._wait_turn()
        try:
            conn = self._writer if self._writer is not None and not self._closed else self.writer_connection()
            conn.execute("BEGIN IMMEDIATE")
            (version,) = conn.execute("PRAGMA data_version").fetchone()  # moves when others commit
        except BaseException as exc:
            self._turn.release()
            if isinstance(exc, sqlite3.Error):
                raise self.translate(exc) from exc
            raise
        if version != self._version:
            self._version = version
            self.known.clear()
        self._local.writing = conn
        return conn

    def _settle(self, most_s: float) -> None:
        """Before a shared flush: let the writes in progress and waiting for their turn commit first,
        so the flush covers them too (for at most ``most_s``, the last flush's time; a lone writer
        never waits here)."""
        deadline = time.monotonic() + most_s
        while self._turn.locked() or self._waiting:
            left = deadline - time.monotonic()
            if left <= 0 or not self._turn.acquire(timeout=left):
                return
            self._turn.release()
            if not self._waiting:
                return
            time.sleep(0)  # give up the GIL: a thread waiting for the turn takes it

    def _wait_turn(self) -> None:
        with self._count:
            self._waiting += 1
        try:
            taken = self._turn.acquire(timeout=self.timeout)
        finally:
            with self._count:
                self._waiting -= 1
        if not taken:
            raise StoreBusy(
                f"{self.path}: other threads of this process held the write lock past the busy "
                f"timeout ({self.timeout:g} s); retry, or raise QueueManager(timeout=...)"
            )

    def _commit(self, conn: sqlite3.Connection, before: int, durable: bool, *, keep: bool) -> None:
        """COMMIT (at synchronous=NORMAL: no flush under the lock), end the turn, then wait for a
        flush of the WAL begun after the COMMIT, shared with other threads (docs/storage.md)."""
        try:
            if not conn.in_transaction:  # the body went on after SQLite had rolled back under it
                raise StoreError(f"{self.path}: SQLite rolled back this write transaction under it; retry")
            changed = conn.total_changes != before
            wrote = changed or self._schema_moved(conn)
            conn.execute("COMMIT")
        except BaseException as exc:
            self._abort(conn, exc)
        self._local.writing = None
        if wrote and not keep:
            self.known.clear()
        self._transactions += 1  # under the turn
        self._turn.release()
        try:
            if changed and self._notify is not None:
                self._notify()  # visible now: a waiting get may find what it waits for
        finally:
            if wrote and durable and self.durability == "full":
                self._barrier.wait()

    def _abort(self, conn: sqlite3.Connection, exc: BaseException) -> NoReturn:
        """Roll the transaction back, end the turn and raise ``exc`` (a sqlite3 error in edgeq's words)."""
        self._local.writing = None
        self.known.clear()
        try:
            release_statements(exc)  # a statement in progress would stop the ROLLBACK
            with contextlib.suppress(sqlite3.Error):
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
        finally:
            self._turn.release()
        if isinstance(exc, (sqlite3.Error, UnicodeDecodeError)):
            raise self.translate(exc) from exc
        raise exc

    def translate(self, exc: sqlite3.Error | UnicodeDecodeError) -> StoreError:
        """A sqlite3 error on this file in edgeq's words."""
        return store_error(exc, self.path)

    def _schema_moved(self, conn: sqlite3.Connection) -> bool:
        """Whether a write that changed no row changed the schema: a flush too many at worst, not too few."""
        version = self._schema(conn)
        if version == self._schema_seen:
            return False
        self._schema_seen = version
        return True

    def flushed(self) -> None:
        """Return once every commit so far is on disk (at "full"), for readers acting on what they read."""
        if self.durability == "full":
            self._barrier.wait()

    def sync_stats(self) -> SyncStats:
        """Durable commits, and the flushes of the WAL they shared (fewer when threads commit together)."""
        return self._barrier.stats()

    def writer_connection(self) -> sqlite3.Connection:
        """The writer connection (opened on first use), unless the factory is closed."""
        if self._closed:
            raise QueueManagerClosed(f"{self.path}: the queue manager is closed; open a new one")
        conn = self._writer
        if conn is None:
            conn = self._writer = self._new()
            self._schema_seen = self._schema(conn)
            self._barrier.pinned = True  # an open connection keeps the WAL where it is (commits.py)
        return conn

    @property
    def on_commit(self) -> Callable[[], None] | None:
        """Called after every write transaction that changed a row, once visible (None: nothing)."""
        return self._notify

    @on_commit.setter
    def on_commit(self, callback: Callable[[], None] | None) -> None:
        self._notify = callback

    def write_stats(self) -> WriteStats:
        """Write transactions committed, and the threads waiting for their turn now."""
        with self._count:
            return WriteStats(self._transactions, self._waiting)

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """A read transaction: one consistent snapshot, never blocks writers (WAL)."""
        conn = self.connection()
        if conn.in_transaction:  # already inside this thread's write: read within it
            yield conn
            return
        try:
            conn.execute("BEGIN")
            try:
                yield conn
            finally:
                if conn.in_transaction:
                    conn.execute("COMMIT")
        except (sqlite3.Error, UnicodeDecodeError) as exc:
            release_statements(exc)
            raise store_error(exc, self.path) from exc

    def set_tracer(self, tracer: Callable[[str], None] | None) -> None:
        """Pass every SQL statement on this file's connections, now and later, to ``tracer`` (None: stop)."""
        with self._lock:
            self._tracer = tracer
            for conn in self._all:
                conn.set_trace_callback(tracer)

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Close every connection this factory opened (from any thread): the write in progress finishes
        (up to ``timeout`` s); writes still waiting for their turn raise :class:`QueueManagerClosed`."""
        with self._lock:
            self._closed = True
        inside = getattr(self._local, "writing", None) is not None  # from inside this thread's own write
        # Past the timeout: a write that never ends; close under it, as a crash would.
        taken = inside or self._turn.acquire(timeout=self.timeout)
        try:
            with self._lock:
                conns, self._all = self._all, []
            for conn in conns:
                with contextlib.suppress(sqlite3.Error):  # closing is best effort
                    conn.close()
            self._barrier.close()
        finally:
            if taken and not inside:
                self._turn.release()  # the writers still waiting see the factory closed

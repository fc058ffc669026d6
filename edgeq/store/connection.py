"""All SQLite policy for a queue manager's connections: pragmas, busy timeout, transactions and
group commit (docs/storage.md, "Group commit"); recognising a file: :mod:`edgeq.store.opening`."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from edgeq.args import check_positive, check_seconds
from edgeq.errors import InvalidArgument, QueueManagerClosed, StoreBusy, StoreError
from edgeq.store.combining import GROUP_LIMIT, Combiner, CombineStats, release_statements
from edgeq.store.commits import SyncBarrier, SyncStats
from edgeq.store.flat import Lead
from edgeq.store.integrity import register
from edgeq.store.opening import open_address, store_error
from edgeq.types import Durability

T = TypeVar("T")

__all__ = ["ConnectionFactory"]

_DURABILITIES = ("full", "normal")


class ConnectionFactory:
    """The connections to one database file: one per thread for reading, one for every thread's writes.

    >>> import tempfile, os
    >>> factory = ConnectionFactory(os.path.join(tempfile.mkdtemp(), "x.db"))
    >>> with factory.write() as conn:
    ...     _ = conn.execute("CREATE TABLE t (x)")
    >>> factory.run(lambda conn: conn.execute("INSERT INTO t VALUES (1)").rowcount)
    1
    >>> factory.sync_stats(), factory.combine_stats()  # one thread: a transaction per write
    (SyncStats(commits=2, syncs=2, waiting=0), CombineStats(transactions=2, writes=2, queued=0))
    >>> factory.close()
    """

    def __init__(
        self, path: str | Path, *, durability: Durability = "full", timeout: float = 30.0,
        group_limit: int = GROUP_LIMIT,
    ) -> None:
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
        # Writers of this process queue here, not in SQLite's busy handler (which sleeps in
        # steps of up to 100 ms rather than waking when the lock is free).
        check_positive(group_limit, "group_limit")
        self._combiner = Combiner(self.path, self._barrier, self.translate, limit=group_limit)
        self._lead = Lead(self, group_limit)  # run(): writes one thread runs for many (edgeq.store.flat)
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
            # COMMIT instead (docs/storage.md, "Group commit": why that is as durable as FULL).
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
        """A ``BEGIN IMMEDIATE`` transaction: a body that raises undoes only its own changes; nested: a
        :class:`StoreError`. Returns once committed and, at "full" unless ``durable=False``, on disk."""
        self._may_write()
        turns = self._combiner
        group = turns.take(self.timeout)
        # Every path below ends this turn (with ``group``'s open transaction, if any) exactly once.
        conn = self._writer
        try:
            conn = self.writer_connection()
            turns.begin(conn, group)
        except BaseException:
            turns.abandon(conn, group)
            raise
        before = conn.total_changes
        self._local.writing = conn
        try:
            yield conn
        except BaseException as exc:
            self._local.writing = None
            error = turns.fail(conn, group, exc)
            if error is None:
                raise
            raise error from exc
        self._local.writing = None
        # Read in this turn: the next writer's changes count on the same connection.
        changed = conn.total_changes != before
        try:
            wrote = changed or self._schema_moved(conn)
        except StoreError as exc:
            turns.fail(conn, group, exc)
            raise
        turns.finish(conn, group, changed=changed, durable=durable and self.durability == "full" and wrote)

    def run(self, body: Callable[[sqlite3.Connection], T], *, durable: bool = True) -> T:
        """``body(conn)``'s result, run as :meth:`write` would, for the hot paths: possibly by another
        thread (:mod:`edgeq.store.flat`), so ``body`` must use only ``conn`` and thread-safe state."""
        self._may_write()
        return self._lead.run(body, durable)

    def _may_write(self) -> None:
        if self._closed:
            raise QueueManagerClosed(f"{self.path}: the queue manager is closed; open a new one")
        if getattr(self._local, "writing", None) is not None:
            raise StoreError(
                f"{self.path}: this thread is inside a write transaction already, and a write cannot begin "
                "inside another: finish the outer one first"
            )

    # -- what edgeq.store.flat's lead needs (flat.Writer) --

    @property
    def turns(self) -> Combiner:
        return self._combiner

    def wrote(self, conn: sqlite3.Connection, before: int) -> bool:
        """Whether a write that began at ``total_changes`` ``before`` wrote anything."""
        return conn.total_changes != before or self._schema_moved(conn)

    def durable(self) -> bool:
        return self.durability == "full"

    def writing(self, conn: sqlite3.Connection | None) -> None:
        """Mark this thread as inside a write on ``conn`` (None: no longer)."""
        self._local.writing = conn

    def translate(self, exc: sqlite3.Error | UnicodeDecodeError) -> StoreError:
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
        return conn

    @property
    def on_commit(self) -> Callable[[], None] | None:
        """Called after every write transaction that changed a row, once visible (None: nothing)."""
        return self._combiner.notify

    @on_commit.setter
    def on_commit(self, callback: Callable[[], None] | None) -> None:
        self._combiner.notify = callback

    def combine_stats(self) -> CombineStats:
        """Write transactions committed, and the writes they held (more when threads wrote together)."""
        stats = self._combiner.baton.stats()
        return CombineStats(stats.transactions, stats.writes, self._lead.queued(stats.queued))

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
        """Close every connection this factory opened (from any thread): the write in turn finishes and
        commits (up to ``timeout`` s); writes still waiting raise :class:`QueueManagerClosed`."""
        with self._lock:
            self._closed = True
        self._combiner.closing = True
        if getattr(self._local, "writing", None) is None:  # not from inside this thread's own write
            try:
                group = self._combiner.take(self.timeout)
            except StoreBusy:
                pass  # a write that never ends: close under it, as a crash would
            else:
                self._combiner.abandon(self._writer, group)
        with self._lock:
            conns, self._all = self._all, []
        for conn in conns:
            with contextlib.suppress(sqlite3.Error):  # closing is best effort
                conn.close()
        self._barrier.close()

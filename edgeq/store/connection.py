"""All SQLite policy in one place: opening, pragmas, busy timeout, transactions.

Every connection edgeq makes comes from :class:`ConnectionFactory` (or, outside a queue
manager, :func:`connect`), so WAL,
``synchronous``, the busy timeout, ``BEGIN IMMEDIATE`` and group commit (the writes
of concurrent threads combined into one transaction, :mod:`edgeq.store.combining`, and
durable commits sharing one flush, :mod:`edgeq.store.commits`) are decided here and
nowhere else (the huey storage model).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from edgeq.args import check_positive, check_seconds
from edgeq.errors import InvalidArgument, QueueManagerClosed, StoreBusy, StoreError, StoreReadOnly
from edgeq.store.combining import GROUP_LIMIT, Combiner, CombineStats, release_statements
from edgeq.store.commits import SyncBarrier, SyncStats
from edgeq.store.damage import damaged
from edgeq.store.flat import Lead
from edgeq.store.integrity import register
from edgeq.types import Durability

T = TypeVar("T")

__all__ = ["APPLICATION_ID", "ConnectionFactory", "check_foreign", "connect", "is_damage", "store_error"]

#: ``PRAGMA application_id`` of every edgeq database: "EDGQ".
APPLICATION_ID = 0x45444751
_SQLITE_MAGIC = b"SQLite format 3\x00"
_DURABILITIES = ("full", "normal")


#: What SQLite says when the file's bytes are not what it wrote (and the sqlite3 module
#: when a text value is not UTF-8): damage, never a caller's mistake.
_DAMAGE = ("malformed", "not a database", "could not decode", "codec can't decode", "corrupt")


def is_damage(exc: BaseException) -> bool:
    """Whether a sqlite3 (or text decoding) error means the file is damaged.

    >>> is_damage(sqlite3.DatabaseError("database disk image is malformed"))
    True
    """
    text = str(exc).lower()
    return isinstance(exc, UnicodeDecodeError) or any(word in text for word in _DAMAGE)


def store_error(exc: sqlite3.Error | UnicodeDecodeError, path: str) -> StoreError:
    """Translate a sqlite3 error into edgeq's vocabulary."""
    text = str(exc)
    if is_damage(exc):
        return damaged(f"SQLite cannot read it ({text})", path=path)
    if "readonly" in text or "read-only" in text:
        return StoreReadOnly(
            f"{path} is read-only here ({read_only_reason(Path(path))}), and this needs to write to it: "
            "commands that only read it (depth, browse, queue list, sync status) work; to change it, run "
            "as a user who may write the file and its directory"
        )
    if "locked" in text or "busy" in text:
        return StoreBusy(
            f"{path}: the database stayed locked by another connection past the busy "
            f"timeout ({text}); retry, or raise QueueManager(timeout=...)"
        )
    return StoreError(f"{path}: the SQLite store failed: {text}")


def read_only_reason(path: Path) -> str:
    """Why this user cannot write the store at ``path``, in a few words (for :class:`StoreReadOnly`)."""
    try:
        if os.statvfs(path).f_flag & os.ST_RDONLY:
            return "its filesystem is mounted read-only"
        if not os.access(path, os.W_OK):
            return f"the file is not writable by this user (mode {path.stat().st_mode & 0o777:o})"
    except OSError as exc:
        return f"it cannot be examined: {exc.strerror or exc}"
    if not os.access(path.parent, os.W_OK | os.X_OK):
        return (f"its directory {path.parent} is not writable by this user, and SQLite keeps its write-ahead "
                f"log beside the file ({path.name}-wal, {path.name}-shm)")
    return "SQLite opened it read-only"


def open_address(path: str) -> tuple[str, bool]:
    """What to hand ``sqlite3.connect`` for ``path``, and whether it is a URI: the path itself, or
    for a store this user cannot write, a read-only URI (``mode=ro``), ``immutable=1`` when SQLite
    could not make its shared-memory file beside it and there is no write-ahead log to read."""
    file = Path(path)
    if not file.is_file() or (os.access(file, os.W_OK) and os.access(file.parent, os.W_OK | os.X_OK)):
        return path, False
    uri = f"{file.resolve().as_uri()}?mode=ro"
    wal, shm = Path(f"{path}-wal"), Path(f"{path}-shm")
    if not os.access(file.parent, os.W_OK | os.X_OK) and not wal.exists() and not shm.exists():
        uri += "&immutable=1"  # nobody writes it through a log: the file alone is the whole truth
    return uri, True


def connect(path: str | Path, *, read_only: bool = False, wal: bool = False,
            timeout: float = 10.0) -> sqlite3.Connection:
    """A connection of its own, outside a factory (the console, ``edgeq export``, the nonce file):
    autocommit, the busy timeout; ``read_only`` by URI; ``wal``: WAL at ``synchronous=NORMAL``."""
    address = f"{Path(path).resolve().as_uri()}?mode=ro" if read_only else str(path)
    conn = sqlite3.connect(address, timeout=timeout, isolation_level=None, check_same_thread=False,
                           uri=read_only)
    if wal:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
        except BaseException:
            conn.close()
            raise
    return conn


def check_foreign(path: Path, *, newest: int | None = None) -> bool:
    """Refuse a file edgeq must not touch; return True if it is a fresh database.

    Reads only: a non-SQLite file, a SQLite database of another application, an
    unreadable one, or (with ``newest``, the schema version this edgeq knows) an
    edgeq store of a newer schema, raises :class:`StoreError` and is left exactly
    as it was: nothing is written to a store before it is recognised.
    """
    if not path.exists() or path.stat().st_size == 0:
        return True
    if path.is_dir():
        raise StoreError(f"{path} is a directory: give the path of a database file")
    with path.open("rb") as fh:
        header = fh.read(100)
    if header[: len(_SQLITE_MAGIC)] != _SQLITE_MAGIC:
        raise StoreError(
            f"{path} is not a SQLite database (it may be another kind of file); "
            "edgeq refuses to touch it: choose another path"
        )
    # Without a WAL the header is the whole truth: an edgeq store is recognised from its
    # bytes, without a connection (even a read-only one leaves -wal and -shm files).
    app_id, version = int.from_bytes(header[68:72], "big"), int.from_bytes(header[60:64], "big")
    tables = -1
    if app_id != APPLICATION_ID or Path(f"{path}-wal").exists():
        try:
            conn = connect(path, read_only=True)
            try:
                app_id = conn.execute("PRAGMA application_id").fetchone()[0]
                version = conn.execute("PRAGMA user_version").fetchone()[0]
                tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
            finally:
                conn.close()
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:  # sqlite3 decodes damaged text in its errors too
            raise StoreError(
                f"{path} cannot be read as a SQLite database ({exc}); it may be corrupt. "
                "edgeq left it untouched: restore it from a backup or choose another path"
            ) from exc
    if app_id == APPLICATION_ID:
        if version == 0:
            raise damaged("it is marked as an edgeq store but has no schema version (edgeq left it untouched)",
                          path=str(path))
        if newest is not None and version > newest:
            raise StoreError(
                f"{path} was written by a newer edgeq (schema {version}; this one knows "
                f"{newest}): upgrade edgeq to open it (it was left untouched)"
            )
        return False
    if tables == 0 and app_id == 0:
        return True  # an empty SQLite file: nothing to lose
    raise StoreError(
        f"{path} is a SQLite database of another application (application_id={app_id}, "
        f"{tables} schema objects); edgeq refuses to touch it: choose another path"
    )


class ConnectionFactory:
    """Makes and tracks the connections to one database file: one per thread for
    reading, and one writer connection that every thread's :meth:`write` uses in turn.

    >>> import tempfile, os
    >>> factory = ConnectionFactory(os.path.join(tempfile.mkdtemp(), "x.db"))
    >>> with factory.write() as conn:
    ...     _ = conn.execute("CREATE TABLE t (x)")
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
        #: Whether this user may only read the store (see :func:`open_address`): then nothing is
        #: discarded by a check point, and readers leave expired messages out instead.
        self.read_only = open_address(self.path)[1]
        self.durability: Durability = durability
        self.timeout = timeout
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._closed = False
        self._tracer: Callable[[str], None] | None = None
        # The WAL's real name is known once SQLite has opened the file (see connection()).
        self._barrier = SyncBarrier(f"{Path(self.path).resolve()}-wal")
        # Writers of this process queue for their turn here rather than in SQLite's busy
        # handler, which sleeps in steps of up to 100 ms instead of waking when the lock
        # is free; the turn comes with the transaction the writers before left open.
        check_positive(group_limit, "group_limit")
        self._combiner = Combiner(self.path, self._barrier, self.translate, limit=group_limit)
        self._lead = Lead(self, group_limit)  # run(): writes one thread runs for many (edgeq.store.flat)
        self._located = False
        # One connection for every thread's writes (used in turn, _combiner): its page cache
        # stays warm, where a connection per thread would drop its whole cache whenever
        # another one had committed (SQLite resets it on seeing the WAL change).
        self._writer: sqlite3.Connection | None = None
        self._schema_seen = 0  # the schema version the writer last saw

    def _open(self) -> sqlite3.Connection:
        # isolation_level=None: edgeq issues BEGIN/COMMIT itself, so the
        # sqlite3 module never opens a deferred transaction behind its back.
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
            mode = conn.execute("PRAGMA journal_mode" if read_only else "PRAGMA journal_mode = WAL").fetchone()[0]
            if mode.lower() != "wal" and not read_only:
                raise StoreError(f"{self.path}: SQLite refused WAL mode (got {mode}); use a local filesystem")
            # NORMAL at either durability: in WAL mode a commit then never waits for the
            # disk under the write lock; at "full" write() waits for a shared flush after
            # it instead (edgeq.store.commits says why that is as durable as FULL).
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute("PRAGMA temp_store = MEMORY")
            register(conn)
        except (sqlite3.Error, UnicodeDecodeError) as exc:
            conn.close()
            raise store_error(exc, self.path) from exc
        return conn

    def connection(self) -> sqlite3.Connection:
        """This thread's connection for reading, opened on first use; inside this
        thread's :meth:`write`, the writer's connection (so a read sees the write)."""
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
                # The name SQLite gave the WAL: the database's full path as SQLite
                # resolved it (symbolic links followed), plus "-wal".
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
        """A write transaction (``BEGIN IMMEDIATE``): commits on success, rolls back on error.

        Taking the write lock up front means two writers never deadlock on a lock
        upgrade; writers of this process queue for their turn, other processes'
        in SQLite's busy handler, and neither fails before the timeout. Every
        thread writes through the one writer connection (see the class).

        Writes of concurrent threads are combined (:mod:`edgeq.store.combining`): a write
        whose body ends while others wait for their turn hands its transaction on
        uncommitted, and the last of the group COMMITs for all. Either way this returns
        only once the change is committed; a body that raises undoes only its own
        changes; if the group's transaction is lost (its COMMIT failed, or SQLite
        rolled it back), every write of the group raises :class:`StoreError`. A write
        nobody waits behind commits at once. Nesting a write in another one of the
        same thread raises :class:`StoreError`.

        At ``durability="full"`` it returns once the commit is on the disk: after the
        COMMIT, outside the write lock, the committer waits (for every durable write of
        its group) for a flush of the WAL that began after it, shared with every thread
        that committed meanwhile (group commit, :mod:`edgeq.store.commits`). A write that
        changed no row and no schema wrote nothing and waits for nothing (a REINDEX
        alone, which rebuilds what the rows already say, becomes durable with the next
        durable commit).

        ``durable=False`` commits without waiting for the disk. It is for changes
        whose loss in a power cut is harmless: the commit still survives a process
        crash, and the next durable commit makes it durable too (WAL keeps commits
        in order).
        """
        self._may_write()
        turns = self._combiner
        group = turns.take(self.timeout)
        # This thread has the turn, with the transaction of ``group`` if one is open:
        # every path below ends the turn exactly once (finish, fail or abandon).
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
        """``body(conn)`` in a write transaction, as ``with write(durable=...) as conn:``
        would run it, and its result; made for the hot paths (put, get, confirm).

        Concurrent calls are run by one thread (flat combining, :mod:`edgeq.store.flat`): a
        caller queues ``body`` and blocks once, and the thread leading runs every queued
        body in one transaction, each in a SAVEPOINT, so what a caller sees is what
        :meth:`write` promises (its own error undoes only its own changes; it returns
        once committed and, when durable, flushed). ``body`` may run on another thread:
        it must use only ``conn`` and thread-safe state.

        >>> import tempfile, os
        >>> factory = ConnectionFactory(os.path.join(tempfile.mkdtemp(), "x.db"))
        >>> factory.run(lambda conn: conn.execute("CREATE TABLE t (x)").rowcount)
        -1
        >>> factory.run(lambda conn: conn.execute("INSERT INTO t VALUES (1)").rowcount)
        1
        >>> factory.close()
        """
        self._may_write()
        return self._lead.run(body, durable)

    def _may_write(self) -> None:
        """Refuse a write on a closed factory, or inside this thread's own write."""
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
        """The turns of the writer connection."""
        return self._combiner

    def wrote(self, conn: sqlite3.Connection, before: int) -> bool:
        """Whether a write that began at ``total_changes`` ``before`` wrote anything."""
        return conn.total_changes != before or self._schema_moved(conn)

    def durable(self) -> bool:
        """Whether writes wait for the disk (durability "full")."""
        return self.durability == "full"

    def writing(self, conn: sqlite3.Connection | None) -> None:
        """Mark this thread as inside a write on ``conn`` (None: no longer)."""
        self._local.writing = conn

    def translate(self, exc: sqlite3.Error | UnicodeDecodeError) -> StoreError:
        """A sqlite3 error in edgeq's words."""
        return store_error(exc, self.path)

    def _schema_moved(self, conn: sqlite3.Connection) -> bool:
        """Whether a transaction that changed no row changed the schema (DDL), which
        total_changes does not count; compared with the last version the writer saw,
        so another connection's change costs at most one flush too many, never one
        too few."""
        version = self._schema(conn)
        if version == self._schema_seen:
            return False
        self._schema_seen = version
        return True

    def flushed(self) -> None:
        """Return once every commit made so far is on the disk (at full durability).

        For readers that act outside the store on what they read (the sync agent sending a
        message): with group commit a commit is visible before its flush, and what left the
        device must not be a message a power cut could still take back (its uid reissued).
        """
        if self.durability == "full":
            self._barrier.wait()

    def sync_stats(self) -> SyncStats:
        """Durable commits made through :meth:`write`, and the flushes of the WAL they
        shared (group commit: fewer flushes than commits when threads commit together).

        >>> import tempfile, os
        >>> factory = ConnectionFactory(os.path.join(tempfile.mkdtemp(), "x.db"))
        >>> with factory.write() as conn:
        ...     _ = conn.execute("CREATE TABLE t (x)")
        >>> factory.sync_stats()
        SyncStats(commits=1, syncs=1, waiting=0)
        >>> factory.close()
        """
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
        """Called after every write transaction that changed a row, once it is visible
        (edgeq.consume.waiting wakes getters); None: nothing is called."""
        return self._combiner.notify

    @on_commit.setter
    def on_commit(self, callback: Callable[[], None] | None) -> None:
        self._combiner.notify = callback

    def combine_stats(self) -> CombineStats:
        """Write transactions committed, and the writes they held (more writes than
        transactions when threads wrote together, :mod:`edgeq.store.combining`).

        >>> import tempfile, os
        >>> factory = ConnectionFactory(os.path.join(tempfile.mkdtemp(), "x.db"))
        >>> for sql in ("CREATE TABLE t (x)", "INSERT INTO t VALUES (1)"):
        ...     with factory.write() as conn:
        ...         _ = conn.execute(sql)
        >>> factory.combine_stats()  # one thread: a transaction of its own for each write
        CombineStats(transactions=2, writes=2, queued=0)
        >>> factory.close()
        """
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
        """Pass every SQL statement run on this file's connections, open or opened
        later, to ``tracer`` (None: stop)."""
        with self._lock:
            self._tracer = tracer
            for conn in self._all:
                conn.set_trace_callback(tracer)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has been called."""
        return self._closed

    def close(self) -> None:
        """Close every connection this factory opened (from any thread).

        Writes begun before keep their outcome: the write in turn finishes, and what
        the writes before it left open in a combined transaction is committed (for up
        to ``timeout`` seconds); writes still waiting for their turn then raise
        :class:`QueueManagerClosed`."""
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

"""Group commit: durable commits of many threads share one flush of the WAL.

A store at ``durability="full"`` runs its connections at ``synchronous=NORMAL``: in
WAL mode a COMMIT then appends its frames to the ``-wal`` file and returns without
waiting for the disk. Once a COMMIT has returned and the write lock is let go, its
committer calls :meth:`SyncBarrier.wait` (for itself, or for every durable write of a
combined transaction, :mod:`edgeq.store.combining`), which returns only once a flush
(``fdatasync``) of the WAL that *started after that commit* has completed. The first
caller to arrive becomes the leader and flushes; callers arriving while it flushes
wait for the next flush, which one of them leads. So transactions committed one
after another by different threads pay about one flush per group instead of one
each, and a lone thread pays exactly one flush per commit, as at
``synchronous=FULL``: nobody waits for company.

Why a commit is durable when :meth:`SyncBarrier.wait` returns (SQLite 3.x, ``wal.c``):

- A commit's frames are written with ``write()`` to the WAL file before COMMIT
  returns; a flush of that file that starts afterwards makes them durable, and the
  frame checksums let recovery stop at the last whole commit if later, unflushed
  frames were torn by the power cut.
- Data moves from the WAL into the database file only in a checkpoint, which at
  NORMAL (as at FULL) syncs the WAL before copying and the database after, and only
  then marks the frames as backfilled. The WAL is restarted from its beginning only
  when every frame is backfilled, and its new header is synced by SQLite itself
  (``walFrames``: ``syncHeader``). Nothing committed lives only in overwritten frames.
- The WAL file is deleted only by the last connection to close the database, after a
  checkpoint that synced both files; while this process has a connection open it
  stays. A flush that finds it gone (or replaced by a new file: new inode) therefore
  has nothing left to make durable in the old one; a new file's directory entry is
  synced once when it is first opened here (SQLite also syncs the directory at a new
  WAL's first sync).
- Only the ``-wal`` file is opened here, never the database or ``-shm`` files: closing
  a descriptor drops every POSIX lock the process holds on that file, and SQLite's
  locks live on those two.

A commit is visible to other connections from its COMMIT, before its flush (SQLite
at FULL flushed first): a reader may see a change whose writer has not returned yet.
Any durable commit made after it is flushed with it, since a flush covers everything
before it in the file, so nothing that returned depends on an unflushed change.

A failed flush leaves it unknown what reached the disk (Linux may drop the dirty pages
and report success next time), so the barrier then refuses every later wait: the
queue manager must be closed and reopened.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass

from edgeq.errors import StoreError

__all__ = ["SyncBarrier", "SyncStats"]

#: How the WAL is flushed: ``fdatasync`` where there is one (what SQLite itself uses on
#: Linux for a commit at ``synchronous=FULL``), ``fsync`` elsewhere.
FLUSH: Callable[[int], None] = getattr(os, "fdatasync", os.fsync)


@dataclass(frozen=True)
class SyncStats:
    """What a barrier has done: ``commits`` durable commits waited for (one per durable
    write, also when a combined transaction's committer waits for all of its writes),
    ``syncs`` flushes of the WAL made for them (``commits / syncs`` is the mean group
    size); and ``waiting``, the commits waiting right now for a flush another caller leads."""

    commits: int
    syncs: int
    waiting: int = 0


class SyncBarrier:
    """Shares flushes of one WAL file among the threads that committed to it.

    >>> import sqlite3, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "x.db")
    >>> conn = sqlite3.connect(path, isolation_level=None)
    >>> _ = conn.execute("PRAGMA journal_mode = WAL"); _ = conn.execute("PRAGMA synchronous = NORMAL")
    >>> _ = conn.execute("CREATE TABLE t (x)")
    >>> barrier = SyncBarrier(path + "-wal")
    >>> barrier.wait()  # the CREATE TABLE is on the disk now
    >>> barrier.stats()
    SyncStats(commits=1, syncs=1, waiting=0)
    >>> barrier.close(); conn.close()
    """

    def __init__(self, wal_path: str, *, flush: Callable[[int], None] | None = None) -> None:
        self.path = wal_path
        self._flush = flush
        self._cond = threading.Condition(threading.Lock())
        self._started = 0  # generation of the last flush begun
        self._finished = 0  # generation of the last flush completed
        self._leading = False
        self._waiting = 0
        self._failure: str | None = None  # why a flush failed: every later wait raises it
        self._closed = False
        self._commits = 0
        self._syncs = 0
        # Touched by the leader only (one at a time), or under the lock with no leader.
        self._fd: int | None = None
        self._file: tuple[int, int] | None = None

    def stats(self) -> SyncStats:
        """Durable commits waited for, and flushes made, so far; callers waiting now."""
        with self._cond:
            return SyncStats(self._commits, self._syncs, self._waiting)

    def mark(self) -> int:
        """The first flush that will cover everything committed so far: a later
        :meth:`wait` given it returns after that flush (or a later one), so the
        writers of one combined transaction (:mod:`edgeq.store.combining`), marked once at
        its COMMIT, share the flush that follows it even if they wait a moment later."""
        with self._cond:
            return self._started + 1

    def wait(self, mark: int | None = None, *, callers: int = 1) -> None:
        """Return once everything this thread committed before the call (or before
        ``mark`` was taken, see :meth:`mark`) is on the disk. ``callers``: how many
        durable commits this wait stands for (the writes of a combined transaction,
        whose committer waits for all of them), as counted in :meth:`stats`.

        Raises :class:`StoreError` if a flush failed (now or earlier).
        """
        with self._cond:
            # A flush that begins after this point covers this caller's commit.
            needed = self._started + 1 if mark is None else mark
            while self._finished < needed:
                self._check()
                if self._leading:
                    self._waiting += callers
                    try:
                        self._cond.wait()
                    finally:
                        self._waiting -= callers
                    continue
                self._lead()
            self._check()
            self._commits += callers

    def _check(self) -> None:
        if self._failure is not None:
            raise StoreError(self._failure)

    def _lead(self) -> None:
        """Flush outside the lock (held on entry and on return), then wake the waiters."""
        self._leading = True
        self._started += 1
        generation = self._started
        failure: str | None = None
        self._cond.release()
        try:
            try:
                fd = self._current()
            except OSError as exc:  # nothing flushed, nothing lost: the next caller may try again
                raise StoreError(
                    f"{self.path}: cannot open the write-ahead log to flush it ({exc}); the last changes "
                    "are committed but may not be on the disk yet: check the file and the process's "
                    "open files, and retry"
                ) from exc
            if fd is not None:
                try:
                    (self._flush or FLUSH)(fd)  # looked up at each flush, so it can be replaced (a slow disk)
                except OSError as exc:
                    failure = (
                        f"{self.path}: flushing the write-ahead log to the disk failed ({exc}); the last "
                        "changes may not be on the disk: close the queue manager, check the disk, and reopen"
                    )
                    raise StoreError(failure) from exc
        except BaseException:
            self._cond.acquire()
            self._failure = self._failure or failure
            self._leading = False  # another caller leads the next flush (unless the disk failed)
            self._cond.notify_all()
            raise
        self._cond.acquire()
        self._leading = False
        self._finished = generation
        self._syncs += fd is not None
        if self._closed:
            self._forget()
        self._cond.notify_all()

    def _current(self) -> int | None:
        """A descriptor of the WAL file now at :attr:`path`, reopened when the file was
        replaced; None when there is none (see the module's notes: nothing to flush)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self._forget()
            return None
        if self._fd is not None and self._file == (st.st_dev, st.st_ino):
            return self._fd
        self._forget()
        try:
            fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            return None
        opened = os.fstat(fd)
        self._fd, self._file = fd, (opened.st_dev, opened.st_ino)
        _sync_directory(os.path.dirname(self.path) or ".")
        return fd

    def _forget(self) -> None:
        if self._fd is not None:
            fd, self._fd, self._file = self._fd, None, None
            os.close(fd)

    def close(self) -> None:
        """Let go of the WAL's descriptor (a later :meth:`wait` opens it for its flush only)."""
        with self._cond:
            self._closed = True
            if not self._leading:
                self._forget()


def _sync_directory(path: str) -> None:
    """Make a new file's directory entry durable; best effort, as SQLite does (some
    systems cannot open or sync a directory, and the file's own flush still holds)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)

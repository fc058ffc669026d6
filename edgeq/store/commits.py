"""Group commit: durable commits of many threads share one flush of the WAL (why that is
durable: docs/storage.md, "Writes and group commit")."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from edgeq.errors import StoreError

__all__ = ["SyncBarrier", "SyncStats"]

#: How the WAL is flushed: ``fdatasync`` where there is one (what SQLite itself uses on
#: Linux for a commit at ``synchronous=FULL``), ``fsync`` elsewhere.
FLUSH: Callable[[int], None] = getattr(os, "fdatasync", os.fsync)


@dataclass(frozen=True)
class SyncStats:
    """Durable commits waited for, WAL flushes made for them (``commits / syncs`` is the mean
    group size), and commits waiting now for a flush another caller leads."""

    commits: int
    syncs: int
    waiting: int = 0


class SyncBarrier:
    """Shares flushes of one WAL file among the threads that committed to it."""

    def __init__(self, wal_path: str, *, flush: Callable[[int], None] | None = None) -> None:
        self.path = wal_path
        self._flush = flush
        #: Called by a leader before its flush begins, outside the lock: the owner lets the commits
        #: about to happen join this flush (ConnectionFactory: the write in progress, for at most
        #: :attr:`last_flush_s`); None: flush at once.
        self.settle: Callable[[float], None] | None = None
        self.last_flush_s = 0.0  # how long the last flush took
        self._lock = threading.Lock()  # taken directly: the Condition's __enter__ is Python
        self._cond = threading.Condition(self._lock)
        self._started = 0  # generation of the last flush begun
        self._finished = 0  # generation of the last flush completed
        self._leading = False
        self._waiting = 0
        self._failure: str | None = None  # why a flush failed: every later wait raises it
        self._closed = False
        self._commits = 0
        self._syncs = 0
        #: Set by the owner while a connection of its own is open on the file: SQLite deletes or
        #: replaces a WAL only when its last connection closes, so the descriptor is not checked
        #: against the path at each flush (a stat there cost a quarter of a put: docs/storage.md).
        self.pinned = False
        # Touched by the leader only (one at a time), or under the lock with no leader.
        self._fd: int | None = None
        self._file: tuple[int, int] | None = None

    def stats(self) -> SyncStats:
        with self._lock:
            return SyncStats(self._commits, self._syncs, self._waiting)

    def mark(self) -> int:
        """The first flush that will cover everything committed so far, for a later :meth:`wait`."""
        with self._lock:
            return self._started + 1

    def wait(self, mark: int | None = None) -> None:
        """Return once everything committed before the call (or before ``mark``) is on the disk.
        Raises StoreError if a flush ever failed."""
        with self._lock:
            # A flush that begins after this point covers this caller's commit.
            needed = self._started + 1 if mark is None else mark
            while self._finished < needed:
                if self._failure is not None:
                    raise StoreError(self._failure)
                if self._leading:
                    self._waiting += 1
                    try:
                        self._cond.wait()
                    finally:
                        self._waiting -= 1
                    continue
                self._lead()
            if self._failure is not None:
                raise StoreError(self._failure)
            self._commits += 1

    def _lead(self) -> None:
        """Flush outside the lock (held on entry and on return), then wake the waiters."""
        self._leading = True
        if self.settle is not None and self.last_flush_s:
            # Callers arriving meanwhile wait for this flush (it has not begun: _started is unchanged).
            self._cond.release()
            try:
                self.settle(self.last_flush_s)
            finally:
                self._cond.acquire()
        self._started += 1
        generation = self._started
        failure: str | None = None
        self._cond.release()
        try:
            try:
                fd = self._current()
            except OSError as exc:  # nothing flushed, nothing lost: the next caller may try again
                raise StoreError(
                    f"{self.path}: cannot open the write-ahead log to flush it ({exc}); the last "
                    "changes are committed but may not be on the disk yet: check the file and the "
                    "process's open files, and retry"
                ) from exc
            if fd is not None:
                try:
                    began = time.monotonic()
                    (self._flush or FLUSH)(fd)  # looked up at each flush, so it can be replaced (a slow disk)
                    self.last_flush_s = time.monotonic() - began
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
        if self._waiting:  # a lone writer (every single-threaded put) has nobody to wake
            self._cond.notify_all()

    def _current(self) -> int | None:
        """A descriptor of the WAL file now at :attr:`path` (reopened if replaced); None if gone."""
        if self.pinned and self._fd is not None:
            return self._fd
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
            self.pinned = False
            if not self._leading:
                self._forget()


def _sync_directory(path: str) -> None:
    """Make a new file's directory entry durable; best effort, as SQLite does."""
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

"""The sync barrier of group commit (edgeq.store.commits), on real SQLite files and real threads.

Each writer is a thread with its own sqlite3 connection at ``synchronous=NORMAL`` (as
the connection factory opens them), committing a row and then waiting on the barrier.
A :class:`SlowDisk` stands in for the flush: it really flushes, but can hold its first
flush until the test has lined the other writers up behind it, so which commits share
which flush is decided by the test, not by the machine's speed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from edgeq.errors import StoreError
from edgeq.store import commits
from edgeq.store.commits import SyncBarrier, SyncStats

TIMEOUT = 30.0


def until(condition: Callable[[], bool], what: str) -> None:
    """Wait (bounded) for a condition another thread brings about."""
    deadline = time.monotonic() + TIMEOUT
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.001)


class SlowDisk:
    """A real flush that logs its start and end; with ``hold_first`` its first flush
    waits for :meth:`release` before flushing."""

    def __init__(self, *, hold_first: bool = False) -> None:
        self.hold_first = hold_first
        self.released = threading.Event()
        self.log: list[str] = []
        self.lock = threading.Lock()
        self.inodes: list[int] = []
        self.real = commits.FLUSH  # the disk's own flush, even while FLUSH is this object

    def __call__(self, fd: int) -> None:
        with self.lock:
            number = sum(1 for entry in self.log if entry.startswith("start")) + 1
            self.log.append(f"start {number}")
            self.inodes.append(os.fstat(fd).st_ino)
        if number == 1 and self.hold_first and not self.released.wait(TIMEOUT):
            raise AssertionError("the first flush was never released")
        self.real(fd)
        with self.lock:
            self.log.append(f"end {number}")

    def note(self, entry: str) -> None:
        with self.lock:
            self.log.append(entry)

    def release(self) -> None:
        self.released.set()


def connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=TIMEOUT)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    return conn


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "g.db"
    conn = connect(path)
    conn.execute("CREATE TABLE t (who TEXT, n INTEGER)")
    yield path
    conn.close()


def commit(path: Path, who: str, n: int = 0) -> sqlite3.Connection:
    """A connection of its own that has committed one row (and stays open: the WAL stays)."""
    conn = connect(path)
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("INSERT INTO t VALUES (?, ?)", (who, n))
    conn.execute("COMMIT")
    return conn


class Writer(threading.Thread):
    """Commits one row on its own connection, waits on the barrier, notes its return."""

    def __init__(self, path: Path, barrier: SyncBarrier, disk: SlowDisk, who: str) -> None:
        super().__init__(name=who)
        self.path, self.barrier, self.disk, self.who = path, barrier, disk, who
        self.committed = threading.Event()
        self.returned = threading.Event()
        self.error: BaseException | None = None
        self.conn: sqlite3.Connection | None = None

    def run(self) -> None:
        try:
            self.conn = commit(self.path, self.who)
            self.disk.note(f"committed {self.who}")
            self.committed.set()
            self.barrier.wait()
            self.disk.note(f"returned {self.who}")
        except BaseException as exc:
            self.error = exc
        finally:
            self.returned.set()

    def finish(self) -> None:
        self.join(TIMEOUT)
        assert not self.is_alive(), f"{self.who} never returned"
        if self.conn is not None:
            self.conn.close()
        if self.error is not None:
            raise self.error


def wal(path: Path) -> str:
    return f"{path}-wal"


def test_a_lone_writer_flushes_once_per_commit_and_never_waits(db: Path) -> None:
    disk = SlowDisk()
    barrier = SyncBarrier(wal(db), flush=disk)
    conn = connect(db)
    for n in range(20):
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO t VALUES ('solo', ?)", (n,))
        conn.execute("COMMIT")
        barrier.wait()
        assert barrier.stats().waiting == 0
    assert barrier.stats() == SyncStats(commits=20, syncs=20)
    assert disk.log == [entry for n in range(1, 21) for entry in (f"start {n}", f"end {n}")]
    barrier.close()
    conn.close()


def test_a_commit_made_during_a_flush_waits_for_the_next_flush(db: Path) -> None:
    """The flush under way may have started before B's and C's commits reached the
    file: they return only after a flush that began after them."""
    disk = SlowDisk(hold_first=True)
    barrier = SyncBarrier(wal(db), flush=disk)
    a = Writer(db, barrier, disk, "A")
    a.start()
    until(lambda: disk.log[-1:] == ["start 1"], "A to lead the first flush")
    b, c = Writer(db, barrier, disk, "B"), Writer(db, barrier, disk, "C")
    b.start()
    c.start()
    until(lambda: barrier.stats().waiting == 2, "B and C to wait behind the flush under way")
    assert b.committed.is_set() and c.committed.is_set()
    assert not (a.returned.is_set() or b.returned.is_set() or c.returned.is_set())
    disk.release()
    for writer in (a, b, c):
        writer.finish()
    log = disk.log
    assert log.index("returned A") > log.index("end 1")
    for who in ("B", "C"):
        assert (log.index(f"committed {who}") < log.index("start 2") < log.index("end 2")
                < log.index(f"returned {who}"))
    assert barrier.stats() == SyncStats(commits=3, syncs=2)  # B and C shared the second flush
    barrier.close()


def test_eight_writers_share_two_flushes(db: Path) -> None:
    disk = SlowDisk(hold_first=True)
    barrier = SyncBarrier(wal(db), flush=disk)
    first = Writer(db, barrier, disk, "W0")
    first.start()
    until(lambda: disk.log[-1:] == ["start 1"], "the first flush")
    rest = [Writer(db, barrier, disk, f"W{i}") for i in range(1, 8)]
    for writer in rest:
        writer.start()
    until(lambda: barrier.stats().waiting == 7, "seven writers behind the first flush")
    disk.release()
    for writer in (first, *rest):
        writer.finish()
    assert barrier.stats() == SyncStats(commits=8, syncs=2)
    reader = connect(db)
    assert reader.execute("SELECT count(*) FROM t").fetchone() == (8,)
    reader.close()
    barrier.close()


def test_a_mark_taken_at_a_commit_is_served_by_a_flush_begun_after_it(db: Path) -> None:
    """The writers of one combined transaction start waiting a moment after its COMMIT:
    the mark taken at the COMMIT lets a flush that began in between serve them, where a
    plain wait would need the next flush."""
    disk = SlowDisk(hold_first=True)
    barrier = SyncBarrier(wal(db), flush=disk)
    conn = commit(db, "group")
    mark = barrier.mark()
    first = threading.Thread(target=barrier.wait)
    first.start()
    until(lambda: disk.log[-1:] == ["start 1"], "a flush begun after the commit")
    late = threading.Thread(target=barrier.wait, args=(mark,))
    late.start()
    until(lambda: barrier.stats().waiting == 1, "the late writer behind the flush under way")
    assert late.is_alive()  # the flush is held: nothing is on the disk yet
    disk.release()
    for thread in (first, late):
        thread.join(TIMEOUT)
        assert not thread.is_alive()
    assert barrier.stats() == SyncStats(commits=2, syncs=1)
    assert barrier.mark() == 2  # the next flush covers what is committed from now on
    conn.close()
    barrier.close()


def test_the_last_connection_closing_removes_the_wal_and_a_new_one_is_followed(tmp_path: Path) -> None:
    path = tmp_path / "r.db"
    disk = SlowDisk()
    barrier = SyncBarrier(wal(path), flush=disk)
    conn = connect(path)
    conn.execute("CREATE TABLE t (who TEXT, n INTEGER)")
    barrier.wait()
    old_inode = os.stat(wal(path)).st_ino
    conn.close()  # the last connection: SQLite checkpoints (syncing both files) and deletes the WAL
    assert not Path(wal(path)).exists()
    barrier.wait()  # nothing left to flush: what was committed is in the database file, synced
    assert barrier.stats() == SyncStats(commits=2, syncs=1)
    again = commit(path, "after")
    barrier.wait()
    assert barrier.stats() == SyncStats(commits=3, syncs=2)
    new_inode = os.stat(wal(path)).st_ino
    assert disk.inodes == [old_inode, new_inode]
    reader = connect(path)
    assert reader.execute("SELECT who FROM t").fetchall() == [("after",)]
    reader.close()
    again.close()
    barrier.close()


def test_an_open_connection_keeps_the_wal_in_place_so_a_pinned_barrier_never_looks_again(db: Path) -> None:
    """Why ``pinned`` is safe: while one connection is open, another one's TRUNCATE checkpoint and
    close leave the WAL where it is (same inode), and a pinned barrier flushes that same file."""
    disk = SlowDisk()
    barrier = SyncBarrier(wal(db), flush=disk)
    barrier.pinned = True
    mine = commit(db, "mine")
    barrier.wait()
    other = commit(db, "other")
    other.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    other.close()  # not the last connection: SQLite leaves the WAL
    mine.execute("INSERT INTO t VALUES ('again', 1)")
    barrier.wait()
    inode = os.stat(wal(db)).st_ino
    assert disk.inodes == [inode, inode]
    assert barrier.stats() == SyncStats(commits=2, syncs=2)
    mine.close()
    held = wal_descriptors(db)  # the fixture's connection and the barrier's descriptor
    barrier.close()
    assert not barrier.pinned and wal_descriptors(db) == held - 1


def test_a_failed_flush_fails_its_waiters_and_every_later_one(db: Path) -> None:
    calls: list[int] = []

    def failing(fd: int) -> None:
        calls.append(fd)
        raise OSError(errno.EIO, "Input/output error")

    barrier = SyncBarrier(wal(db), flush=failing)
    conn = commit(db, "lost?")
    with pytest.raises(StoreError, match=r"flushing the write-ahead log to the disk failed.*reopen"):
        barrier.wait()
    with pytest.raises(StoreError, match="flushing the write-ahead log"):
        barrier.wait()
    assert len(calls) == 1  # no flush is trusted after a failed one
    assert barrier.stats() == SyncStats(commits=0, syncs=0)
    conn.close()
    barrier.close()


def test_a_wal_that_cannot_be_opened_fails_that_wait_but_not_the_next(db: Path, tmp_path: Path) -> None:
    barrier = SyncBarrier(str(tmp_path / "not-a-dir.txt" / "g.db-wal"), flush=SlowDisk())
    (tmp_path / "not-a-dir.txt").write_text("a file where a directory should be")
    conn = commit(db, "x")
    with pytest.raises(StoreError, match=r"cannot open the write-ahead log to flush it.*retry"):
        barrier.wait()
    barrier.path = wal(db)  # nothing was flushed and nothing is lost: a later wait flushes
    barrier.wait()
    assert barrier.stats() == SyncStats(commits=1, syncs=1)
    conn.close()
    barrier.close()


def test_an_interrupted_leader_hands_the_flush_to_the_next_waiter(db: Path) -> None:
    class Interrupted(BaseException):
        pass

    first = [True]

    def flaky(fd: int) -> None:
        if first[0]:
            first[0] = False
            raise Interrupted()
        commits.FLUSH(fd)

    barrier = SyncBarrier(wal(db), flush=flaky)
    conn = commit(db, "x")
    with pytest.raises(Interrupted):
        barrier.wait()
    barrier.wait()  # not stuck behind the leader that left
    assert barrier.stats() == SyncStats(commits=1, syncs=1)
    conn.close()
    barrier.close()


def wal_descriptors(path: Path) -> int:
    """How many of this process's descriptors are open on the WAL file."""
    target = os.path.realpath(wal(path))
    found = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # closed since listed
            found += os.readlink(f"/proc/self/fd/{fd}") == target
    return found


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to list open descriptors")
def test_a_closed_barrier_still_flushes_and_keeps_no_descriptor(db: Path) -> None:
    barrier = SyncBarrier(wal(db), flush=SlowDisk())
    conn = commit(db, "x")
    barrier.wait()
    assert wal_descriptors(db) == 3  # the fixture's connection, conn, and the barrier's
    barrier.close()
    assert wal_descriptors(db) == 2
    conn.execute("INSERT INTO t VALUES ('y', 1)")
    barrier.wait()
    assert barrier.stats() == SyncStats(commits=2, syncs=2)
    assert wal_descriptors(db) == 2  # opened for that flush only
    conn.close()

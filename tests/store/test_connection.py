"""The connection factory's write policy: group commit through real queue managers,
real threads, real SQLite files, and a real subprocess killed with SIGKILL.

Durable writes share flushes of the WAL (edgeq.store.commits); these tests count them with
``ConnectionFactory.sync_stats()``. Where the test must decide which commits share a
flush, the disk's flush is replaced by a :class:`~tests.store.test_commits.SlowDisk` that
really flushes but holds its first flush until the other writers are lined up.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from edgeq import Message, QueueManager
from edgeq.errors import MessageTooLarge, QueueFull, StoreError
from edgeq.store import commits
from edgeq.store.commits import SyncStats
from edgeq.store.connection import ConnectionFactory
from edgeq.uid import MessageUID
from tests.store.test_commits import TIMEOUT, SlowDisk, until

ROOT = Path(__file__).resolve().parents[2]


def stats(qm: QueueManager) -> SyncStats:
    return qm._db.sync_stats()


def flushes(qm: QueueManager, action: Callable[[], object]) -> int:
    """How many WAL flushes ``action`` cost (it runs alone)."""
    before = stats(qm).syncs
    action()
    return stats(qm).syncs - before


def run_threads(targets: list[Callable[[], None]]) -> list[BaseException]:
    """Run each target in a thread of its own; return what they raised."""
    errors: list[BaseException] = []

    def guarded(target: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                target()
            except BaseException as exc:  # collected and asserted on by the caller
                errors.append(exc)
        return run

    threads = [threading.Thread(target=guarded(t)) for t in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT)
        assert not thread.is_alive(), "a thread never finished"
    return errors


@pytest.fixture
def qm(tmp_path: Path) -> Iterator[QueueManager]:
    manager = QueueManager(tmp_path / "g.db", name="DEV1")
    manager.define_queue("Q", ordering="fifo", max_message_bytes=1000)
    yield manager
    manager.close()


# -- one thread: exactly what synchronous=FULL cost ------------------------------------------


def test_a_lone_thread_pays_one_flush_per_durable_put_and_never_waits(qm: QueueManager) -> None:
    before = stats(qm)
    for i in range(25):
        qm.put("Q", Message(b"%d" % i))
    after = stats(qm)
    assert (after.syncs - before.syncs, after.commits - before.commits, after.waiting) == (25, 25, 0)


def test_every_durable_verb_waits_for_one_flush_and_a_lock_for_none(qm: QueueManager) -> None:
    assert flushes(qm, lambda: qm.put_many("Q", [Message(b"a"), Message(b"b"), Message(b"c")])) == 1
    assert flushes(qm, lambda: qm.get("Q")) == 1  # a plain get deletes: durable
    locked = qm.get("Q", confirm_id=7)
    assert locked is not None and locked.uid is not None
    uid = locked.uid
    assert flushes(qm, lambda: qm.get("Q", confirm_id=8)) == 0  # a lock lost in a power cut is an undo
    assert flushes(qm, lambda: qm.confirm_get("Q", uid)) == 1
    assert flushes(qm, lambda: qm.undo("Q", 8)) == 1
    held = qm.put("Q", Message(b"d"), confirm_id=9)
    assert flushes(qm, lambda: qm.confirm_put("Q", held)) == 1


def test_writes_that_change_nothing_wait_for_no_flush(qm: QueueManager) -> None:
    assert flushes(qm, lambda: qm.get("Q")) == 0  # an empty queue: nothing written
    assert flushes(qm, lambda: qm.depth("Q")) == 0
    assert flushes(qm, lambda: qm.browse("Q")) == 0


def test_a_schema_change_alone_still_waits(tmp_path: Path) -> None:
    factory = ConnectionFactory(tmp_path / "s.db")
    with factory.write() as conn:
        conn.execute("CREATE TABLE t (x)")
    with factory.write() as conn:
        conn.execute("CREATE INDEX t_x ON t (x)")  # no row changes: total_changes stays
    assert factory.sync_stats() == SyncStats(commits=2, syncs=2)
    factory.close()


def test_normal_durability_and_non_durable_writes_never_flush(tmp_path: Path) -> None:
    with QueueManager(tmp_path / "n.db", name="DEV1", durability="normal") as qm:
        qm.define_queue("Q")
        for _ in range(5):
            qm.put("Q", Message(b"x"))
        assert stats(qm) == SyncStats(commits=0, syncs=0)
    factory = ConnectionFactory(tmp_path / "f.db")
    with factory.write(durable=False) as conn:
        conn.execute("CREATE TABLE t (x)")
    assert factory.sync_stats() == SyncStats(commits=0, syncs=0)
    factory.close()


def test_connections_commit_at_normal_and_flush_themselves(tmp_path: Path) -> None:
    """Every connection runs at synchronous=NORMAL, so no commit flushes under the write
    lock; durability comes from the flush after it."""
    factory = ConnectionFactory(tmp_path / "p.db")
    assert factory.connection().execute("PRAGMA synchronous").fetchone() == (1,)  # NORMAL
    factory.close()


def test_a_nested_write_fails_at_once_instead_of_waiting_for_itself(tmp_path: Path) -> None:
    factory = ConnectionFactory(tmp_path / "w.db", timeout=TIMEOUT)
    with factory.write() as conn:
        conn.execute("CREATE TABLE t (x)")
        with pytest.raises(StoreError, match="transaction"), factory.write():
            pass
    factory.close()


def test_every_thread_writes_through_one_connection_and_reads_its_own_write_inside(tmp_path: Path) -> None:
    """One writer connection for all threads (its page cache stays warm); inside a
    write, the thread's reads go through it and see the uncommitted change."""
    factory = ConnectionFactory(tmp_path / "one.db", timeout=TIMEOUT)
    with factory.write() as conn:
        conn.execute("CREATE TABLE t (x)")
    used: list[int] = []
    seen: list[int] = []

    def writer(x: int) -> None:
        with factory.write() as conn:
            conn.execute("INSERT INTO t VALUES (?)", (x,))
            used.append(id(conn))
            assert factory.connection() is conn
            with factory.read() as inside:
                seen.append(inside.execute("SELECT count(*) FROM t WHERE x = ?", (x,)).fetchone()[0])

    assert run_threads([lambda x=x: writer(x) for x in range(4)]) == []  # type: ignore[misc]
    assert len(set(used)) == 1 and seen == [1, 1, 1, 1]
    reader = factory.connection()  # outside a write: this thread's own connection
    assert id(reader) not in used
    assert reader.execute("SELECT count(*) FROM t").fetchone() == (4,)
    factory.close()


# -- what the hot paths keep between transactions (ConnectionFactory.known) ------------------


def test_a_queue_altered_by_another_connection_is_seen_by_the_next_put(tmp_path: Path) -> None:
    """The put reads the queue's definition from memory while no other connection committed."""
    with QueueManager(tmp_path / "k.db", name="DEV1") as qm:
        qm.define_queue("Q")
        qm.put("Q", Message(b"x" * 500))  # its definition is kept now
        with QueueManager(tmp_path / "k.db") as other:
            other.alter_queue("Q", max_message_bytes=100)
        with pytest.raises(MessageTooLarge, match="at most 100"):
            qm.put("Q", Message(b"x" * 500))
        qm.alter_queue("Q", max_message_bytes=1000)  # this process's own change, too
        qm.put("Q", Message(b"x" * 500))
        assert qm.depth("Q") == 2


def test_stamps_stay_in_commit_order_across_two_managers_and_the_clock_holds_the_last(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with QueueManager(path, name="DEV1") as a, QueueManager(path) as b:
        a.define_queue("Q", ordering="fifo", max_message_bytes=1000)
        uids = []
        for i in range(20):
            uids.append((a if i % 3 else b).put("Q", Message(b"%d" % i)))
        with pytest.raises(MessageTooLarge):  # a batch refused whole: its stamps were never issued
            a.put_many("Q", [Message(b"ok"), Message(b"x" * 10**6)])
        a.alter_queue("Q", max_message_bytes=10**7)
        uids.append(a.put("Q", Message(b"20")))
        stamps = [u.stamp for u in uids]
        assert stamps == sorted(set(stamps))  # unique, and in the order the puts committed
        assert [m.data for m in b.get_many("Q", 30)] == [b"%d" % i for i in range(21)]
        with a._db.read() as conn:
            assert conn.execute("SELECT stamp FROM edgeq_clock").fetchone() == (stamps[-1],)


def test_depths_kept_in_memory_follow_every_change_from_here_and_elsewhere(tmp_path: Path) -> None:
    path = tmp_path / "d.db"
    with QueueManager(path, name="DEV1") as qm, QueueManager(path) as other:
        qm.define_queue("Q", max_depth=5, on_full="reject")
        for _ in range(3):
            qm.put("Q", Message(b"a"))
        other.put("Q", Message(b"b"))  # another connection: qm's kept depth is stale now
        qm.put("Q", Message(b"c"))
        with pytest.raises(QueueFull):
            qm.put("Q", Message(b"d"))
        locked = qm.get("Q", confirm_id=1)
        assert locked is not None and locked.uid is not None
        qm.confirm_get("Q", locked.uid)
        qm.put("Q", Message(b"e"))  # room for one again, counted here
        with pytest.raises(QueueFull):
            qm.put("Q", Message(b"f"))
        assert qm.depth("Q") == other.depth("Q") == 5


# -- many threads: flushes shared, each transaction still its own ---------------------------


def putter(qm: QueueManager, data: bytes) -> Callable[[], None]:
    def put() -> None:
        qm.put("Q", Message(data))
    return put


def behind_one_flush(
    qm: QueueManager, monkeypatch: pytest.MonkeyPatch, first: Callable[[], None],
    rest: list[Callable[[], None]], lined_up: Callable[[SyncStats], bool],
) -> tuple[int, int]:
    """Run ``first`` until its flush begins and hold that flush (a slow disk) while
    ``rest`` run in threads of their own, until ``lined_up`` says they are waiting
    behind it; then let the disk go. Returns the durable commits and the flushes made."""
    disk = SlowDisk(hold_first=True)
    monkeypatch.setattr(commits, "FLUSH", disk)
    before = stats(qm)
    leader = threading.Thread(target=first)
    leader.start()
    until(lambda: disk.log[-1:] == ["start 1"], "the first flush")

    def release_when_lined_up() -> None:
        until(lambda: lined_up(stats(qm)), "the others behind the first flush")
        disk.release()

    releaser = threading.Thread(target=release_when_lined_up)
    releaser.start()
    assert run_threads(rest) == []
    leader.join(TIMEOUT)
    releaser.join(TIMEOUT)
    assert not (leader.is_alive() or releaser.is_alive())
    after = stats(qm)
    return after.commits - before.commits, after.syncs - before.syncs


def test_eight_concurrent_puts_share_two_flushes(qm: QueueManager, monkeypatch: pytest.MonkeyPatch) -> None:
    rest = [putter(qm, b"p%d" % i) for i in range(7)]
    assert behind_one_flush(qm, monkeypatch, putter(qm, b"first"), rest, lambda s: s.waiting == 7) == (8, 2)
    assert qm.depth("Q") == 8


def test_a_bad_message_fails_alone_among_concurrent_good_ones(
    qm: QueueManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    outcomes: dict[str, BaseException | None] = {}

    def put(data: bytes) -> Callable[[], None]:
        def run() -> None:
            try:
                qm.put("Q", Message(data))
                outcomes[data.decode()[:6]] = None
            except MessageTooLarge as exc:
                outcomes["big"] = exc
        return run

    # The failed put rolled back: no flush waited for it (if it happened to commit a
    # transaction another put had handed on, it waited for that put's flush).
    assert behind_one_flush(
        qm, monkeypatch, putter(qm, b"good-0"), [put(b"good-1"), put(b"x" * 5000), put(b"good-2")],
        lambda s: s.waiting == 2,
    ) == (3, 2)
    assert isinstance(outcomes.pop("big"), MessageTooLarge)
    assert outcomes == {"good-1": None, "good-2": None}
    assert sorted(m.data for m in qm.browse("Q")) == [b"good-0", b"good-1", b"good-2"]


def test_concurrent_producers_keep_their_order_and_every_put_is_in_the_store(
    qm: QueueManager, tmp_path: Path
) -> None:
    threads, each = 8, 30
    before = stats(qm)

    def producer(t: int) -> Callable[[], None]:
        def produce() -> None:
            for i in range(each):
                qm.put("Q", Message(b"%d:%d" % (t, i)))
        return produce

    assert run_threads([producer(t) for t in range(threads)]) == []
    after = stats(qm)
    assert after.commits - before.commits == threads * each
    assert after.syncs - before.syncs <= threads * each
    # Another connection (another queue manager on the file) sees every put that returned.
    with QueueManager(tmp_path / "g.db") as other:
        got = [m.data.decode() for m in other.get_many("Q", threads * each + 1)]
    assert len(got) == threads * each
    seen: dict[int, list[int]] = defaultdict(list)
    for text in got:
        t, i = text.split(":")
        seen[int(t)].append(int(i))
    assert seen == {t: list(range(each)) for t in range(threads)}  # FIFO: each producer's order


def confirmer(qm: QueueManager, uid: MessageUID) -> Callable[[], None]:
    def confirm() -> None:
        qm.confirm_get("Q", uid)
    return confirm


def test_concurrent_get_and_confirm_share_flushes(qm: QueueManager, monkeypatch: pytest.MonkeyPatch) -> None:
    qm.put_many("Q", [Message(b"m%d" % i) for i in range(8)])
    uids = []
    for i in range(8):
        m = qm.get("Q", confirm_id=100 + i)
        assert m is not None and m.uid is not None
        uids.append(m.uid)
    rest = [confirmer(qm, uid) for uid in uids[1:]]
    assert behind_one_flush(qm, monkeypatch, confirmer(qm, uids[0]), rest, lambda s: s.waiting == 7) == (8, 2)
    assert qm.depth("Q") == 0


def test_a_failed_flush_fails_the_put_and_every_later_durable_write(
    qm: QueueManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(commits, "FLUSH", broken)
    with pytest.raises(StoreError, match="flushing the write-ahead log to the disk failed"):
        qm.put("Q", Message(b"x"))
    monkeypatch.undo()
    with pytest.raises(StoreError, match="close the queue manager, check the disk, and reopen"):
        qm.put("Q", Message(b"y"))


# -- a crash right after puts returned ---------------------------------------------------------


def _worker(path: str, threads: int) -> None:
    """Subprocess: ``threads`` producers putting until killed, each put reported once it
    returned. Their first puts wait behind a write held until all of them wait for their
    turn, so they really run together (reported first)."""
    qm = QueueManager(path, name="DEV1")
    say = threading.Lock()
    db = qm._db
    holding = threading.Event()

    def hold() -> None:
        with db.write():
            holding.set()
            until(lambda: db.write_stats().waiting == threads, "every producer to wait for its turn")
        with say:
            sys.stdout.write(f"waited {threads}\n")
            sys.stdout.flush()

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    holding.wait(TIMEOUT)

    def produce(t: int) -> None:
        rng = random.Random(t)
        for i in range(1_000_000):
            qm.put("Q", Message(b"%d:%d:" % (t, i) + rng.randbytes(rng.choice((0, 100, 900)))))
            with say:
                sys.stdout.write(f"put {t}:{i}\n")
                sys.stdout.flush()

    workers = [threading.Thread(target=produce, args=(t,), daemon=True) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()


def test_sigkill_right_after_concurrent_puts_returned_loses_none(tmp_path: Path) -> None:
    path = tmp_path / "k.db"
    with QueueManager(path, name="DEV1") as qm:
        qm.define_queue("Q", ordering="fifo")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.store.test_connection", str(path), "8"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    reported: list[str] = []
    waited: list[str] = []
    try:
        assert proc.stdout is not None
        while len(reported) < 400:
            line = proc.stdout.readline()
            assert line, f"the worker stopped early: {proc.stderr.read() if proc.stderr else ''}"
            if line.startswith("waited"):
                waited.append(line)
                continue
            reported.append(line.split()[1])
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(TIMEOUT)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
    assert proc.returncode == -signal.SIGKILL
    with QueueManager(path) as qm:
        stored = {b":".join(m.data.split(b":")[:2]).decode() for m in qm.browse("Q")}
    assert set(reported) <= stored
    assert len({r.split(":")[0] for r in reported}) > 1  # several producers really ran together
    assert waited == ["waited 8\n"]  # the 8 producers' first puts waited together behind one write


if __name__ == "__main__":
    _worker(sys.argv[1], int(sys.argv[2]))

"""Transaction combining (edgeq.store.combining, through ConnectionFactory.write): real threads
writing real SQLite files.

The order in which writes get their turn is set by the test, never by the machine's
speed: a first write holds its turn (its body waits on an event) while the others are
started one at a time, each once the one before waits for its turn
(``combine_stats().queued``); the turn then goes to them in that order. Statements are
counted with the factory's tracer; what another connection sees, with a plain sqlite3
connection of its own.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from edgeq import Message, QueueManager
from edgeq.errors import MessageTooLarge, QueueManagerClosed, StoreError
from edgeq.store import commits
from edgeq.store.combining import Baton, CombineStats, Group
from edgeq.store.connection import ConnectionFactory
from tests.store.test_commits import TIMEOUT, SlowDisk, until

Body = Callable[[sqlite3.Connection], None]


def insert(who: str) -> Body:
    def body(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO t (who) VALUES (?)", (who,))
    return body


def visible(path: Path) -> set[str]:
    """The rows another connection sees (committed ones)."""
    conn = sqlite3.connect(path, timeout=TIMEOUT)
    try:
        return {who for (who,) in conn.execute("SELECT who FROM t")}
    finally:
        conn.close()


class Writer(threading.Thread):
    """One write in a thread of its own; with ``hold``, its body waits for :attr:`go`.
    Notes what it raised, and what another connection saw the moment it returned."""

    def __init__(self, factory: ConnectionFactory, who: str, body: Body | None = None, *,
                 durable: bool = True, hold: bool = False, look: bool = True) -> None:
        super().__init__(name=who)
        self.factory, self.who, self.body, self.durable, self.hold = (
            factory, who, body or insert(who), durable, hold)
        self.look = look
        self.inside = threading.Event()
        self.go = threading.Event()
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.seen_on_return: set[str] = set()

    def run(self) -> None:
        try:
            with self.factory.write(durable=self.durable) as conn:
                self.inside.set()
                if self.hold and not self.go.wait(TIMEOUT):
                    raise AssertionError("never let go")
                self.body(conn)
            if self.look:
                self.seen_on_return = visible(Path(self.factory.path))
        except BaseException as exc:  # asserted on by the test
            self.error = exc
        finally:
            self.done.set()

    def finish(self) -> BaseException | None:
        self.join(TIMEOUT)
        assert not self.is_alive(), f"{self.who} never returned"
        return self.error


def line_up(factory: ConnectionFactory, first: Writer, rest: list[Writer]) -> None:
    """Start ``first`` holding its turn, then ``rest`` in order, each once the ones before
    wait for their turn; let ``first`` go (the caller waits for the writers)."""
    assert first.hold
    first.start()
    assert first.inside.wait(TIMEOUT)
    for number, writer in enumerate(rest, 1):
        writer.start()
        until(lambda n=number: factory.combine_stats().queued == n,
              f"{writer.who} to wait for its turn")  # type: ignore[misc]
    first.go.set()


def run_lined_up(
    factory: ConnectionFactory, first: Writer, rest: list[Writer]
) -> dict[str, BaseException | None]:
    line_up(factory, first, rest)
    return {w.who: w.finish() for w in (first, *rest)}


def refuse_abort(factory: ConnectionFactory) -> None:
    """A trigger that makes SQLite roll back the whole transaction of an insert of 'abort'."""
    with factory.write() as conn:
        conn.execute("CREATE TRIGGER refuse BEFORE INSERT ON t WHEN NEW.who = 'abort' "
                     "BEGIN SELECT RAISE(ROLLBACK, 'refused by a trigger'); END")


@pytest.fixture
def factory(tmp_path: Path) -> Iterator[ConnectionFactory]:
    made = ConnectionFactory(tmp_path / "c.db", timeout=TIMEOUT)
    with made.write() as conn:
        conn.execute("CREATE TABLE t (n INTEGER PRIMARY KEY, who TEXT UNIQUE)")
    yield made
    made.close()


@pytest.fixture
def traced(factory: ConnectionFactory) -> list[str]:
    statements: list[str] = []
    factory.set_tracer(statements.append)
    return statements


def transactions(statements: list[str]) -> list[str]:
    return [s for s in statements if s in ("BEGIN IMMEDIATE", "COMMIT", "ROLLBACK")]


# -- one thread: nothing changes ----------------------------------------------------------------


def test_a_lone_writer_commits_at_once_in_a_transaction_of_its_own(
    factory: ConnectionFactory, traced: list[str]
) -> None:
    before, flushes = factory.combine_stats(), factory.sync_stats().syncs
    for who in ("a", "b", "c"):
        with factory.write() as conn:
            conn.execute("INSERT INTO t (who) VALUES (?)", (who,))
        assert who in visible(Path(factory.path))  # committed before write() returned
    assert transactions(traced) == ["BEGIN IMMEDIATE", "COMMIT"] * 3
    assert not any(s.startswith(("SAVEPOINT", "RELEASE")) for s in traced)  # no savepoint for a lone writer
    after = factory.combine_stats()
    assert (after.transactions - before.transactions, after.writes - before.writes) == (3, 3)
    assert factory.sync_stats().syncs - flushes == 3


def test_a_lone_writer_that_fails_rolls_back_its_transaction(
    factory: ConnectionFactory, traced: list[str]
) -> None:
    with pytest.raises(ZeroDivisionError), factory.write() as conn:
        conn.execute("INSERT INTO t (who) VALUES ('lost')")
        raise ZeroDivisionError
    assert transactions(traced) == ["BEGIN IMMEDIATE", "ROLLBACK"]
    assert visible(Path(factory.path)) == set()
    with factory.write() as conn:  # the turn was let go
        conn.execute("INSERT INTO t (who) VALUES ('next')")
    assert visible(Path(factory.path)) == {"next"}


def test_a_nested_write_is_refused_at_once(factory: ConnectionFactory) -> None:
    with factory.write() as conn:
        conn.execute("INSERT INTO t (who) VALUES ('outer')")
        with pytest.raises(StoreError, match="inside a write transaction already"), factory.write():
            pass
    assert visible(Path(factory.path)) == {"outer"}  # the outer write went on and committed


# -- writes lined up: one transaction ----------------------------------------------------------


def test_writes_lined_up_behind_one_share_its_transaction_its_commit_and_its_flush(
    factory: ConnectionFactory, traced: list[str]
) -> None:
    before, synced = factory.combine_stats(), factory.sync_stats()
    first = Writer(factory, "w0", hold=True)
    rest = [Writer(factory, f"w{i}") for i in range(1, 6)]
    assert run_lined_up(factory, first, rest) == {f"w{i}": None for i in range(6)}
    assert transactions(traced) == ["BEGIN IMMEDIATE", "COMMIT"]
    assert traced.count("SAVEPOINT edgeq_write") == 5 and traced.count("RELEASE edgeq_write") == 5
    after = factory.combine_stats()
    assert (after.transactions - before.transactions, after.writes - before.writes) == (1, 6)
    flushed = factory.sync_stats()
    # six callers, one flush
    assert (flushed.commits - synced.commits, flushed.syncs - synced.syncs) == (6, 1)
    everyone = {f"w{i}" for i in range(6)}
    for writer in (first, *rest):
        assert writer.seen_on_return == everyone  # none returned before the one COMMIT


def test_a_failing_write_fails_alone_and_its_neighbours_commit(
    factory: ConnectionFactory, traced: list[str]
) -> None:
    def raises(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO t (who) VALUES ('raises')")
        raise ValueError("refused by the caller")

    first = Writer(factory, "a", hold=True)
    rest = [Writer(factory, "b"), Writer(factory, "raises", raises), Writer(factory, "dup", insert("a")),
            Writer(factory, "d")]
    outcomes = run_lined_up(factory, first, rest)
    assert isinstance(outcomes.pop("raises"), ValueError)
    duplicate = outcomes.pop("dup")
    assert isinstance(duplicate, StoreError) and "UNIQUE" in str(duplicate)  # a sqlite3 error, translated
    assert outcomes == {"a": None, "b": None, "d": None}
    assert visible(Path(factory.path)) == {"a", "b", "d"}
    assert transactions(traced) == ["BEGIN IMMEDIATE", "COMMIT"]
    assert traced.count("ROLLBACK TO edgeq_write") == 2


def test_a_transaction_sqlite_rolls_back_fails_every_write_of_its_group_and_the_next_group_goes_on(
    factory: ConnectionFactory,
) -> None:
    refuse_abort(factory)
    first = Writer(factory, "a", hold=True)
    rest = [Writer(factory, "b"), Writer(factory, "abort"), Writer(factory, "d"), Writer(factory, "e")]
    outcomes = run_lined_up(factory, first, rest)
    assert_lost_whole(factory, outcomes, ("a", "b"))


def assert_lost_whole(
    factory: ConnectionFactory, outcomes: dict[str, BaseException | None], lost: tuple[str, ...]
) -> None:
    """``lost`` (the writes before 'abort' in its transaction) failed with it; 'd' and 'e',
    after it, went on in a new transaction; nothing of the lost one was committed."""
    for who in lost:
        error = outcomes[who]
        assert isinstance(error, StoreError), who
        assert ("rolled back the whole write transaction" in str(error)
                and "refused by a trigger" in str(error))
    own = outcomes["abort"]
    assert isinstance(own, StoreError) and "refused by a trigger" in str(own)
    assert (outcomes["d"], outcomes["e"]) == (None, None)  # a new transaction after the lost one
    assert visible(Path(factory.path)) == {"d", "e"}  # nothing of the lost group, nothing half-applied


def test_a_failed_commit_fails_every_write_of_its_group(factory: ConnectionFactory) -> None:
    """A deferred foreign key is checked only at the COMMIT (edgeq's schema has none: here
    it stands for a COMMIT that fails)."""
    with factory.write() as conn:
        conn.execute("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
        conn.execute(
            "CREATE TABLE child (parent INTEGER REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)")

    def orphan(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO child VALUES (99)")

    first = Writer(factory, "a", hold=True)
    outcomes = run_lined_up(factory, first, [Writer(factory, "b"), Writer(factory, "orphan", orphan)])
    for who in ("a", "b"):
        error = outcomes[who]
        assert isinstance(error, StoreError), who
        assert "FOREIGN KEY constraint failed" in str(error) and "was not committed" in str(error)
    assert isinstance(outcomes["orphan"], StoreError)
    assert visible(Path(factory.path)) == set()
    with factory.write() as conn:  # the transaction was rolled back: the next one begins afresh
        conn.execute("INSERT INTO t (who) VALUES ('after')")
    assert visible(Path(factory.path)) == {"after"}


def test_a_group_holds_at_most_group_limit_writes(tmp_path: Path) -> None:
    factory = ConnectionFactory(tmp_path / "l.db", timeout=TIMEOUT, group_limit=3)
    with factory.write() as conn:
        conn.execute("CREATE TABLE t (n INTEGER PRIMARY KEY, who TEXT UNIQUE)")
    before = factory.combine_stats()
    first = Writer(factory, "w0", hold=True)
    assert run_lined_up(factory, first, [Writer(factory, f"w{i}") for i in range(1, 7)]) == {
        f"w{i}": None for i in range(7)
    }
    after = factory.combine_stats()
    assert (after.transactions - before.transactions, after.writes - before.writes) == (3, 7)  # 3 + 3 + 1
    factory.close()


def test_one_producers_writes_keep_their_order(factory: ConnectionFactory) -> None:
    producers, each = 4, 25
    started = threading.Event()

    def produce(p: int) -> Callable[[], None]:
        def run() -> None:
            for i in range(each):
                with factory.write() as conn:
                    conn.execute("INSERT INTO t (who) VALUES (?)", (f"{p}:{i}",))
                    if p == 0 and i == 0:  # the first write holds its turn until the others wait
                        started.set()
                        until(lambda: factory.combine_stats().queued == producers - 1, "the other producers")
        return run

    before = factory.combine_stats()
    threads = [threading.Thread(target=produce(0))]
    threads[0].start()
    assert started.wait(TIMEOUT)
    threads += [threading.Thread(target=produce(p)) for p in range(1, producers)]
    for thread in threads[1:]:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT)
        assert not thread.is_alive()
    after = factory.combine_stats()
    assert after.writes - before.writes == producers * each
    assert after.transactions - before.transactions < producers * each  # combined, at least at the start
    conn = sqlite3.connect(factory.path)
    rows = [who for (who,) in conn.execute("SELECT who FROM t ORDER BY n")]  # n: the order of the inserts
    conn.close()
    for p in range(producers):
        assert [int(w.split(":")[1]) for w in rows if w.startswith(f"{p}:")] == list(range(each))


@pytest.mark.parametrize("committer", [False, True], ids=["in-the-middle", "committing-for-the-group"])
def test_a_non_durable_write_returns_at_its_groups_commit_without_waiting_for_the_flush(
    factory: ConnectionFactory, monkeypatch: pytest.MonkeyPatch, committer: bool
) -> None:
    """An assured get's lock (``durable=False``) in a group returns at the COMMIT; when it
    is the last of the line, the COMMIT is its, and a durable write of the group flushes
    for the others."""
    disk = SlowDisk(hold_first=True)
    monkeypatch.setattr(commits, "FLUSH", disk)
    before = factory.sync_stats()
    first = Writer(factory, "a", hold=True)
    lock = Writer(factory, "lock", durable=False)
    other = Writer(factory, "c")
    line_up(factory, first, [other, lock] if committer else [lock, other])
    until(lambda: disk.log[-1:] == ["start 1"], "the group's flush")
    assert lock.done.wait(TIMEOUT) and lock.error is None  # back while the flush is held
    assert lock.seen_on_return == {"a", "lock", "c"}  # committed, with its group
    assert not (first.done.is_set() or other.done.is_set())  # the durable ones wait for the disk
    disk.release()
    assert (first.finish(), other.finish()) == (None, None)
    after = factory.sync_stats()
    assert (after.commits - before.commits, after.syncs - before.syncs) == (2, 1)


def test_on_commit_fires_once_per_transaction_after_its_commit(factory: ConnectionFactory) -> None:
    seen: list[set[str]] = []
    factory.on_commit = lambda: seen.append(visible(Path(factory.path)))
    first = Writer(factory, "a", hold=True)
    assert run_lined_up(factory, first, [Writer(factory, "b"), Writer(factory, "c")]) == dict.fromkeys("abc")
    assert seen == [{"a", "b", "c"}]
    with factory.write() as conn:
        conn.execute("SELECT count(*) FROM t").fetchone()  # changes nothing: wakes nobody
    assert len(seen) == 1


def test_close_commits_what_was_handed_on_and_refuses_the_writes_still_waiting(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    factory = ConnectionFactory(path, timeout=TIMEOUT)
    with factory.write() as conn:
        conn.execute("CREATE TABLE t (n INTEGER PRIMARY KEY, who TEXT UNIQUE)")
    first = Writer(factory, "a", hold=True)
    waiting = Writer(factory, "b")
    first.start()
    assert first.inside.wait(TIMEOUT)
    waiting.start()
    until(lambda: factory.combine_stats().queued == 1, "b to wait for its turn")
    closer = threading.Thread(target=factory.close)
    closer.start()
    until(lambda: factory.combine_stats().queued == 2, "close() to wait for the turn")
    late = Writer(factory, "c")
    late.start()  # close() began: refused at once
    assert isinstance(late.finish(), QueueManagerClosed)
    first.go.set()
    assert first.finish() is None  # handed on to b, committed for it when b found the store closing
    assert isinstance(waiting.finish(), QueueManagerClosed)
    closer.join(TIMEOUT)
    assert not closer.is_alive()
    assert visible(path) == {"a"}


# -- through a queue manager ---------------------------------------------------------------------


def test_puts_lined_up_share_a_transaction_and_a_message_too_large_fails_alone(tmp_path: Path) -> None:
    with QueueManager(tmp_path / "q.db", name="DEV1") as qm:
        qm.define_queue("Q", ordering="fifo", max_message_bytes=100)
        assert qm.depth("Q") == 0  # the queue's first use in this process writes once: done here
        db = qm._db
        before = db.combine_stats()
        errors: dict[str, BaseException | None] = {}
        holder = Writer(db, "holder", lambda conn: None, hold=True, look=False)
        holder.start()
        assert holder.inside.wait(TIMEOUT)
        putters = []
        for number, data in enumerate((b"one", b"x" * 500, b"two", b"three"), 1):
            def run(data: bytes = data) -> None:
                try:
                    qm.put("Q", Message(data))
                    errors[data.decode()[:5]] = None
                except BaseException as exc:  # asserted on below
                    errors[data.decode()[:5]] = exc
            thread = threading.Thread(target=run)
            thread.start()
            putters.append(thread)
            until(lambda n=number: db.combine_stats().queued == n,
                  "the puts to wait for their turn")  # type: ignore[misc]
        holder.go.set()
        assert holder.finish() is None
        for thread in putters:
            thread.join(TIMEOUT)
            assert not thread.is_alive()
        assert isinstance(errors.pop("xxxxx"), MessageTooLarge)
        assert errors == {"one": None, "two": None, "three": None}
        after = db.combine_stats()
        assert (after.transactions - before.transactions, after.writes - before.writes) == (1, 4)
        assert [m.data for m in qm.get_many("Q", 10)] == [b"one", b"two", b"three"]


# -- the baton alone ---------------------------------------------------------------------------------


def test_a_waiter_whose_wait_ends_leaves_the_line_and_the_turn_goes_to_the_next() -> None:
    baton = Baton()
    assert baton.take(TIMEOUT) is None  # free: this thread has the turn
    outcomes: dict[str, object] = {}

    def wait(who: str, timeout: float) -> None:
        try:
            outcomes[who] = baton.take(timeout)
            baton.release()
        except TimeoutError as exc:
            outcomes[who] = exc

    brief = threading.Thread(target=wait, args=("brief", 0.05))  # gives up while the turn is held
    brief.start()
    brief.join(TIMEOUT)
    assert isinstance(outcomes["brief"], TimeoutError)
    assert baton.stats() == CombineStats(0, 0, 0)  # left the line
    patient = threading.Thread(target=wait, args=("patient", TIMEOUT))
    patient.start()
    until(lambda: baton.queued == 1, "the patient waiter to queue")
    group = Group()
    group.join(kept=False, changed=False, durable=False)
    assert baton.pass_on(group)  # handed on, with the open transaction
    patient.join(TIMEOUT)
    assert outcomes["patient"] is group
    assert baton.take(TIMEOUT) is None  # the patient one let it go: free again
    baton.release()

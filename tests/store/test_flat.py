"""Flat combining (edgeq.store.flat, through ConnectionFactory.run): real threads writing real
SQLite files.

The order is set by the test, never by the machine's speed: a ``write()`` holds the
turn (its body waits on an event) while callers of ``run()`` are started one at a time,
each once the ones before are queued (``combine_stats().queued``); then the holder lets
go, and the first caller, leading, runs every queued body in the holder's transaction.
"""

from __future__ import annotations

import signal
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from edgeq import Message, QueueManager
from edgeq.errors import QueueManagerClosed, StoreError
from edgeq.store.connection import ConnectionFactory
from tests.store import test_combining
from tests.store.test_combining import Writer, assert_lost_whole, insert, refuse_abort, transactions, visible
from tests.store.test_commits import TIMEOUT, until

# test_combining's fixtures: a factory on a fresh file with a table ``t``, and its statements.
factory = test_combining.factory
traced = test_combining.traced


class Runner(threading.Thread):
    """One ``run()`` in a thread of its own: notes the result, what it raised, and
    which thread ran its body."""

    def __init__(self, factory: ConnectionFactory, who: str,
                 body: Callable[[sqlite3.Connection], object] | None = None, *, durable: bool = True) -> None:
        super().__init__(name=who)
        self.factory, self.who, self.durable = factory, who, durable
        self.body = body or insert(who)
        self.ran_on: int | None = None
        self.result: object = None
        self.error: BaseException | None = None

    def run(self) -> None:
        def body(conn: sqlite3.Connection) -> object:
            self.ran_on = threading.get_ident()
            return self.body(conn)

        try:
            self.result = self.factory.run(body, durable=self.durable)
        except BaseException as exc:  # asserted on by the test
            self.error = exc

    def finish(self) -> BaseException | None:
        self.join(TIMEOUT)
        assert not self.is_alive(), f"{self.who} never returned"
        return self.error


def queue_behind_a_holder(factory: ConnectionFactory, runners: list[Runner]) -> Writer:
    """Hold the turn with a ``write()``, start ``runners`` in order, each once the ones
    before are queued; return the holder, still holding."""
    holder = Writer(factory, "holder", lambda conn: None, hold=True, look=False)
    holder.start()
    assert holder.inside.wait(TIMEOUT)
    for number, runner in enumerate(runners, 1):
        runner.start()
        until(lambda n=number: factory.combine_stats().queued == n,
              f"{runner.who} to queue")  # type: ignore[misc]
    return holder


def run_queued(factory: ConnectionFactory, runners: list[Runner]) -> dict[str, BaseException | None]:
    """The outcome of each runner queued behind a holder, and the holder's (``holder``)."""
    holder = queue_behind_a_holder(factory, runners)
    holder.go.set()
    return {"holder": holder.finish()} | {r.who: r.finish() for r in runners}


def interrupted_in_main(factory: ConnectionFactory, who: str, conduct: Callable[[int], None]) -> None:
    """``factory.run(insert(who))`` in the main thread (this test's) while ``conduct``, in a
    thread of its own, is given the main thread's id to send SIGINT to: the run raises
    KeyboardInterrupt."""
    main = threading.main_thread().ident
    assert main is not None and threading.get_ident() == main
    conductor = threading.Thread(target=conduct, args=(main,))
    conductor.start()
    with pytest.raises(KeyboardInterrupt):
        factory.run(insert(who))
    conductor.join(TIMEOUT)
    assert not conductor.is_alive()


# -- one thread ----------------------------------------------------------------------------------


def test_a_lone_run_commits_at_once_in_a_transaction_of_its_own_and_returns_the_result(
    factory: ConnectionFactory, traced: list[str]
) -> None:
    flushes = factory.sync_stats().syncs
    for who in ("a", "b"):
        assert factory.run(
            lambda conn, who=who: conn.execute("INSERT INTO t (who) VALUES (?)", (who,)).lastrowid) \
            == {"a": 1, "b": 2}[who]
        assert who in visible(Path(factory.path))  # committed before run() returned
    assert transactions(traced) == ["BEGIN IMMEDIATE", "COMMIT"] * 2
    assert not any(s.startswith(("SAVEPOINT", "RELEASE")) for s in traced)
    assert factory.sync_stats().syncs - flushes == 2  # each durable run waited for a flush


def test_a_lone_run_that_fails_rolls_back_and_the_next_one_goes_on(
    factory: ConnectionFactory, traced: list[str]
) -> None:
    def fails(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO t (who) VALUES ('lost')")
        raise ZeroDivisionError

    with pytest.raises(ZeroDivisionError):
        factory.run(fails)
    assert transactions(traced) == ["BEGIN IMMEDIATE", "ROLLBACK"]
    factory.run(insert("next"))
    assert visible(Path(factory.path)) == {"next"}


def test_a_run_inside_a_write_is_refused_at_once(factory: ConnectionFactory) -> None:
    with factory.write() as conn:
        conn.execute("INSERT INTO t (who) VALUES ('outer')")
        with pytest.raises(StoreError, match="inside a write transaction already"):
            factory.run(insert("inner"))
    assert visible(Path(factory.path)) == {"outer"}


def test_a_run_that_changes_nothing_waits_for_no_flush(factory: ConnectionFactory) -> None:
    flushes = factory.sync_stats().syncs
    assert factory.run(lambda conn: conn.execute("SELECT count(*) FROM t").fetchone()[0]) == 0
    assert factory.sync_stats().syncs == flushes


# -- queued runs: one thread writes them, in one transaction ---------------------------------------


def test_queued_runs_are_written_by_one_thread_in_one_transaction_and_one_flush(
    factory: ConnectionFactory, traced: list[str]
) -> None:
    before, synced = factory.combine_stats(), factory.sync_stats()
    runners = [Runner(factory, f"r{i}") for i in range(6)]
    assert run_queued(factory, runners) == {"holder": None} | {f"r{i}": None for i in range(6)}
    assert len({r.ran_on for r in runners}) == 1  # one thread ran every body
    assert runners[0].ran_on == runners[0].ident  # the first queued led
    assert transactions(traced) == ["BEGIN IMMEDIATE", "COMMIT"]  # the holder's transaction, handed on
    assert traced.count("SAVEPOINT edgeq_run") == 6 and traced.count("RELEASE edgeq_run") == 6
    after = factory.combine_stats()
    assert (after.transactions - before.transactions, after.writes - before.writes) == (1, 7)
    flushed = factory.sync_stats()
    assert flushed.syncs - synced.syncs == 1
    assert visible(Path(factory.path)) == {f"r{i}" for i in range(6)}


def test_a_failing_body_fails_alone_with_its_own_error(factory: ConnectionFactory, traced: list[str]) -> None:
    def raises(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO t (who) VALUES ('raises')")
        raise ValueError("refused by the caller")

    runners = [Runner(factory, "a"), Runner(factory, "raises", raises), Runner(factory, "dup", insert("a")),
               Runner(factory, "d")]
    outcomes = run_queued(factory, runners)
    assert isinstance(outcomes.pop("raises"), ValueError)
    duplicate = outcomes.pop("dup")
    assert isinstance(duplicate, StoreError) and "UNIQUE" in str(duplicate)  # translated
    assert isinstance(duplicate.__cause__, sqlite3.IntegrityError)
    assert outcomes == {"holder": None, "a": None, "d": None}
    assert visible(Path(factory.path)) == {"a", "d"}
    assert traced.count("ROLLBACK TO edgeq_run") == 2
    assert transactions(traced) == ["BEGIN IMMEDIATE", "COMMIT"]


def test_a_transaction_sqlite_rolls_back_fails_every_kept_write_and_the_rest_go_on(
    factory: ConnectionFactory,
) -> None:
    refuse_abort(factory)
    runners = [Runner(factory, "a"), Runner(factory, "b"), Runner(factory, "abort"), Runner(factory, "d"),
               Runner(factory, "e")]
    outcomes = run_queued(factory, runners)
    assert_lost_whole(factory, outcomes, ("holder", "a", "b"))


def test_a_non_durable_run_among_durable_ones_commits_with_them(factory: ConnectionFactory) -> None:
    synced = factory.sync_stats()
    runners = [Runner(factory, "a"), Runner(factory, "lock", insert("lock"), durable=False),
               Runner(factory, "c")]
    assert run_queued(factory, runners) == {"holder": None, "a": None, "lock": None, "c": None}
    after = factory.sync_stats()
    assert (after.commits - synced.commits, after.syncs - synced.syncs) == (2, 1)  # two waited, one flush
    assert visible(Path(factory.path)) == {"a", "lock", "c"}


def test_runs_queued_when_the_factory_closes_fail_with_closed(tmp_path: Path) -> None:
    factory = ConnectionFactory(tmp_path / "c.db", timeout=TIMEOUT)
    with factory.write() as conn:
        conn.execute("CREATE TABLE t (n INTEGER PRIMARY KEY, who TEXT UNIQUE)")
    runners = [Runner(factory, "a"), Runner(factory, "b")]
    holder = queue_behind_a_holder(factory, runners)
    closer = threading.Thread(target=factory.close)
    closer.start()
    until(lambda: factory.closed, "close() to begin")
    holder.go.set()
    assert holder.finish() is None
    closer.join(TIMEOUT)
    assert not closer.is_alive()
    outcomes = {r.who: r.finish() for r in runners}
    # Handed the holder's transaction before close() took the turn, or refused after it:
    # never lost silently, never half-done.
    seen = visible(tmp_path / "c.db")
    for who, error in outcomes.items():
        assert (error is None) == (who in seen), (who, error)
        assert error is None or isinstance(error, QueueManagerClosed)
    with pytest.raises(QueueManagerClosed):
        factory.run(insert("late"))


def test_an_interrupted_caller_leaves_the_queue_and_the_others_are_written(
    factory: ConnectionFactory
) -> None:
    """Ctrl-C reaching a caller (the main thread) that waits behind a lead: its body never
    runs, and the lead still passes on (nobody waits for the interrupted thread)."""
    first = Runner(factory, "first")
    holder = queue_behind_a_holder(factory, [first])

    def interrupt_once_queued(main: int) -> None:
        until(lambda: factory.combine_stats().queued == 2, "the main thread to queue")
        signal.pthread_kill(main, signal.SIGINT)

    interrupted_in_main(factory, "interrupted", interrupt_once_queued)
    after = Runner(factory, "after")
    after.start()
    until(lambda: factory.combine_stats().queued == 2, "the next caller to queue")
    holder.go.set()
    assert (holder.finish(), first.finish(), after.finish()) == (None, None, None)
    assert visible(Path(factory.path)) == {"first", "after"}


def test_a_lead_interrupted_while_running_another_callers_body_gives_that_caller_an_error_not_the_interrupt(
    factory: ConnectionFactory,
) -> None:
    """Ctrl-C reaching the main thread while, leading, it runs another thread's body: that
    body is undone and its caller gets a StoreError saying so (its own thread was not
    interrupted); the main thread gets the KeyboardInterrupt; the store goes on."""
    holder = Writer(factory, "holder", lambda conn: None, hold=True, look=False)
    holder.start()
    assert holder.inside.wait(TIMEOUT)
    running, never = threading.Event(), threading.Event()

    def blocks(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO t (who) VALUES ('other')")
        running.set()
        never.wait(TIMEOUT)  # interrupted: the main thread runs it

    other = Runner(factory, "other", blocks)

    def conduct(main: int) -> None:
        until(lambda: factory.combine_stats().queued == 1, "the main thread to lead, waiting for the turn")
        other.start()
        until(lambda: factory.combine_stats().queued == 2, "the other caller to queue")
        holder.go.set()
        assert running.wait(TIMEOUT)
        signal.pthread_kill(main, signal.SIGINT)

    interrupted_in_main(factory, "main", conduct)
    error = other.finish()
    assert isinstance(error, StoreError) and "interrupted (KeyboardInterrupt)" in str(error), error
    assert other.ran_on == threading.main_thread().ident
    assert holder.finish() is None
    assert "other" not in visible(Path(factory.path))  # undone
    factory.run(insert("after"))
    assert "after" in visible(Path(factory.path))


# -- through a queue manager ---------------------------------------------------------------------


def test_concurrent_puts_and_assured_gets_are_each_delivered_once(tmp_path: Path) -> None:
    """Eight producers and eight consumers (assured get, then confirm) at once: every
    message put is got and confirmed exactly once, and the queue ends empty."""
    producers, consumers, each = 8, 8, 25
    total = producers * each
    with QueueManager(tmp_path / "q.db", name="DEV1") as qm:
        qm.define_queue("Q", ordering="fifo")
        got: list[bytes] = []
        lock = threading.Lock()
        errors: list[BaseException] = []

        def produce(p: int) -> None:
            for i in range(each):
                qm.put("Q", Message(b"%d:%03d" % (p, i)))

        def consume(c: int) -> None:
            while True:
                with lock:
                    if len(got) >= total:
                        return
                # A get waits for a put (woken by its commit); the bound only ends the last waits.
                message = qm.get("Q", confirm_id=1000 + c, wait=0.2)
                if message is None:
                    continue
                assert message.uid is not None
                qm.confirm_get("Q", message.uid)
                with lock:
                    got.append(message.data)

        def guarded(target: Callable[[int], None], n: int) -> threading.Thread:
            def run() -> None:
                try:
                    target(n)
                except BaseException as exc:  # asserted on below
                    errors.append(exc)
            return threading.Thread(target=run)

        threads = ([guarded(produce, p) for p in range(producers)]
                   + [guarded(consume, c) for c in range(consumers)])
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(TIMEOUT)
            assert not thread.is_alive()
        assert errors == []
        assert sorted(got) == sorted(b"%d:%03d" % (p, i) for p in range(producers) for i in range(each))
        assert qm.depth("Q") == 0
        assert qm._db.combine_stats().transactions < qm._db.combine_stats().writes  # they were combined

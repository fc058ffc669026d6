"""Waiting gets (edgeq.consume.waiting): ``get(wait=...)`` on real SQLite files, with real threads
and real processes. Every wait is bounded; a test waits for another thread's state
through ``until`` (a bounded check of a condition), never a sleep.

A get that should be woken is given a long wait (``LONG``) and must return well
before it (``PROMPT``): returning at all proves the wake-up, and how soon shows it
was not a slow poll. The latency figures themselves are the benchmarks' (wakeup_*).
"""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from edgeq import Int32, ManualClock, Message, QueueManager
from edgeq.consume.waiting import POLL_MAX_S, Waker, check_wait
from edgeq.errors import InvalidArgument, InvalidType, QueueManagerClosed
from edgeq.store.connection import ConnectionFactory
from tests.conftest import Recorder
from tests.waits import LONG, until

PROMPT = 2.0  # how soon the woken get must have returned (generous for a loaded CI runner)


class Getter:
    """A get running in its own thread: its result (or error) and when it returned."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self.result: Any = None
        self.error: BaseException | None = None
        self.returned_at = 0.0
        self.thread = threading.Thread(target=self._run, args=(call,), daemon=True)
        self.thread.start()

    def _run(self, call: Callable[[], Any]) -> None:
        try:
            self.result = call()
        except BaseException as exc:
            self.error = exc
        self.returned_at = time.monotonic()

    def join(self) -> Any:
        self.thread.join(LONG + 5)
        assert not self.thread.is_alive(), "the get never returned"
        if self.error is not None:
            raise self.error
        return self.result


@pytest.fixture
def qm(db_path: Path) -> Iterator[QueueManager]:
    with QueueManager(db_path, name="DEV1") as manager:
        manager.define_queue("Q")
        yield manager


def waiting(qm: QueueManager, n: int = 1) -> None:
    until(lambda: qm._waker.waiting >= n, f"{n} waiting get(s)")


# -- the argument ------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [-1, -0.001, math.nan, timedelta(seconds=-1)])
def test_a_negative_or_nan_wait_is_refused(qm: QueueManager, bad: object) -> None:
    with pytest.raises(InvalidArgument, match="non-negative number of seconds"):
        qm.get("Q", wait=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [True, "30s", [1], object()])
def test_a_wait_of_the_wrong_type_is_refused(qm: QueueManager, bad: object) -> None:
    with pytest.raises(InvalidType, match="wait must be seconds"):
        qm.get("Q", wait=bad)  # type: ignore[arg-type]


def test_wait_forms() -> None:
    assert check_wait(None) is None
    assert check_wait(0) == 0.0
    assert check_wait(timedelta(minutes=2)) == 120.0
    assert check_wait(math.inf) == math.inf
    assert check_wait(10**400) == math.inf  # longer than any float: for ever


def test_the_wait_is_checked_before_anything_is_taken(qm: QueueManager) -> None:
    qm.put("Q", Message(b"x"))
    with pytest.raises(InvalidArgument):
        qm.get("Q", wait=-5)
    assert qm.depth("Q") == 1


# -- waiting on an empty queue -------------------------------------------------------------------


def test_a_wait_that_ends_returns_none_after_the_wait(qm: QueueManager) -> None:
    start = time.monotonic()
    assert qm.get("Q", wait=0.2) is None
    assert qm.get_many("Q", 5, wait=timedelta(milliseconds=100)) == []
    assert time.monotonic() - start >= 0.3


def test_wait_zero_and_none_try_once(qm: QueueManager) -> None:
    qm.activate("Q")  # the first reference activates the queue: a write of its own
    seen: list[str] = []
    with qm.tracer(seen.append):
        assert qm.get("Q", wait=0) is None
        assert qm.get("Q") is None
    assert sum(s == "BEGIN IMMEDIATE" for s in seen) == 2
    assert qm._waker.waiting == 0


def test_an_available_message_is_returned_at_once(qm: QueueManager) -> None:
    uid = qm.put("Q", Message(b"x"))
    start = time.monotonic()
    got = qm.get("Q", wait=LONG)
    assert got is not None and got.uid == uid
    assert time.monotonic() - start < PROMPT


def test_a_waiting_get_does_not_spin(qm: QueueManager) -> None:
    # A waiting get tries once, then sleeps: a tight loop would run thousands of gets in
    # a second. What does run meanwhile is the watcher's PRAGMA data_version, at most
    # every POLL_MAX_S once nothing changes (faster only for its first few polls).
    qm.put("Q", Message(b"not for you", fields={"to": "b"}))
    seen: list[str] = []
    with qm.tracer(seen.append):
        assert qm.get("Q", wait=1.0, filter={"to": "a"}) is None
    gets = sum(s == "BEGIN IMMEDIATE" for s in seen)
    polls = sum(s == "PRAGMA data_version" for s in seen)
    assert gets <= 3, gets  # the first try, and one after the watcher's first read
    assert polls <= 1.0 / POLL_MAX_S + 10, polls
    assert qm.depth("Q") == 1


def test_a_waiting_process_uses_almost_no_cpu(qm: QueueManager) -> None:
    # The benchmark (idle_wait) measures 10 s against the 1% floor; this is the coarse
    # check that nothing spins: a tight loop would use the whole second.
    cpu = time.process_time()
    assert qm.get("Q", wait=1.0) is None
    assert time.process_time() - cpu < 0.1


# -- wake-ups ----------------------------------------------------------------------------------


def test_a_put_from_another_thread_wakes_a_waiting_get(qm: QueueManager) -> None:
    getter = Getter(lambda: qm.get("Q", wait=LONG))
    waiting(qm)
    uid = qm.put("Q", Message(b"x"))
    put_at = time.monotonic()
    got = getter.join()
    assert got is not None and got.uid == uid
    assert getter.returned_at - put_at < PROMPT


def test_this_processs_commits_wake_without_the_watcher(qm: QueueManager) -> None:
    # The watcher slowed to one poll a LONG wait: only the commit hook can wake the get.
    qm._waker._poll_min = qm._waker._poll_max = LONG * 2
    for i in range(3):
        getter = Getter(lambda: qm.get("Q", wait=LONG))
        waiting(qm)
        uid = qm.put("Q", Message(b"%d" % i))
        put_at = time.monotonic()
        got = getter.join()
        assert got is not None and got.uid == uid
        assert getter.returned_at - put_at < PROMPT


@pytest.mark.parametrize("verb", ["get_many", "assured", "filter"])
def test_every_kind_of_get_waits(qm: QueueManager, verb: str) -> None:
    calls: dict[str, Callable[[], Any]] = {
        "get_many": lambda: qm.get_many("Q", 10, wait=LONG),
        "assured": lambda: qm.get("Q", confirm_id=7, wait=LONG),
        "filter": lambda: qm.get("Q", filter={"to": "a"}, wait=LONG),
    }
    getter = Getter(calls[verb])
    waiting(qm)
    if verb == "filter":
        qm.put("Q", Message(b"not this", fields={"to": "b"}))  # wakes it, and it sleeps on
    uid = qm.put("Q", Message(b"this", fields={"to": "a"}))
    got = getter.join()
    first = got[0] if isinstance(got, list) else got
    assert first is not None and first.uid == uid and first.data == b"this"
    if verb == "get_many":
        assert len(got) == 1  # returns with what there is, not when ten have come
    if verb == "assured":
        assert qm.depth("Q") == 1  # locked, not gone
        qm.confirm_get("Q", uid)
        assert qm.depth("Q") == 0
    if verb == "filter":
        assert [m.data for m in qm.browse("Q")] == [b"not this"]


@pytest.mark.parametrize("how", ["confirm_put", "undo"])
def test_a_message_made_visible_wakes_a_waiting_get(qm: QueueManager, how: str) -> None:
    if how == "confirm_put":
        uid = qm.put("Q", Message(b"x"), confirm_id=1)  # locked: invisible until confirmed
    else:
        uid = qm.put("Q", Message(b"x"))
        assert qm.get("Q", confirm_id=2) is not None  # locked by another getter
    getter = Getter(lambda: qm.get("Q", wait=LONG))
    waiting(qm)
    if how == "confirm_put":
        qm.confirm_put("Q", uid)
    else:
        qm.undo("Q", 2)
    got = getter.join()
    assert got is not None and got.uid == uid


def test_ping_pong_loses_no_wake_up(db_path: Path) -> None:
    # Each put races with the other side going back to sleep: a lost wake-up would
    # leave a get waiting out its LONG wait and fail the round.
    rounds = 200
    with QueueManager(db_path, name="DEV1") as qm:
        qm.define_queue("PING")
        qm.define_queue("PONG")

        def echo() -> int:
            for _ in range(rounds):
                m = qm.get("PING", wait=LONG)
                if m is None:
                    return 1
                qm.put("PONG", Message(m.data))
            return 0

        echoer = Getter(echo)
        start = time.monotonic()
        for i in range(rounds):
            qm.put("PING", Message(b"%d" % i))
            back = qm.get("PONG", wait=LONG)
            assert back is not None and back.data == b"%d" % i
        assert echoer.join() == 0
        assert time.monotonic() - start < LONG


def test_many_waiters_one_put_wakes_exactly_one(qm: QueueManager) -> None:
    getters = [Getter(lambda: qm.get("Q", wait=LONG)) for _ in range(6)]
    waiting(qm, 6)
    first = qm.put("Q", Message(b"first"))
    until(lambda: sum(not g.thread.is_alive() for g in getters) == 1, "one getter to return")
    done = [g for g in getters if not g.thread.is_alive()]
    assert done[0].join().uid == first
    # The others found nothing and wait on: one more put each, and each gets its own.
    waiting(qm, 5)
    assert qm.depth("Q") == 0
    rest = {qm.put("Q", Message(b"%d" % i)) for i in range(5)}
    got = [g.join() for g in getters if g is not done[0]]
    assert all(m is not None for m in got)
    assert {m.uid for m in got} == rest  # nobody got a message twice, nobody none
    assert qm.depth("Q") == 0


def test_closing_wakes_waiting_gets_with_queue_manager_closed(db_path: Path) -> None:
    qm = QueueManager(db_path, name="DEV1")
    qm.define_queue("Q")
    getters = [Getter(lambda: qm.get("Q", wait=LONG)) for _ in range(3)]
    waiting(qm, 3)
    closed_at = time.monotonic()
    qm.close()
    for getter in getters:
        with pytest.raises(QueueManagerClosed):
            getter.join()
        assert getter.returned_at - closed_at < PROMPT
    with pytest.raises(QueueManagerClosed):
        qm.get("Q", wait=1)


# -- expiry at every check point while waiting -----------------------------------------------


def test_a_message_that_expires_while_a_get_waits_is_discarded_never_returned(
    db_path: Path, clock: ManualClock
) -> None:
    with QueueManager(db_path, name="DEV1", clock=clock) as qm:
        qm.define_queue("Q")
        recorder = Recorder()
        qm.add_rule("Q", recorder)
        doomed = qm.put("Q", Message(b"doomed", expiry=Int32(1_000)))
        assert qm.get("Q", confirm_id=5) is not None  # another getter holds it
        getter = Getter(lambda: qm.get("Q", wait=LONG))
        waiting(qm)
        clock.advance(2_000)  # it expires while locked, while the get waits
        qm.undo("Q", 5)  # visible again: the waiting get is woken and meets it expired
        until(lambda: recorder.expired() == [(b"doomed", "get")], "the expired message to be discarded")
        assert getter.thread.is_alive()  # it did not return the expired message: it waits on
        live = qm.put("Q", Message(b"live"))
        got = getter.join()
        assert got is not None and got.uid == live and got.uid != doomed
        assert qm.depth("Q") == 0


# -- other connections and processes ------------------------------------------------------------


def test_a_put_by_another_queue_manager_on_the_file_wakes_a_waiting_get(db_path: Path) -> None:
    with QueueManager(db_path, name="DEV1") as waiter, QueueManager(db_path) as putter:
        waiter.define_queue("Q")
        getter = Getter(lambda: waiter.get("Q", wait=LONG))
        waiting(waiter)
        uid = putter.put("Q", Message(b"x"))  # another connection: only the watcher sees it
        put_at = time.monotonic()
        got = getter.join()
        assert got is not None and got.uid == uid
        assert getter.returned_at - put_at < PROMPT


class Racer:
    """A get whose first attempt has another queue manager put ``data`` right after it looked."""

    def __init__(self, qm: QueueManager, other: QueueManager, data: bytes) -> None:
        self.qm, self.other, self.data, self.attempts = qm, other, data, 0

    def __call__(self) -> list[Message]:
        got = self.qm.get_many("Q", 1)
        if self.attempts == 0:
            self.other.put("Q", Message(self.data))
        self.attempts += 1
        return got


def test_a_commit_made_before_the_watcher_starts_is_not_missed(db_path: Path) -> None:
    # Another connection commits right after the get looked, before the watcher (started
    # by this first wait) reads data_version: the watcher never sees that value change,
    # so only its "I just started: try again" wakes the get.
    with QueueManager(db_path, name="DEV1") as qm, QueueManager(db_path) as other:
        qm.define_queue("Q")
        for data in (b"first wait", b"later wait"):
            start = time.monotonic()
            got = qm._waker.until(Racer(qm, other, data), LONG)
            assert [m.data for m in got] == [data]
            assert time.monotonic() - start < PROMPT


_PUTTER = textwrap.dedent("""
    import sys, time
    from edgeq import Message, QueueManager
    with QueueManager(sys.argv[1]) as qm:
        print("ready", flush=True)
        for line in sys.stdin:
            uid = qm.put("Q", Message(line.strip().encode()))
            print(f"put {uid} {time.monotonic()}", flush=True)
""")


def test_a_put_by_another_process_wakes_a_waiting_get(qm: QueueManager, db_path: Path) -> None:
    with subprocess.Popen([sys.executable, "-c", _PUTTER, str(db_path)], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True) as proc:
        assert proc.stdout is not None and proc.stdin is not None
        assert proc.stdout.readline().strip() == "ready"
        for i in range(5):
            getter = Getter(lambda: qm.get("Q", wait=LONG))
            waiting(qm)
            proc.stdin.write(f"m{i}\n")
            proc.stdin.flush()
            _, uid, put_at = proc.stdout.readline().split()
            got = getter.join()
            assert got is not None and str(got.uid) == uid and got.data == f"m{i}".encode()
            # time.monotonic is the system's monotonic clock: comparable across processes
            assert getter.returned_at - float(put_at) < PROMPT
        proc.stdin.close()
        proc.wait(timeout=LONG)
    assert proc.returncode == 0


_ECHO = textwrap.dedent("""
    import sys
    from edgeq import Message, QueueManager
    with QueueManager(sys.argv[1]) as qm:
        for _ in range(int(sys.argv[2])):
            m = qm.get("PING", wait=30)
            if m is None:
                sys.exit(1)
            qm.put("PONG", Message(m.data))
""")


def test_ping_pong_between_processes_loses_no_wake_up(db_path: Path) -> None:
    rounds = 20
    with QueueManager(db_path, name="DEV1") as qm:
        qm.define_queue("PING")
        qm.define_queue("PONG")
        proc = subprocess.Popen([sys.executable, "-c", _ECHO, str(db_path), str(rounds)])
        try:
            for i in range(rounds):
                qm.put("PING", Message(b"%d" % i))
                back = qm.get("PONG", wait=LONG)
                assert back is not None and back.data == b"%d" % i
        finally:
            proc.wait(timeout=LONG)
        assert proc.returncode == 0


# -- the waker itself ----------------------------------------------------------------------------


def test_until_stops_when_asked_and_poked(db_path: Path) -> None:
    with QueueManager(db_path, name="DEV1") as qm:
        waker: Waker = qm._waker
        stop = threading.Event()
        getter = Getter(lambda: waker.until(lambda: [], LONG, stop=stop.is_set))
        waiting(qm)
        stop.set()
        waker.poke()
        poked_at = time.monotonic()
        assert getter.join() == []
        assert getter.returned_at - poked_at < PROMPT


def test_a_failed_watcher_leaves_waiting_gets_polling(
    db_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A watcher whose connection fails says so, and waiters fall back to trying every
    # POLL_MAX_S: slower, but a put by another connection is still found. (The waker
    # here watches through a factory that is closed, so its watcher fails at once.)
    dead = ConnectionFactory(db_path)
    dead.close()
    waker = Waker(dead)
    with QueueManager(db_path, name="DEV1") as qm, QueueManager(db_path) as other:
        qm.define_queue("Q")
        getter = Getter(lambda: waker.until(lambda: qm.get_many("Q", 1), LONG))
        until(lambda: waker._watch_failed, "the watcher to fail")
        uid = other.put("Q", Message(b"x"))
        put_at = time.monotonic()
        got = getter.join()
        assert [m.uid for m in got] == [uid]
        assert getter.returned_at - put_at < PROMPT
    waker.close()
    assert "waiting gets poll every" in caplog.text

"""Concurrency: threads sharing one QueueManager, and processes sharing one file.

Every message is delivered to exactly one getter and none is lost; uids are
unique, and within a queue manager their stamps increase in commit order (also
across a restart with the clock stepped back). Normal contention never surfaces
``StoreBusy``: writers queue on SQLite's busy handler behind ``BEGIN IMMEDIATE``.
"""

from __future__ import annotations

import random
import sqlite3
import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from itertools import pairwise
from pathlib import Path

import pytest

from edgeq import ManualClock, Message, MessageUID, QueueManager
from tests.conftest import T0
from tests.workers import Child, check_payload, make_payload, payload_key

THREADS = 6


def _fill(path: Path, count: int, *, ordering: str = "priority", priorities: bool = True) -> set[str]:
    """Create the store with queue Q holding ``count`` checksummed messages; return their keys."""
    rng = random.Random(count)
    with QueueManager(path, name="DEV1") as qm:
        qm.define_queue("Q", ordering=ordering)  # type: ignore[arg-type]
        batch = [
            Message(make_payload("m", i, rng), priority=rng.randint(0, 9) if priorities else None)
            for i in range(count)
        ]
        for start in range(0, count, 500):
            qm.put_many("Q", batch[start : start + 500])
    return {f"m:{i}" for i in range(count)}


def _run_threads(count: int, target: Callable[[int], list[str]]) -> list[list[str]]:
    """Run ``target(index)`` in ``count`` threads released together; their results."""
    barrier = threading.Barrier(count)

    def start(index: int) -> list[str]:
        barrier.wait(timeout=60)
        return target(index)

    with ThreadPoolExecutor(count) as pool:
        futures = [pool.submit(start, i) for i in range(count)]
        return [f.result(timeout=300) for f in futures]


def _assert_exactly_once(per_getter: list[list[str]], expected: set[str]) -> None:
    counts = Counter(key for got in per_getter for key in got)
    duplicates = sorted(key for key, n in counts.items() if n > 1)
    assert not duplicates, f"delivered more than once: {duplicates[:10]}"
    lost = expected - counts.keys()
    assert not lost, f"never delivered: {sorted(lost)[:10]}"
    assert counts.keys() == expected


# -- threads --------------------------------------------------------------------------


@pytest.mark.parametrize("assured", [False, True], ids=["plain", "assured"])
def test_threads_drain_one_queue_each_message_once(tmp_path: Path, assured: bool) -> None:
    path = tmp_path / "device.db"
    expected = _fill(path, 600)
    with QueueManager(path, name="DEV1") as qm:

        def drain(index: int) -> list[str]:
            got: list[str] = []
            confirm_id = index * 1_000_000 + 1
            while True:
                msg = qm.get("Q", confirm_id=confirm_id if assured else None)
                if msg is None:
                    return got
                assert check_payload(msg.data)
                if assured:
                    assert msg.backout_count == 0
                    qm.confirm_get("Q", msg.uid)  # type: ignore[arg-type]
                    confirm_id += 1
                got.append(payload_key(msg.data))

        per_thread = _run_threads(THREADS, drain)
        _assert_exactly_once(per_thread, expected)
        assert qm.depth("Q") == 0
        assert qm.browse("Q") == []


def test_threads_concurrent_putters_get_unique_increasing_uids(qm: QueueManager) -> None:
    qm.define_queue("Q", ordering="fifo")
    per_thread_count = 150

    def produce(index: int) -> list[str]:
        uids: list[MessageUID] = []
        for i in range(per_thread_count):
            uids.append(qm.put("Q", Message(f"t{index}:{i}".encode())))
        stamps = [u.stamp for u in uids]
        assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps), (
            "one thread's stamps must increase")
        return [str(u) for u in uids]

    per_thread = _run_threads(THREADS, produce)
    all_uids = [u for uids in per_thread for u in uids]
    assert len(set(all_uids)) == len(all_uids) == THREADS * per_thread_count
    # A FIFO queue is in arrival order, which is uid order within one queue manager.
    browsed = qm.browse("Q")
    assert [str(m.uid) for m in browsed] == sorted(all_uids, key=lambda u: MessageUID.parse(u).stamp)
    assert qm.depth("Q") == THREADS * per_thread_count


def test_threads_producers_and_consumers_at_once(tmp_path: Path) -> None:
    path = tmp_path / "device.db"
    producers, consumers, per_producer = 3, 3, 200
    with QueueManager(path, name="DEV1") as qm:
        qm.define_queue("Q")
        done = threading.Event()
        finished: list[int] = []
        lock = threading.Lock()

        def work(index: int) -> list[str]:
            rng = random.Random(index)
            if index < producers:
                for i in range(per_producer):
                    qm.put("Q", Message(make_payload(f"p{index}", i, rng), priority=rng.randint(0, 9)))
                with lock:
                    finished.append(index)
                    if len(finished) == producers:
                        done.set()
                return []
            got: list[str] = []
            confirm_id = index * 1_000_000 + 1
            while True:
                assured = rng.random() < 0.5
                msg = qm.get("Q", confirm_id=confirm_id if assured else None)
                if msg is None:
                    if done.is_set() and qm.depth("Q") == 0:
                        return got
                    continue
                if assured:
                    qm.confirm_get("Q", msg.uid)  # type: ignore[arg-type]
                    confirm_id += 1
                got.append(payload_key(msg.data))

        per_thread = _run_threads(producers + consumers, work)
        expected = {f"p{p}:{i}" for p in range(producers) for i in range(per_producer)}
        _assert_exactly_once(per_thread, expected)
        assert qm.depth("Q") == 0


# -- processes ---------------------------------------------------------------------------


def _start_all(children: list[Child]) -> None:
    """Wait until every worker has opened the store, then release them together."""
    for child in children:
        child.expect("ready")
    for child in children:
        child.send("go")


def _run_all(children: list[Child]) -> list[list[list[str]]]:
    """Start the workers together, collect every report, and close them whatever happens."""
    try:
        _start_all(children)
        return [_finish(child) for child in children]
    finally:
        for child in children:
            child.close()


def _finish(child: Child) -> list[list[str]]:
    """The worker's report lines (split), after checking it ended cleanly."""
    lines = child.rest()
    code = child.wait()
    assert "busy" not in lines, f"worker {child.pid} hit StoreBusy; stderr:\n{child.stderr}"
    assert code == 0 and lines and lines[-1] == "done", f"worker {child.pid} failed ({code}):\n{child.stderr}"
    return [line.split() for line in lines[:-1]]


@pytest.mark.parametrize("assured", [False, True], ids=["plain", "assured"])
def test_four_consumer_processes_drain_one_queue_once(tmp_path: Path, assured: bool) -> None:
    path = tmp_path / "device.db"
    expected = _fill(path, 2000)
    options = ["--path", str(path), "--wait"] + (["--assured"] if assured else [])
    children = [Child("get", *options, "--confirm-base", str(1 + n * 1_000_000)) for n in range(4)]
    reports = _run_all(children)
    per_child: list[list[str]] = []
    for lines in reports:
        assert lines[-1] == ["empty"]
        if assured:
            locked = [line for line in lines if line[0] == "locked"]
            confirmed = [line[1] for line in lines if line[0] == "confirmed"]
            assert [line[1] for line in locked] == confirmed
            per_child.append([line[3] for line in locked])
        else:
            per_child.append([line[2] for line in lines if line[0] == "got"])
    _assert_exactly_once(per_child, expected)
    with QueueManager(path) as qm:
        assert qm.depth("Q") == 0


def test_producer_processes_unique_uids_increasing_in_commit_order(tmp_path: Path) -> None:
    path = tmp_path / "device.db"
    with QueueManager(path, name="DEV1") as qm:
        qm.define_queue("Q", ordering="fifo")
    count = 300
    children = [
        Child("put", "--path", str(path), "--wait", "--tag", f"p{n}", "--count", str(count), "--seed", str(n))
        for n in range(4)
    ]
    reports = _run_all(children)
    all_stamps: list[int] = []
    for lines in reports:
        assert len(lines) == count and all(line[0] == "put" for line in lines)
        uids = [MessageUID.parse(line[1]) for line in lines]
        assert {u.qmgr for u in uids} == {"DEV1"} and len({u.origin for u in uids}) == 1
        stamps = [u.stamp for u in uids]
        assert all(a < b for a, b in pairwise(stamps)), "a process's puts must increase"
        all_stamps += stamps
    assert len(set(all_stamps)) == len(all_stamps) == 4 * count

    # Commit order: puts are serialised by BEGIN IMMEDIATE and only insert, so
    # rowid order is commit order; stamps must increase along it.
    conn = sqlite3.connect(path)
    try:
        in_commit_order = [row[0] for row in conn.execute("SELECT stamp FROM messages ORDER BY id")]
    finally:
        conn.close()
    assert len(in_commit_order) == 4 * count
    assert all(a < b for a, b in pairwise(in_commit_order))
    with QueueManager(path) as qm:
        browsed = qm.browse("Q")
    assert [m.uid.stamp for m in browsed] == in_commit_order  # type: ignore[union-attr]
    assert all(check_payload(m.data) for m in browsed)


def test_uids_increase_across_restart_when_clock_steps_back(db_path: Path) -> None:
    clock = ManualClock(T0)
    with QueueManager(db_path, name="DEV1", clock=clock) as qm:
        qm.define_queue("Q", ordering="fifo")
        before = [qm.put("Q", Message(b"before%d" % i)) for i in range(5)]
    earlier = ManualClock(T0 - 3_600_000)  # the device's clock was set back an hour
    with QueueManager(db_path, name="DEV1", clock=earlier) as qm:
        after = [qm.put("Q", Message(b"after%d" % i)) for i in range(5)]
        earlier.set(T0 - 7_200_000)  # and back again, while open
        after += qm.put_many("Q", [Message(b"later%d" % i) for i in range(3)])
        stamps = [u.stamp for u in before + after]
        assert all(a < b for a, b in pairwise(stamps)), stamps
        # Arrival order follows the stamps: the FIFO queue keeps put order.
        assert [m.uid for m in qm.browse("Q")] == before + after
    # ...and a third opening with a clock far ahead then back still never repeats.
    ahead = ManualClock(T0 + 10_000)
    with QueueManager(db_path, name="DEV1", clock=ahead) as qm:
        high = qm.put("Q", Message(b"ahead"))
        ahead.set(T0)
        low = qm.put("Q", Message(b"back"))
    assert stamps[-1] < high.stamp < low.stamp


@pytest.mark.parametrize("assured", [False, True], ids=["plain", "assured"])
def test_two_processes_hammering_never_see_store_busy(tmp_path: Path, assured: bool) -> None:
    path = tmp_path / "device.db"
    with QueueManager(path, name="DEV1") as qm:
        qm.define_queue("Q")
    count = 400
    extra = ["--assured"] if assured else []
    children = [
        Child(
            "hammer", "--path", str(path), "--wait", "--tag", f"h{n}", "--count", str(count),
            "--seed", str(n), "--confirm-base", str(1 + n * 1_000_000), *extra,
        )
        for n in range(2)
    ]
    reports = _run_all(children)
    put = [line[2] for lines in reports for line in lines if line[0] == "put"]
    got_index = 3 if assured else 2
    got = [line[got_index] for lines in reports for line in lines
           if line[0] == ("locked" if assured else "got")]
    assert len(put) == 2 * count and len(set(put)) == len(put)
    assert len(set(got)) == len(got), "a message was delivered twice"
    with QueueManager(path) as qm:
        left = [payload_key(m.data) for m in qm.browse("Q")]
        assert qm.depth("Q") == len(left)
    assert not set(left) & set(got)
    assert sorted(left + got) == sorted(put), "every put is either got once or still queued"


def test_processes_and_threads_contend_on_one_file(tmp_path: Path) -> None:
    """Two hammering processes plus this process's threads on the same file."""
    path = tmp_path / "device.db"
    with QueueManager(path, name="DEV1") as qm:
        qm.define_queue("Q")
    children = [
        Child("hammer", "--path", str(path), "--wait", "--tag", f"h{n}", "--count", "200", "--seed", str(n))
        for n in range(2)
    ]
    try:
        with QueueManager(path) as qm:
            _start_all(children)

            def local(index: int) -> list[str]:
                got: list[str] = []
                rng = random.Random(100 + index)
                for i in range(100):
                    qm.put("Q", Message(make_payload(f"t{index}", i, rng)))
                    msg = qm.get("Q")
                    if msg is not None:
                        got.append(payload_key(msg.data))
                return got

            local_got = _run_threads(3, local)
            reports = [_finish(child) for child in children]
            left = [payload_key(m.data) for m in qm.browse("Q")]
            assert qm.depth("Q") == len(left)
    finally:
        for child in children:
            child.close()
    child_got = [[line[2] for line in lines if line[0] == "got"] for lines in reports]
    put = {line[2] for lines in reports for line in lines if line[0] == "put"}
    put |= {f"t{t}:{i}" for t in range(3) for i in range(100)}
    _assert_exactly_once([*local_got, *child_got, left], put)

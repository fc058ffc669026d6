"""Shared by the thread-scaling cases (``put_threads``, ``get_confirm_threads``): one
process, N threads, each library used the way it is meant to be shared by threads.

- edgeq: one ``QueueManager`` for every thread (it opens a connection per thread; its
  durable commits share flushes of the WAL, group commit).
- persist-queue: one ``SQLiteAckQueue(path, multithreading=True)`` for every thread
  (its two connections, serialised by its own locks).
- litequeue: one ``LiteQueue`` per thread, so one connection per thread.
- raw sqlite3: one connection per thread, one row per transaction.

Every library at WAL + ``synchronous=FULL`` as in the other cases. The child measures
the disk's flush latency on the same directory first: the ratios depend on it.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.cases.common import describe, open_adapter, run_for_libs
from benchmarks.machine import fsync_probe
from benchmarks.peers.base import QueueAdapter
from benchmarks.peers.litequeue_q import LiteQueueAdapter
from benchmarks.peers.persistqueue_q import AckQueueAdapter
from benchmarks.peers.raw_sqlite import RawSqliteAdapter
from benchmarks.results import Result
from benchmarks.runner import Context
from benchmarks.timing import cpu_per_op, summarize

__all__ = ["LIBS", "Pool", "add_scaling", "run_thread_counts", "run_threads"]

LIBS = ["edgeq", "pq-ack", "litequeue", "raw-sqlite"]


class _SharedAckQueue(AckQueueAdapter):
    """``SQLiteAckQueue`` opened for use from many threads."""

    def _open(self, path: str) -> Any:
        from persistqueue import SQLiteAckQueue

        return SQLiteAckQueue(path, multithreading=True)


class _LiteQueuePerThread(LiteQueueAdapter):
    """A ``LiteQueue`` of a thread's own, with the busy timeout raw sqlite3 has here (30 s).

    litequeue leaves sqlite3's default of 5 s, and its threads then fail with "database
    is locked": SQLite's busy handler sleeps up to 100 ms between tries while the other
    connections keep taking the lock, so a thread can wait longer than that.
    """

    def __init__(self, directory: Path, *, now_ms: int | None = None) -> None:
        QueueAdapter.__init__(self, directory, now_ms=now_ms)
        from litequeue import LiteQueue

        directory.mkdir(parents=True, exist_ok=True)
        self.q = LiteQueue(str(directory / "litequeue.db"), timeout=30.0)
        self.q.conn.execute("PRAGMA synchronous=FULL")


#: Libraries whose threads each open their own adapter (their objects are not shared).
_PER_THREAD: dict[str, type[QueueAdapter]] = {"litequeue": _LiteQueuePerThread,
                                              "raw-sqlite": RawSqliteAdapter}


class Pool:
    """The adapters the threads of one measurement use: one shared, or one per thread."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.lib = str(spec["lib"])
        self._opening = threading.Lock()
        self.shared: QueueAdapter | None = None
        if self.lib == "pq-ack":
            self.shared = _SharedAckQueue(Path(spec["dir"]))
        elif self.lib not in _PER_THREAD:
            self.shared = open_adapter(spec)
        else:  # made (schema, WAL) once here, so the threads only open it
            _PER_THREAD[self.lib](Path(spec["dir"])).close()

    def for_this_thread(self) -> QueueAdapter:
        """The adapter the calling thread uses (opened in it when it has its own, one
        thread at a time: opening is set-up, not what is measured)."""
        if self.shared is not None:
            return self.shared
        with self._opening:
            return _PER_THREAD[self.lib](Path(self.spec["dir"]))

    def release(self, adapter: QueueAdapter) -> None:
        """A thread is done with its adapter: close it there if it was its own (a
        sqlite3 connection may only be used, and closed, by the thread that opened it)."""
        if adapter is not self.shared:
            adapter.close()

    def describe(self) -> dict[str, Any]:
        """Version and pragmas, read back from an adapter of this pool (opened here if
        every one belongs to a thread: a connection is only used by its own thread)."""
        if self.shared is not None:
            return describe(self.shared)
        probe = _PER_THREAD[self.lib](Path(self.spec["dir"]))
        try:
            return describe(probe)
        finally:
            probe.close()

    def depth(self) -> int:
        """The queue's depth, by the library's own inquiry."""
        if self.shared is not None:
            return self.shared.depth()
        probe = _PER_THREAD[self.lib](Path(self.spec["dir"]))
        try:
            return probe.depth()
        finally:
            probe.close()

    def close(self) -> None:
        """Close the shared adapter, if any (the threads have finished)."""
        if self.shared is not None:
            self.shared.close()


def run_threads(
    pool: Pool, threads: int, per_thread: int, op: Callable[[QueueAdapter, int, int], None], budget_s: float
) -> dict[str, float]:
    """Start ``threads`` threads, let them open their adapters, then time them all
    together, each calling ``op(adapter, thread, i)`` ``per_thread`` times (each stops
    early past the time budget). Returns throughput over the whole span, the
    latency of every call and the process's CPU per call."""
    start = threading.Barrier(threads + 1)
    latencies: list[list[float]] = [[] for _ in range(threads)]
    ended = [0.0] * threads
    errors: list[BaseException] = []
    clock = time.perf_counter

    def worker(t: int) -> None:
        try:
            adapter = pool.for_this_thread()
        except BaseException as exc:
            errors.append(exc)
            start.abort()
            return
        try:
            start.wait()
            deadline = clock() + budget_s
            mine = latencies[t]
            for i in range(per_thread):
                t0 = clock()
                op(adapter, t, i)
                t1 = clock()
                mine.append(t1 - t0)
                if t1 > deadline:
                    break
        except BaseException as exc:
            errors.append(exc)
        finally:
            ended[t] = clock()  # before closing: the last close may checkpoint
            pool.release(adapter)

    workers = [threading.Thread(target=worker, args=(t,), name=f"bench-{t}") for t in range(threads)]
    for w in workers:
        w.start()
    with contextlib.suppress(threading.BrokenBarrierError):  # a thread failed to open: reported below
        start.wait()
    cpu = time.process_time()
    began = clock()
    for w in workers:
        w.join()
    cpu = time.process_time() - cpu  # every thread's, up to the last one's exit (closes included)
    elapsed = max(ended) - began
    if errors:
        where = traceback.extract_tb(errors[0].__traceback__)[-1]
        raise RuntimeError(f"{len(errors)} of {threads} threads failed; first: {errors[0]!r} "
                           f"at {Path(where.filename).name}:{where.lineno} ({where.line})") from errors[0]
    out = summarize([x for mine in latencies for x in mine], elapsed)
    out["cpu_us_per_op"] = cpu_per_op(cpu, int(out["ops"]))
    out["budget_hit"] = float(out["ops"] < threads * per_thread)
    out["threads"] = float(threads)
    return out


def measure(
    spec: dict[str, Any], op: Callable[[QueueAdapter, int, int], None]
) -> tuple[Pool, dict[str, float]]:
    """Open the pool, probe the disk's flush latency, and run the threads (child side)."""
    threads, ops = int(spec["threads"]), int(spec["ops"])
    pool = Pool(spec)
    probe = fsync_probe(Path(spec["dir"]), count=50)
    before = _flushes(pool)
    metrics = run_threads(pool, threads, max(1, ops // threads), op, float(spec["budget_s"]))
    after = _flushes(pool)
    metrics["fsync_p50_us"] = probe["p50_us"]
    if before is not None and after is not None:
        commits, syncs = after[0] - before[0], after[1] - before[1]
        metrics["durable_commits"] = float(commits)
        metrics["flushes"] = float(syncs)
        metrics["commits_per_flush"] = commits / syncs if syncs else 0.0
    return pool, metrics


def _flushes(pool: Pool) -> tuple[int, int] | None:
    """edgeq's durable commits and WAL flushes so far (group commit), None for a peer."""
    qm = getattr(pool.shared, "qm", None)
    if qm is None:
        return None
    stats = qm._db.sync_stats()
    return stats.commits, stats.syncs


def run_thread_counts(
    ctx: Context, case: str, libs: Sequence[str],
    prepare: Callable[[str, int], tuple[str, dict[str, Any], Path]], counts: Sequence[int] = ()
) -> list[Result]:
    """Every library at every thread count (``counts``, else the settings'; ``Result.size`` is
    the thread count), each in a fresh child, rounds interleaved; then each row's rate against
    its own 1-thread rate."""
    wanted = [lib for lib in libs if lib in ctx.libs]
    out: list[Result] = []
    for threads in counts or ctx.settings.thread_counts:
        out += run_for_libs(ctx, case, wanted, functools.partial(_swap, prepare, threads), size=threads)
    add_scaling(out)
    return out


def _swap(
    prepare: Callable[[str, int], tuple[str, dict[str, Any], Path]], threads: int, lib: str
) -> tuple[str, dict[str, Any], Path]:
    return prepare(lib, threads)


def add_scaling(results: list[Result]) -> None:
    """Set ``vs_1_thread``: each row's ops/s over the same library's 1-thread ops/s.

    >>> rows = [Result("c", "x", "ok", 1, {"ops_per_s": 100.0}),
    ...         Result("c", "x", "ok", 8, {"ops_per_s": 450.0})]
    >>> add_scaling(rows); rows[1].metrics["vs_1_thread"]
    4.5
    """
    base = {r.lib: r.metrics.get("ops_per_s", 0.0) for r in results if r.size == 1 and r.status == "ok"}
    for r in results:
        if r.status == "ok" and base.get(r.lib):
            r.metrics["vs_1_thread"] = r.metrics.get("ops_per_s", 0.0) / base[r.lib]

"""Shared by the waiting-get cases (``wakeup_same``, ``wakeup_other``, ``idle_wait``):
each library's blocking get, and how one wake-up is timed.

Only two libraries have a get that blocks until a message comes:

- edgeq: ``QueueManager.get(queue, wait=seconds)``; a put by this queue manager wakes
  it through the commit hook, one by another process through the watcher's
  ``PRAGMA data_version`` (polled every 5-40 ms while someone waits).
- persist-queue: ``SQLiteQueue.get(block=True, timeout=seconds)``, opened with
  ``multithreading=True`` (so a putter thread may share it); a put by the same
  object sets an event that wakes it, anything else is seen when it re-reads the
  table every 10 s (its ``TICK_FOR_WAIT``).

Both at WAL + ``synchronous=FULL`` as in every case. A wake-up is timed from the
moment the put *returned* (committed; the put's own fsync is not the getter's
latency) to the moment the get returned, on ``time.monotonic``, the system's
monotonic clock, comparable across processes on one machine. Each put is made only
once the getter has gone back to waiting on an empty queue and a random pause has
passed (so the watcher's poll phase is random, as for a real put): one message at
a time, never a backlog.
"""

from __future__ import annotations

import random
import statistics
from pathlib import Path
from typing import Any

from benchmarks.cases.common import describe
from benchmarks.peers.base import QueueAdapter, make_payload, payload_index
from benchmarks.peers.edgeq_q import _QUEUE as EDGEQ_QUEUE
from benchmarks.peers.edgeq_q import EdgeqAdapter
from benchmarks.peers.persistqueue_q import PlainQueueAdapter

__all__ = ["LIBS", "STOP", "Blocking", "latencies", "open_blocking", "pause"]

LIBS = ["edgeq", "pq-queue"]
#: The payload index that tells a getter to stop.
STOP = 99_999_999


class _SharedQueue(PlainQueueAdapter):
    """``SQLiteQueue`` opened for use from several threads."""

    def _open(self, path: str) -> Any:
        from persistqueue import SQLiteQueue

        return SQLiteQueue(path, multithreading=True)


class Blocking:
    """One library's queue, driven through its blocking get."""

    def __init__(self, lib: str, directory: Path, payload_bytes: int) -> None:
        if lib not in LIBS:
            raise ValueError(f"{lib} has no blocking get")
        self.lib = lib
        self.size = payload_bytes
        self.adapter: QueueAdapter = EdgeqAdapter(directory) if lib == "edgeq" else _SharedQueue(directory)

    def put(self, index: int) -> None:
        self.adapter.put(make_payload(index, self.size))

    def get(self, timeout_s: float) -> int | None:
        """Block until a message comes (its payload index) or ``timeout_s`` passes (None)."""
        if isinstance(self.adapter, EdgeqAdapter):
            message = self.adapter.qm.get(EDGEQ_QUEUE, wait=timeout_s)
            return None if message is None else payload_index(message.data)
        from persistqueue.exceptions import Empty

        try:
            return payload_index(self.adapter.q.get(block=True, timeout=timeout_s))  # type: ignore[attr-defined]
        except Empty:
            return None

    def describe(self) -> dict[str, Any]:
        return describe(self.adapter)

    def close(self) -> None:
        self.adapter.close()


def open_blocking(spec: dict[str, Any]) -> Blocking:
    """The spec's library on the spec's directory (child side)."""
    return Blocking(str(spec["lib"]), Path(spec["dir"]), int(spec["payload_bytes"]))


def pause(rng: random.Random, spec: dict[str, Any]) -> float:
    """A random pause before a put, in seconds: between ``gap_ms`` and twice that."""
    gap = float(spec["gap_ms"]) / 1000
    return rng.uniform(gap, 2 * gap)


def latencies(lat_s: list[float], timeouts: int, elapsed_s: float) -> dict[str, float]:
    """The wake-up figures of one measurement, in milliseconds.

    >>> m = latencies([0.001, 0.002, 0.003, 0.004], 0, 1.0)
    >>> m["p50_ms"], m["max_ms"], m["wakeups"]
    (2.5, 4.0, 4.0)
    """
    ordered = sorted(lat_s)
    n = len(ordered)
    if n == 0:
        raise RuntimeError("no wake-up was measured")
    return {
        "wakeups": float(n),
        "p50_ms": statistics.median(ordered) * 1000,
        "p90_ms": ordered[min(n - 1, int(n * 0.90))] * 1000,
        "p99_ms": ordered[min(n - 1, int(n * 0.99))] * 1000,
        "max_ms": ordered[-1] * 1000,
        "mean_ms": statistics.fmean(ordered) * 1000,
        "timeouts": float(timeouts),
        "seconds": elapsed_s,
    }

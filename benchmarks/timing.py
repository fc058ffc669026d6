"""Timing helpers used inside child processes."""

from __future__ import annotations

import resource
import statistics
import sys
import time
from collections.abc import Callable

__all__ = ["cpu_per_op", "peak_rss_mb", "summarize", "timed_loop"]


def summarize(latencies_s: list[float], elapsed_s: float) -> dict[str, float]:
    """Throughput and latency percentiles of one timed loop.

    >>> summarize([0.001, 0.002, 0.003], 0.006)["ops_per_s"]
    500.0
    """
    ordered = sorted(latencies_s)
    n = len(ordered)
    return {
        "ops": float(n),
        "seconds": elapsed_s,
        "ops_per_s": n / elapsed_s if elapsed_s > 0 else 0.0,
        "p50_us": statistics.median(ordered) * 1e6 if n else 0.0,
        "p99_us": ordered[min(n - 1, int(n * 0.99))] * 1e6 if n else 0.0,
        "max_us": ordered[-1] * 1e6 if n else 0.0,
    }


def timed_loop(op: Callable[[], object], ops: int, budget_s: float) -> dict[str, float]:
    """Call ``op`` up to ``ops`` times, stopping early once ``budget_s`` has passed.

    Every call is timed on its own (``perf_counter``); the result says how many
    calls ran, so a loop cut short by the budget is visible as such, and the
    process's CPU time per call (``cpu_us_per_op``).
    """
    latencies: list[float] = []
    clock = time.perf_counter
    cpu = time.process_time()
    start = clock()
    deadline = start + budget_s
    for _ in range(ops):
        t0 = clock()
        op()
        t1 = clock()
        latencies.append(t1 - t0)
        if t1 > deadline:
            break
    out = summarize(latencies, clock() - start)
    out["cpu_us_per_op"] = cpu_per_op(time.process_time() - cpu, len(latencies))
    out["budget_hit"] = float(len(latencies) < ops)
    return out


def cpu_per_op(cpu_s: float, ops: int) -> float:
    """Microseconds of the process's user + system time (every thread's) per operation.

    >>> cpu_per_op(0.5, 1_000)
    500.0
    """
    return cpu_s / ops * 1e6 if ops else 0.0


def peak_rss_mb() -> float:
    """This process's peak resident set size so far, in MB (``getrusage``)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports kilobytes, macOS bytes.
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024

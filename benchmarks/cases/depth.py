"""Depth inquiry on a large queue: edgeq ``depth()``, the peers' ``qsize()``, raw ``count(*)``.

edgeq's first call after opening also activates the queue (MQe's check point:
one indexed probe for expired messages), so it is reported apart from the
median of the calls after it. persist-queue answers from an in-process counter
that it fills with ``COUNT(*)`` when the queue is opened: that cost shows in
``open_s``.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from benchmarks.cases.common import describe, open_adapter, run_for_libs
from benchmarks.results import Result
from benchmarks.runner import Context

__all__ = ["LIBS", "child_depth", "run"]

LIBS = ["edgeq", "pq-ack", "pq-queue", "litequeue", "raw-sqlite"]


def child_depth(spec: dict[str, Any]) -> dict[str, Any]:
    """Open the queue, then time ``calls`` depth inquiries (first one apart)."""
    clock = time.perf_counter
    t0 = clock()
    adapter = open_adapter(spec)
    open_s = clock() - t0
    times: list[float] = []
    depth = -1
    deadline = clock() + float(spec["budget_s"])
    for _ in range(int(spec["calls"])):
        t0 = clock()
        depth = adapter.depth()
        times.append(clock() - t0)
        if t0 > deadline:
            break
    info = describe(adapter)
    adapter.close()
    if depth != int(spec["expected"]):
        raise RuntimeError(f"depth reported {depth}, expected {spec['expected']}")
    rest = times[1:] or times
    return {
        "metrics": {
            "median_ms": statistics.median(rest) * 1e3,
            "first_ms": times[0] * 1e3,
            "max_ms": max(rest) * 1e3,
            "open_s": open_s,
            "depth": float(depth),
            "calls": float(len(times)),
        },
        "info": info,
    }


def run(ctx: Context) -> list[Result]:
    """One child per library on a copy of the largest backlog."""
    s = ctx.settings
    count = s.large + s.get_ops

    def prepare(lib: str) -> tuple[str, dict[str, Any], Any]:
        where = ctx.fresh(lib, count)
        return "depth", {"lib": lib, "dir": str(where), "calls": s.depth_calls, "expected": count,
                         "budget_s": s.budget_s}, where

    return run_for_libs(ctx, "depth", [lib for lib in LIBS if lib in ctx.libs], prepare, size=count)

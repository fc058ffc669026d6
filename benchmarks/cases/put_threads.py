"""Durable single puts from 1, 2, 4, 8, 16 threads of one process (group commit).

Each thread puts its share of the messages one at a time, each durable (committed and
flushed) when the call returns; the row's rate is every put over the whole span, and
``vs_1_thread`` its ratio to the same library's 1-thread rate. See
:mod:`benchmarks.cases.threads` for how each library is shared by the threads.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from benchmarks.cases.common import payloads
from benchmarks.cases.threads import LIBS, measure, run_thread_counts
from benchmarks.peers.base import QueueAdapter
from benchmarks.results import Result
from benchmarks.runner import Context

__all__ = ["LIBS", "child_put_threads", "prepare", "run"]


def child_put_threads(spec: dict[str, Any]) -> dict[str, Any]:
    """Put ``ops`` messages from ``threads`` threads into an empty queue; check they all arrived."""
    threads, ops = int(spec["threads"]), int(spec["ops"])
    per = max(1, ops // threads)
    bodies = payloads(per * threads, int(spec["payload_bytes"]))

    def op(adapter: QueueAdapter, thread: int, i: int) -> None:
        adapter.put(bodies[thread * per + i])

    pool, metrics = measure(spec, op)
    info = pool.describe()
    stored = pool.depth()
    pool.close()
    if stored != int(metrics["ops"]):
        raise RuntimeError(f"put {int(metrics['ops'])} messages but depth reports {stored}")
    return {"metrics": metrics, "info": info}


def prepare(ctx: Context, lib: str, threads: int) -> tuple[str, dict[str, Any], Path]:
    """The child action, spec and scratch directory of one measurement, on an empty queue."""
    s = ctx.settings
    where = ctx.scratch(f"put-threads-{lib}-{threads}")
    spec = {"lib": lib, "dir": str(where), "threads": threads, "ops": s.thread_ops,
            "payload_bytes": s.payload_bytes, "budget_s": s.budget_s}
    return "put_threads", spec, where


def run(ctx: Context) -> list[Result]:
    """One child per (thread count, library), each on an empty queue."""
    return run_thread_counts(ctx, "put_threads", LIBS, functools.partial(prepare, ctx))

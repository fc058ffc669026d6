"""Batch put: many messages in one call and one transaction (edgeq ``put_many``)."""

from __future__ import annotations

import statistics
import time
from typing import Any

from benchmarks.cases.common import describe, open_adapter, payloads, run_for_libs
from benchmarks.results import Result
from benchmarks.runner import Context
from benchmarks.timing import cpu_per_op

__all__ = ["LIBS", "child_put_batch", "run"]

LIBS = ["edgeq", "pq-ack", "pq-queue", "litequeue", "raw-sqlite", "edgeq-sql"]


def child_put_batch(spec: dict[str, Any]) -> dict[str, Any]:
    """Put ``repeats`` batches of ``batch_size``; report the median batch's rate and the CPU
    per message over every batch."""
    adapter = open_adapter(spec)
    size, repeats = int(spec["batch_size"]), int(spec["repeats"])
    rates: list[float] = []
    cpu = 0.0
    for r in range(repeats):
        bodies = payloads(size, int(spec["payload_bytes"]), start=r * size)
        cpu -= time.process_time()
        start = time.perf_counter()
        adapter.put_batch(bodies)
        rates.append(size / (time.perf_counter() - start))
        cpu += time.process_time()
    stored = adapter.depth()
    info = describe(adapter)
    adapter.close()
    if stored != size * repeats:
        raise RuntimeError(f"put {size * repeats} messages but depth reports {stored}")
    return {
        "metrics": {
            "msgs_per_s": statistics.median(rates),
            "best_msgs_per_s": max(rates),
            "cpu_us_per_op": cpu_per_op(cpu, size * repeats),
            "batch_size": float(size),
            "batches": float(repeats),
        },
        "info": info,
    }


def run(ctx: Context) -> list[Result]:
    """One child per library; peers without a batch API are reported ``n/a``."""
    s = ctx.settings

    def prepare(lib: str) -> tuple[str, dict[str, Any], Any]:
        where = ctx.scratch(f"batch-{lib}")
        spec = {"lib": lib, "dir": str(where), "batch_size": s.batch_size, "repeats": s.batch_repeats,
                "payload_bytes": s.payload_bytes}
        return "put_batch", spec, where

    return run_for_libs(ctx, "put_batch", [lib for lib in LIBS if lib in ctx.libs], prepare)

"""Discarding a large number of expired messages.

edgeq: the queue is filled through ``put_many`` under an injected clock
(``QueueManager(..., clock=ManualClock(T0))``) with a 60 s relative expiry;
the measuring process opens it with the clock at ``T0 + 120 s`` and times
``sweep_expired()``. raw sqlite3 (the limit): one ``DELETE ... WHERE deadline
<= now`` on a deadline index. persist-queue and litequeue have no expiry.
"""

from __future__ import annotations

import time
from typing import Any

from benchmarks.cases.common import describe, open_adapter, run_for_libs
from benchmarks.results import Result
from benchmarks.runner import BASE_MS, TTL_MS, Context

__all__ = ["LIBS", "child_expiry", "run"]

LIBS = ["edgeq", "pq-ack", "litequeue", "raw-sqlite"]


def child_expiry(spec: dict[str, Any]) -> dict[str, Any]:
    """Open the expired queue, time one sweep, check everything went."""
    adapter = open_adapter(spec)
    start = time.perf_counter()
    discarded = adapter.sweep_expired()
    seconds = time.perf_counter() - start
    left = adapter.stored()
    info = describe(adapter)
    adapter.close()
    if left != 0:
        raise RuntimeError(f"{left} of {spec['expected']} messages left after the sweep")
    # The rows are gone (checked with a plain count); the call's own return value
    # is recorded as reported, since it may not count what activation discarded.
    note = "" if discarded == int(spec["expected"]) else (
        f"sweep_expired() returned {discarded}, though all {spec['expected']} were discarded")
    return {"metrics": {"seconds": seconds, "discarded": float(spec["expected"]),
                        "returned": float(discarded)}, "info": info, "note": note}


def run(ctx: Context) -> list[Result]:
    """One child per library that has expiry; the others are reported ``n/a``."""
    s = ctx.settings
    count = s.expiry_messages
    out: list[Result] = []
    for lib in [lib for lib in LIBS if lib in ctx.libs]:
        if lib not in ("edgeq", "raw-sqlite"):
            out.append(Result("expiry", lib, "n/a", count, note=f"{lib} has no message expiry"))
            continue

        def prepare(lib: str) -> tuple[str, dict[str, Any], Any]:
            where = ctx.fresh(lib, count, expiring=True)
            spec = {"lib": lib, "dir": str(where), "now_ms": BASE_MS + 2 * TTL_MS, "expected": count}
            return "expiry", spec, where

        out += run_for_libs(ctx, "expiry", [lib], prepare, size=count)
    return out

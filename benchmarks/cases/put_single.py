"""Single durable put: one message per call, committed and fsynced before it returns."""

from __future__ import annotations

from typing import Any

from benchmarks.cases.common import describe, open_adapter, payloads, run_for_libs
from benchmarks.results import Result
from benchmarks.runner import Context
from benchmarks.timing import timed_loop

__all__ = ["LIBS", "child_put_single", "run"]

LIBS = ["edgeq", "pq-ack", "pq-queue", "litequeue", "raw-sqlite", "edgeq-sql"]


def child_put_single(spec: dict[str, Any]) -> dict[str, Any]:
    """Put ``ops`` messages one at a time into an empty queue, timing each."""
    adapter = open_adapter(spec)
    bodies = iter(payloads(int(spec["ops"]), int(spec["payload_bytes"])))
    metrics = timed_loop(lambda: adapter.put(next(bodies)), int(spec["ops"]), float(spec["budget_s"]))
    stored = adapter.depth()
    info = describe(adapter)
    adapter.close()
    if stored != int(metrics["ops"]):
        raise RuntimeError(f"put {int(metrics['ops'])} messages but depth reports {stored}")
    return {"metrics": metrics, "info": info}


def run(ctx: Context) -> list[Result]:
    """One child per library, each on an empty queue."""
    s = ctx.settings

    def prepare(lib: str) -> tuple[str, dict[str, Any], Any]:
        where = ctx.scratch(f"put-{lib}")
        spec = {"lib": lib, "dir": str(where), "ops": s.put_ops, "payload_bytes": s.payload_bytes,
                "budget_s": s.budget_s}
        return "put_single", spec, where

    return run_for_libs(ctx, "put_single", [lib for lib in LIBS if lib in ctx.libs], prepare)

"""get + confirm on top of a backlog: the two-phase get of each library.

edgeq ``get(confirm_id=...)`` + ``confirm_get``; persist-queue ``SQLiteAckQueue``
``get`` + ``ack``; litequeue ``pop`` + ``done``; raw sqlite3 lock-then-delete in
two transactions. The queue holds ``size + ops`` messages when the timed loop
starts, so at least ``size`` remain behind every measured get.
"""

from __future__ import annotations

import time
from typing import Any

from benchmarks.cases.common import describe, open_adapter, run_for_libs
from benchmarks.results import Result
from benchmarks.runner import Context
from benchmarks.timing import timed_loop

__all__ = ["LIBS", "child_get_confirm", "run"]

LIBS = ["edgeq", "pq-ack", "litequeue", "raw-sqlite"]


def child_get_confirm(spec: dict[str, Any]) -> dict[str, Any]:
    """Open a pre-filled queue (timed apart), then time ``ops`` get+confirm pairs."""
    start = time.perf_counter()
    adapter = open_adapter(spec)
    open_s = time.perf_counter() - start
    empty: list[int] = []

    def op() -> None:
        if adapter.get_confirm() is None:
            empty.append(1)

    metrics = timed_loop(op, int(spec["ops"]), float(spec["budget_s"]))
    info = describe(adapter)
    adapter.close()
    if empty:
        raise RuntimeError(f"{len(empty)} gets found the queue empty: the backlog was not filled")
    metrics["open_s"] = open_s
    return {"metrics": metrics, "info": info}


def run(ctx: Context) -> list[Result]:
    """One child per (backlog size, library)."""
    s = ctx.settings
    out: list[Result] = []
    for size in s.sizes:

        def prepare(lib: str, size: int = size) -> tuple[str, dict[str, Any], Any]:
            where = ctx.fresh(lib, size + s.get_ops)
            spec = {"lib": lib, "dir": str(where), "ops": s.get_ops, "budget_s": s.budget_s}
            return "get_confirm", spec, where

        out += run_for_libs(ctx, "get_confirm", [lib for lib in LIBS if lib in ctx.libs], prepare, size=size)
    return out

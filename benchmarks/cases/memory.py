"""Memory: peak RSS of a process holding a small and a large queue.

The child opens the queue, does one get+confirm and one depth inquiry, and
reports ``getrusage`` peak RSS (and the RSS before opening, i.e. interpreter
plus imports). A queue that is not loaded into memory costs the same at both
sizes.
"""

from __future__ import annotations

from typing import Any

from benchmarks.cases.common import describe, open_adapter, run_for_libs
from benchmarks.results import Result
from benchmarks.runner import Context
from benchmarks.timing import peak_rss_mb

__all__ = ["LIBS", "child_memory", "run"]

LIBS = ["edgeq", "pq-ack", "pq-queue", "litequeue", "raw-sqlite"]


def child_memory(spec: dict[str, Any]) -> dict[str, Any]:
    """Open, get+confirm once, inquire depth; report peak RSS."""
    import importlib

    from benchmarks.peers import LIBRARIES

    importlib.import_module(LIBRARIES[spec["lib"]][2])  # the library's imports count in the baseline
    before = peak_rss_mb()
    adapter = open_adapter(spec)
    if adapter.get_confirm() is None:
        raise RuntimeError("the queue was empty")
    adapter.depth()
    peak = peak_rss_mb()
    info = describe(adapter)
    adapter.close()
    return {"metrics": {"peak_rss_mb": peak, "baseline_rss_mb": before, "queue_rss_mb": peak - before},
            "info": info}


def run(ctx: Context) -> list[Result]:
    """One child per (size, library): smallest and largest backlog."""
    s = ctx.settings
    out: list[Result] = []
    for size in sorted({s.small, s.large}):
        count = size + s.get_ops

        def prepare(lib: str, count: int = count) -> tuple[str, dict[str, Any], Any]:
            where = ctx.fresh(lib, count)
            return "memory", {"lib": lib, "dir": str(where)}, where

        out += run_for_libs(ctx, "memory", [lib for lib in LIBS if lib in ctx.libs], prepare, size=size)
    return out

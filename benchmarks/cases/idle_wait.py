"""CPU a process burns while its get waits on an empty queue (nothing is put).

One child per library: it opens the queue, then times one blocking get of
``idle_s`` seconds on the empty queue, and reports the CPU time the whole process
(every thread: edgeq's watcher too) used meanwhile, from ``getrusage``, as a share
of one core.
"""

from __future__ import annotations

import resource
import time
from typing import Any

from benchmarks.cases.common import run_for_libs
from benchmarks.cases.wakeup import LIBS, open_blocking
from benchmarks.results import Result
from benchmarks.runner import Context

__all__ = ["child_idle_wait", "run"]


def _cpu() -> tuple[float, float]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime


def child_idle_wait(spec: dict[str, Any]) -> dict[str, Any]:
    """One get that waits ``idle_s`` seconds on an empty queue, and the CPU it cost."""
    q = open_blocking(spec)
    idle_s = float(spec["idle_s"])
    user0, sys0 = _cpu()
    start = time.monotonic()
    got = q.get(idle_s)
    wall = time.monotonic() - start
    user1, sys1 = _cpu()
    info = q.describe()
    q.close()
    if got is not None:
        raise RuntimeError("the queue was meant to stay empty")
    cpu = (user1 - user0) + (sys1 - sys0)
    return {
        "metrics": {
            "cpu_percent": 100 * cpu / wall,
            "cpu_ms": cpu * 1000,
            "user_ms": (user1 - user0) * 1000,
            "sys_ms": (sys1 - sys0) * 1000,
            "wall_s": wall,
        },
        "info": info,
    }


def run(ctx: Context) -> list[Result]:
    """One child per library, each waiting on an empty queue."""
    s = ctx.settings

    def prepare(lib: str) -> tuple[str, dict[str, Any], Any]:
        where = ctx.scratch(f"idle-{lib}")
        return "idle_wait", {"lib": lib, "dir": str(where), "payload_bytes": s.payload_bytes,
                             "idle_s": s.idle_s}, where

    return run_for_libs(ctx, "idle_wait", [lib for lib in LIBS if lib in ctx.libs], prepare)

"""Wake-up latency of a waiting get after a put by another thread of the same process.

One child per library: a getter thread loops on the library's blocking get; the main
thread, once the getter waits on the empty queue and a random pause (``gap_ms`` to
twice that) has passed, puts one message and notes when the put returned. The
figure is put returned → get returned (see :mod:`benchmarks.cases.wakeup`).
"""

from __future__ import annotations

import queue
import random
import threading
import time
from typing import Any

from benchmarks.cases.common import run_for_libs
from benchmarks.cases.wakeup import LIBS, STOP, latencies, open_blocking, pause
from benchmarks.results import Result
from benchmarks.runner import Context

__all__ = ["child_wakeup_same", "run"]


def child_wakeup_same(spec: dict[str, Any]) -> dict[str, Any]:
    """Time ``wakeups`` wake-ups of a getter thread by puts of this thread."""
    q = open_blocking(spec)
    rng = random.Random(int(spec.get("seed", 1)))
    timeout_s = float(spec["timeout_s"])
    waiting = threading.Event()  # set just before each get
    returned: queue.Queue[tuple[int | None, float]] = queue.Queue()

    def getter() -> None:
        while True:
            waiting.set()
            index = q.get(timeout_s)
            returned.put((index, time.monotonic()))
            if index in (STOP, None):
                return

    thread = threading.Thread(target=getter, daemon=True)
    thread.start()
    lat: list[float] = []
    timeouts = 0
    start = time.monotonic()
    for i in range(int(spec["wakeups"])):
        if not waiting.wait(timeout_s):
            raise RuntimeError("the getter never went back to waiting")
        waiting.clear()
        time.sleep(pause(rng, spec))  # pacing: the getter is asleep in its wait by now
        q.put(i)
        put_done = time.monotonic()
        index, got_at = returned.get(timeout=timeout_s + 5)
        if index is None:
            timeouts += 1
            break
        if index != i:
            raise RuntimeError(f"put message {i}, the getter got {index}")
        lat.append(got_at - put_done)
        if time.monotonic() - start > float(spec["budget_s"]):
            break
    elapsed = time.monotonic() - start
    if timeouts == 0:
        waiting.wait(timeout_s)
        q.put(STOP)
    thread.join(timeout_s + 5)
    info = q.describe()
    q.close()
    return {"metrics": latencies(lat, timeouts, elapsed), "info": info}


def run(ctx: Context) -> list[Result]:
    """One child per library, each on an empty queue."""
    s = ctx.settings

    def prepare(lib: str) -> tuple[str, dict[str, Any], Any]:
        where = ctx.scratch(f"wakeup-same-{lib}")
        spec = {"lib": lib, "dir": str(where), "payload_bytes": s.payload_bytes, "wakeups": s.wakeups,
                "gap_ms": s.wakeup_gap_ms, "timeout_s": 60.0, "budget_s": s.budget_s}
        return "wakeup_same", spec, where

    return run_for_libs(ctx, "wakeup_same", [lib for lib in LIBS if lib in ctx.libs], prepare)

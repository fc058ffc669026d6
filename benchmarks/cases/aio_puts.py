"""asyncio: durable single puts from 1 and from 100 coroutines of one event loop.

One child per row: an :class:`edgeq.aio.AsyncQueueManager` (``durability="full"``)
on an empty queue; N coroutines start together and share out the puts, each awaiting
its own ``put`` (durable when it returns). The row's rate is every put over the whole
span; ``vs_1_coroutine`` its ratio to the 1-coroutine rate (the target: ≥ 4x at 100).

The variant row ``edgeq-1-worker`` runs the same 100 coroutines through a pool of one
worker thread: the puts then reach the store one after the other and no flush can be
shared, which is what the default pool (32 threads) and group commit add. edgeq only:
the peers have no asyncio API.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from benchmarks.cases.common import payloads
from benchmarks.machine import fsync_probe
from benchmarks.results import Result, median_round
from benchmarks.runner import ChildError, Context
from benchmarks.timing import summarize

__all__ = ["ROWS", "child_aio_puts", "run"]

#: (library key, coroutines, worker threads) of each row.
ROWS = (("edgeq", 1, 32), ("edgeq", 100, 32), ("edgeq-1-worker", 100, 1))


def child_aio_puts(spec: dict[str, Any]) -> dict[str, Any]:
    """Put ``ops`` messages from ``coroutines`` coroutines; check they all arrived."""
    from edgeq import Message
    from edgeq.aio import AsyncQueueManager

    directory = Path(spec["dir"])
    directory.mkdir(parents=True, exist_ok=True)
    coroutines, workers = int(spec["coroutines"]), int(spec["workers"])
    per = max(1, int(spec["ops"]) // coroutines)
    bodies = payloads(per * coroutines, int(spec["payload_bytes"]))
    budget_s = float(spec["budget_s"])
    probe = fsync_probe(directory, count=50)

    async def main() -> dict[str, Any]:
        async with AsyncQueueManager(directory / "edgeq.db", name="BENCH", durability="full",
                                     max_workers=workers) as qm:
            await qm.define_queue("Q")
            latencies: list[float] = []
            go = asyncio.Event()
            clock = time.perf_counter

            async def producer(c: int) -> None:
                await go.wait()
                deadline = clock() + budget_s
                for i in range(per):
                    t0 = clock()
                    await qm.put("Q", Message(bodies[c * per + i]))
                    t1 = clock()
                    latencies.append(t1 - t0)
                    if t1 > deadline:
                        return

            tasks = [asyncio.create_task(producer(c)) for c in range(coroutines)]
            await asyncio.sleep(0)  # every producer waits on the start line
            stats0 = qm.sync._db.sync_stats()
            began = clock()
            go.set()
            await asyncio.gather(*tasks)
            elapsed = clock() - began
            stats1 = qm.sync._db.sync_stats()
            stored = await qm.depth("Q")
            if stored != len(latencies):
                raise RuntimeError(f"put {len(latencies)} messages but depth reports {stored}")
            metrics = summarize(latencies, elapsed)
            commits, syncs = stats1.commits - stats0.commits, stats1.syncs - stats0.syncs
            metrics.update({
                "coroutines": float(coroutines), "workers": float(workers), "fsync_p50_us": probe["p50_us"],
                "budget_hit": float(len(latencies) < per * coroutines),
                "durable_commits": float(commits), "flushes": float(syncs),
                "commits_per_flush": commits / syncs if syncs else 0.0,
            })
            return metrics

    import edgeq

    return {"metrics": asyncio.run(main()), "info": {"version": edgeq.__version__, "max_workers": workers}}


def run(ctx: Context) -> list[Result]:
    """Every row ``rounds`` times, rows interleaved, each in a fresh child; the median round."""
    if "edgeq" not in ctx.libs:
        return []
    s = ctx.settings
    rounds: dict[tuple[str, int, int], list[Result]] = {row: [] for row in ROWS}
    for number in range(s.rounds):
        for row in ROWS:
            if rounds[row] and rounds[row][-1].status != "ok":
                continue
            rounds[row].append(_measure(ctx, row, number))
    out = [median_round(results) for results in rounds.values()]
    one = next((r.metrics["ops_per_s"] for r in out if r.lib == "edgeq" and r.size == 1 and r.status == "ok"),
               None)
    for r in out:
        if one and r.status == "ok":
            r.metrics["vs_1_coroutine"] = r.metrics["ops_per_s"] / one
    return out


def _measure(ctx: Context, row: tuple[str, int, int], number: int) -> Result:
    lib, coroutines, workers = row
    s = ctx.settings
    where = ctx.scratch(f"aio-puts-{lib}-{coroutines}")
    ctx.log(f"  aio_puts {lib} @ {coroutines} coroutines"
            + (f" (round {number + 1})" if s.rounds > 1 else ""))
    spec = {"dir": str(where), "coroutines": coroutines, "workers": workers, "ops": s.thread_ops,
            "payload_bytes": s.payload_bytes, "budget_s": s.budget_s}
    try:
        got = ctx.child("aio_puts", spec)
    except ChildError as exc:
        ctx.log(f"    error: {exc}")
        return Result("aio_puts", lib, "error", coroutines, note=str(exc))
    finally:
        ctx.discard(where)
    return Result("aio_puts", lib, got.get("status", "ok"), coroutines, metrics=got.get("metrics", {}),
                  info=got.get("info", {}), note=got.get("note", ""))

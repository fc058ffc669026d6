"""get + confirm from 1, 2, 4, 8, 16 consumer threads of one process over a pre-filled queue.

Each thread takes its share of the messages two-phase (edgeq ``get(confirm_id=)`` +
``confirm_get``, persist-queue ``get`` + ``ack``, litequeue ``pop`` + ``done``, raw
sqlite3 a lock transaction then a delete transaction). The queue holds the smallest
backlog plus every message taken, so none runs dry; every payload's index is
recorded, and a message taken twice is counted (``duplicates``).
"""

from __future__ import annotations

from typing import Any

from benchmarks.cases.threads import LIBS, measure, run_thread_counts
from benchmarks.peers.base import QueueAdapter, payload_index
from benchmarks.results import Result
from benchmarks.runner import Context

__all__ = ["LIBS", "child_get_confirm_threads", "run"]


def child_get_confirm_threads(spec: dict[str, Any]) -> dict[str, Any]:
    """``ops`` get+confirm pairs from ``threads`` threads; none may find the queue empty."""
    threads = int(spec["threads"])
    taken: list[list[int]] = [[] for _ in range(threads)]
    empty: list[int] = []

    def op(adapter: QueueAdapter, thread: int, i: int) -> None:
        payload = adapter.get_confirm()
        if payload is None:
            empty.append(thread)
        else:
            taken[thread].append(payload_index(payload))

    pool, metrics = measure(spec, op)
    info = pool.describe()
    pool.close()
    if empty:
        raise RuntimeError(f"{len(empty)} gets found the queue empty: the backlog was not filled")
    every = [index for mine in taken for index in mine]
    metrics["duplicates"] = float(len(every) - len(set(every)))
    return {"metrics": metrics, "info": info}


def run(ctx: Context) -> list[Result]:
    """One child per (thread count, library), each on its own copy of the same backlog."""
    s = ctx.settings

    def prepare(lib: str, threads: int) -> tuple[str, dict[str, Any], Any]:
        where = ctx.fresh(lib, s.small + s.thread_ops)
        spec = {"lib": lib, "dir": str(where), "threads": threads, "ops": s.thread_ops,
                "budget_s": s.budget_s}
        return "get_confirm_threads", spec, where

    return run_thread_counts(ctx, "get_confirm_threads", LIBS, prepare)

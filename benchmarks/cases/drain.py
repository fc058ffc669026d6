"""Multi-process drain: several consumer processes get+confirm from one file until it is empty.

Every consumer opens the queue, says READY, and waits for GO on stdin, so all
of them start together (and persist-queue's ``auto_resume`` runs before any
get). Each records the index written in every payload it received; the runner
counts duplicates (received more than once) and losses (never received), and
the messages the library still reports on the queue afterwards. Errors a
consumer hits are counted and the consumer carries on, as an application would.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from typing import Any

from benchmarks.cases.common import open_adapter
from benchmarks.peers import installed
from benchmarks.peers.base import payload_index
from benchmarks.results import Result, median_round
from benchmarks.runner import ChildError, Context

__all__ = ["LIBS", "child_consumer", "child_count", "run"]

LIBS = ["edgeq", "pq-ack", "pq-queue", "litequeue", "raw-sqlite"]
_MAX_CONSECUTIVE_ERRORS = 200


def child_consumer(spec: dict[str, Any]) -> dict[str, Any]:
    """One consumer: handshake, then get+confirm until the queue reports empty."""
    adapter = open_adapter(spec)
    print("READY", flush=True)
    sys.stdin.readline()
    got: list[int] = []
    errors: Counter[str] = Counter()
    consecutive = 0
    start = time.perf_counter()
    deadline = start + float(spec["budget_s"])
    while time.perf_counter() < deadline:
        try:
            payload = adapter.get_confirm()
        except Exception as exc:  # report every failure mode as it is
            errors[f"{type(exc).__name__}: {exc}"[:120]] += 1
            consecutive += 1
            if consecutive >= _MAX_CONSECUTIVE_ERRORS:
                break
            continue
        consecutive = 0
        if payload is None:
            break
        got.append(payload_index(payload))
    elapsed = time.perf_counter() - start
    adapter.close()
    with open(spec["out"], "w", encoding="utf-8") as fh:
        json.dump({"got": got, "errors": dict(errors), "seconds": elapsed}, fh)
    return {"metrics": {"received": float(len(got)), "seconds": elapsed}}


def child_count(spec: dict[str, Any]) -> dict[str, Any]:
    """How many messages the library still reports on the queue."""
    adapter = open_adapter(spec)
    depth = adapter.depth()
    adapter.close()
    return {"metrics": {"depth": float(depth)}}


def _drain(ctx: Context, lib: str) -> Result:
    s = ctx.settings
    where = ctx.fresh(lib, s.drain_messages)
    ctx.log(f"  drain {lib}: {s.drain_consumers} consumers, {s.drain_messages:,} messages")
    procs = []
    outs = [where / f"consumer-{i}.json" for i in range(s.drain_consumers)]
    try:
        for out in outs:
            spec = {"lib": lib, "dir": str(where), "out": str(out), "budget_s": s.child_timeout_s / 2}
            procs.append(ctx.spawn("drain_consumer", spec))
        for proc in procs:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if line.strip() != "READY":
                raise ChildError(f"a consumer failed to start: {proc.communicate()[1].strip()[-400:]}")
        start = time.perf_counter()
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("GO\n")
            proc.stdin.flush()
        for proc in procs:
            _, err = proc.communicate(timeout=s.child_timeout_s)
            if proc.returncode != 0:
                raise ChildError(f"a consumer exited with {proc.returncode}: {err.strip()[-400:]}")
        wall = time.perf_counter() - start
        reports = [json.loads(out.read_text(encoding="utf-8")) for out in outs]
        left = ctx.child("count", {"lib": lib, "dir": str(where)})["metrics"]["depth"]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        ctx.discard(where)
    counts = Counter(i for r in reports for i in r["got"])
    errors: Counter[str] = Counter()
    for r in reports:
        errors.update(r["errors"])
    received = sum(counts.values())
    duplicates = received - len(counts)
    losses = s.drain_messages - len(counts)
    metrics = {
        "messages": float(s.drain_messages),
        "received": float(received),
        "duplicates": float(duplicates),
        "losses": float(losses),
        "left_on_queue": float(left),
        "errors": float(sum(errors.values())),
        "seconds": wall,
        "msgs_per_s": len(counts) / wall if wall > 0 else 0.0,
        "per_consumer": float(s.drain_consumers),
    }
    note = "; ".join(f"{n}x {e}" for e, n in errors.most_common(3))
    return Result("drain", lib, "ok", s.drain_messages, metrics=metrics,
                  info={"received_per_consumer": [len(r["got"]) for r in reports]}, note=note)


def run(ctx: Context) -> list[Result]:
    """One drain per library, each on its own copy of the same backlog."""
    libs = [lib for lib in LIBS if lib in ctx.libs]
    rounds: dict[str, list[Result]] = {lib: [] for lib in libs}
    for _ in range(ctx.settings.rounds):
        for lib in libs:
            if rounds[lib] and rounds[lib][-1].status != "ok":
                continue
            if not installed(lib):
                rounds[lib].append(Result("drain", lib, "not installed", ctx.settings.drain_messages))
                continue
            try:
                rounds[lib].append(_drain(ctx, lib))
            except (ChildError, OSError, ValueError) as exc:
                ctx.log(f"    error: {exc}")
                rounds[lib].append(Result("drain", lib, "error", ctx.settings.drain_messages, note=str(exc)))
    return [median_round(rounds[lib]) for lib in libs]

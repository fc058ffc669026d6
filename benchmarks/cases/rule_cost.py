"""What a bound rule costs a put: the ``counters`` rule beside no rule, side by side.

One child per size and round holds two stores of ``durability="full"`` in one directory,
one queue each: no rule (row ``edgeq``) and the ``counters`` rule bound (row
``edgeq-counters``). It alternates between them in slices (A B, then B A, ...), so a
slow spell of the disk, which moves a flush by 10x within minutes on a shared host, hits
both alike: durable single puts (size 1, ``put_ops`` in all, in 20 slices) and
``put_many`` batches of ``batch_size`` (``batch_repeats`` each). The rule's row reports
``vs_no_rule``: the median over the rounds of its rate over the other row's in the same
child (the targets: ≥ 0.7x for batches, ≥ 0.8x for single puts). A child checks the
counters: ``added`` equals the depth. edgeq only: the peers have no rules.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks.cases.common import payloads
from benchmarks.machine import fsync_probe
from benchmarks.results import Result, median_round
from benchmarks.runner import ChildError, Context
from benchmarks.timing import summarize

__all__ = ["LIBS", "child_rule_cost", "run"]

#: row -> the rules bound to its queue.
LIBS = {"edgeq": [], "edgeq-counters": ["counters"]}
SLICES = 20


def child_rule_cost(spec: dict[str, Any]) -> dict[str, Any]:
    """Both rows' puts of ``size`` (1: single puts), alternating; the metrics of each row."""
    import edgeq
    from edgeq import Message, QueueManager

    directory = Path(spec["dir"])
    directory.mkdir(parents=True, exist_ok=True)
    probe = fsync_probe(directory, count=50)
    qms = {lib: QueueManager(directory / f"{lib}.db", name="BENCH", durability="full") for lib in LIBS}
    try:
        for lib, qm in qms.items():
            qm.define_queue("Q", rules=list(LIBS[lib]))
            qm.put("Q", Message(b"warm-up"))  # the queue's activation, outside the timing
        out = _singles(qms, spec) if int(spec["size"]) == 1 else _batches(qms, spec)
        for lib, qm in qms.items():
            depth, added = qm.depth("Q"), qm.queue_stats("Q").get("added")
            if LIBS[lib] and added != depth:
                raise RuntimeError(f"the counters rule counted {added} added, the queue holds {depth}")
            out[lib].update(fsync_p50_us=probe["p50_us"], size=float(spec["size"]), depth=float(depth))
    finally:
        for qm in qms.values():
            qm.close()
    return {"metrics": out, "info": {"version": edgeq.__version__}}


def _order(n: int) -> list[str]:
    """The rows in slice ``n``: A B, then B A, so neither always goes first."""
    return list(LIBS) if n % 2 == 0 else list(reversed(LIBS))


def _singles(qms: dict[str, Any], spec: dict[str, Any]) -> dict[str, dict[str, float]]:
    """``ops`` durable single puts per row, in slices alternating between the rows."""
    from edgeq import Message

    per = max(1, int(spec["ops"]) // SLICES)
    bodies = payloads(per * SLICES, int(spec["payload_bytes"]))
    latencies: dict[str, list[float]] = {lib: [] for lib in qms}
    spent = dict.fromkeys(qms, 0.0)
    clock, deadline = time.perf_counter, time.perf_counter() + 2 * float(spec["budget_s"])
    for n in range(SLICES):
        for lib in _order(n):
            began = clock()
            for body in bodies[n * per:(n + 1) * per]:
                t0 = clock()
                qms[lib].put("Q", Message(body))
                latencies[lib].append(clock() - t0)
            spent[lib] += clock() - began
        if clock() > deadline:
            break
    out = {lib: summarize(latencies[lib], spent[lib]) for lib in qms}
    for lib, m in out.items():
        m["msgs_per_s"] = m["ops_per_s"]
        m["budget_hit"] = float(len(latencies[lib]) < per * SLICES)
    return out


def _batches(qms: dict[str, Any], spec: dict[str, Any]) -> dict[str, dict[str, float]]:
    """``repeats`` batches of ``size`` through ``put_many`` per row, alternating; the median batch's rate."""
    from edgeq import Message

    size = int(spec["size"])
    rates: dict[str, list[float]] = {lib: [] for lib in qms}
    for r in range(int(spec["repeats"])):
        for lib in _order(r):
            messages = [Message(body) for body in payloads(size, int(spec["payload_bytes"]), start=r * size)]
            start = time.perf_counter()
            qms[lib].put_many("Q", messages)
            rates[lib].append(size / (time.perf_counter() - start))
    return {lib: {"msgs_per_s": statistics.median(v), "best_msgs_per_s": max(v), "batches": float(len(v))}
            for lib, v in rates.items()}


def run(ctx: Context) -> list[Result]:
    """A child per size and round; the median round of each row; the rule's row gets ``vs_no_rule``."""
    if "edgeq" not in ctx.libs:
        return []
    s = ctx.settings
    sizes = (1, s.batch_size)
    rounds: dict[tuple[str, int], list[Result]] = {(lib, size): [] for size in sizes for lib in LIBS}
    ratios: dict[int, list[float]] = {size: [] for size in sizes}
    for number in range(s.rounds):
        for size in ratios:
            got = _measure(ctx, size, number)
            for lib in LIBS:
                rounds[lib, size].append(got[lib])
            if all(got[lib].status == "ok" for lib in LIBS):
                rates = [got[lib].metrics["msgs_per_s"] for lib in ("edgeq-counters", "edgeq")]
                ratios[size].append(rates[0] / rates[1])
    out = [median_round(results) for results in rounds.values()]
    for r in out:
        if r.lib != "edgeq" and r.status == "ok" and ratios[r.size or 0]:
            r.metrics["vs_no_rule"] = statistics.median(ratios[r.size or 0])
            r.info["round_ratios"] = ratios[r.size or 0]
    return out


def _measure(ctx: Context, size: int, number: int) -> dict[str, Result]:
    """One child: both rows at ``size``."""
    s = ctx.settings
    where = ctx.scratch(f"rule-cost-{size}")
    ctx.log(f"  rule_cost @ {size:,}" + (f" (round {number + 1})" if s.rounds > 1 else ""))
    spec = {"dir": str(where), "size": size, "ops": s.put_ops, "repeats": s.batch_repeats,
            "payload_bytes": s.payload_bytes, "budget_s": s.budget_s}
    try:
        got = ctx.child("rule_cost", spec)
    except ChildError as exc:
        ctx.log(f"    error: {exc}")
        return {lib: Result("rule_cost", lib, "error", size, note=str(exc)) for lib in LIBS}
    finally:
        ctx.discard(where)
    metrics = got.get("metrics", {})
    return {lib: Result("rule_cost", lib, got.get("status", "ok"), size, metrics=metrics.get(lib, {}),
                        info=got.get("info", {}), note=got.get("note", "")) for lib in LIBS}

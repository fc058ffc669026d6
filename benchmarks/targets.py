"""The performance targets of the issue, judged PASS / FAIL against one run's results."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from benchmarks.config import Settings
from benchmarks.labels import human
from benchmarks.results import Result

__all__ = ["Target", "evaluate"]


@dataclass
class Target:
    """One target: what it asks, what was measured, and the verdict."""

    name: str
    goal: str
    measured: str
    status: str  # PASS, FAIL or "n/a" (a figure it needs was not measured)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)


def _metric(results: list[Result], case: str, lib: str, metric: str, size: int | None = None) -> float | None:
    for r in results:
        if r.case == case and r.lib == lib and r.status == "ok" and (size is None or r.size == size):
            value = r.metrics.get(metric)
            return None if value is None else float(value)
    return None


def _judge(name: str, goal: str, ok: bool | None, measured: str) -> Target:
    status = "n/a" if ok is None else ("PASS" if ok else "FAIL")
    return Target(name, goal, measured if ok is not None else "not measured", status)


def _ratio(name: str, goal: str, e: float | None, peer: float | None, factor: float, unit: str) -> Target:
    """A target of the form "edgeq at least ``factor`` times ``peer``"."""
    return _judge(
        name, goal,
        None if e is None or not peer else e >= factor * peer,
        f"{e / peer:.2f}x ({e:,.0f} vs {peer:,.0f} {unit})" if e and peer else "",
    )


def evaluate(results: list[Result], s: Settings) -> list[Target]:
    """Every target of the issue, in the order it lists them."""
    out: list[Target] = []
    tb = s.target_backlog
    e = _metric(results, "get_confirm", "edgeq", "ops_per_s", tb)
    p = _metric(results, "get_confirm", "pq-ack", "ops_per_s", tb)
    out.append(_ratio(f"get+confirm @ {human(tb)} vs persist-queue", "≥ 20x SQLiteAckQueue get+ack", e, p, 20, "ops/s"))
    lo = _metric(results, "get_confirm", "edgeq", "ops_per_s", s.small)
    hi = _metric(results, "get_confirm", "edgeq", "ops_per_s", s.large)
    out.append(_judge(
        f"get+confirm flat {human(s.small)} → {human(s.large)}", f"{human(s.large)} within 20% of {human(s.small)}",
        None if not lo or hi is None or s.small == s.large else hi >= 0.8 * lo,
        f"{hi / lo:.2f}x ({hi:,.0f} vs {lo:,.0f} ops/s)" if lo and hi else "",
    ))
    e = _metric(results, "put_single", "edgeq", "ops_per_s")
    pqs = [v for v in (_metric(results, "put_single", lib, "ops_per_s") for lib in ("pq-ack", "pq-queue")) if v]
    pq = max(pqs) if pqs else None
    out.append(_ratio("single durable put vs persist-queue", "≥ 1.5x the faster persist-queue class", e, pq, 1.5, "msg/s"))
    raw = _metric(results, "put_single", "raw-sqlite", "ops_per_s")
    out.append(_ratio("single durable put vs raw sqlite3", "within 2x of 1 row/txn (≥ 0.5x)", e, raw, 0.5, "msg/s"))
    e = _metric(results, "put_batch", "edgeq", "msgs_per_s")
    raw = _metric(results, "put_batch", "raw-sqlite", "msgs_per_s")
    out.append(_ratio("batch put vs raw sqlite3", "≥ 0.5x one transaction", e, raw, 0.5, "msg/s"))
    dup = _metric(results, "drain", "edgeq", "duplicates")
    lost = _metric(results, "drain", "edgeq", "losses")
    out.append(_judge(
        "multi-process drain (edgeq)", "0 duplicates, 0 losses",
        None if dup is None or lost is None else dup == 0 and lost == 0,
        f"{dup:.0f} duplicates, {lost:.0f} losses" if dup is not None and lost is not None else "",
    ))
    count = s.large + s.get_ops
    d = _metric(results, "depth", "edgeq", "median_ms", count)
    first = _metric(results, "depth", "edgeq", "first_ms", count)
    out.append(_judge(
        f"depth @ {human(count)}", "< 10 ms",
        None if d is None else d < 10,
        f"{d:.3f} ms median (first call {first:.2f} ms)" if d is not None and first is not None else "",
    ))
    x = _metric(results, "expiry", "edgeq", "seconds", s.expiry_messages)
    out.append(_judge(
        f"discard {human(s.expiry_messages)} expired", "< 3 s",
        None if x is None else x < 3,
        f"{x:.2f} s" if x is not None else "",
    ))
    small = _metric(results, "memory", "edgeq", "peak_rss_mb", s.small)
    large = _metric(results, "memory", "edgeq", "peak_rss_mb", s.large)
    out.append(_judge(
        f"memory @ {human(s.large)} vs {human(s.small)}", "not above (≤ +10 MB)",
        None if small is None or large is None or s.small == s.large else large <= small + 10,
        f"{large:.1f} MB vs {small:.1f} MB ({large - small:+.1f} MB)" if small and large else "",
    ))
    out += _sync_targets(results, s)
    return out


def _sync_targets(results: list[Result], s: Settings) -> list[Target]:
    """Sync: the 10,000 msg/s floor, and 2x MQTT QoS 2 on the same loopback."""
    e = _metric(results, "sync", "edgeq", "msgs_per_s")
    m = _metric(results, "sync", "mqtt", "msgs_per_s")
    dup = _metric(results, "sync", "edgeq", "duplicates")
    lost = _metric(results, "sync", "edgeq", "losses")
    once = None if dup is None or lost is None else dup == 0 and lost == 0
    return [
        _judge(
            "sync throughput (edgeq, exactly once)",
            f"≥ 10,000 msg/s over loopback, batches of {s.sync_batch}, server at full durability",
            None if e is None else e >= 10_000 and bool(once),
            f"{e:,.0f} msg/s, {dup:.0f} duplicates, {lost:.0f} lost" if e is not None and once is not None else "",
        ),
        _ratio("sync vs MQTT QoS 2 (mosquitto)", "≥ 2x paho-mqtt QoS 2 → mosquitto (to last PUBCOMP)", e, m, 2, "msg/s"),
    ]

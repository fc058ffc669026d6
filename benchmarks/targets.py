"""The performance targets of the issues, judged met / missed against one run's results."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from benchmarks.cases.cli_start import ROWS
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
    status: str  # met, missed or "n/a" (a figure it needs was not measured)
    ratio: float | None = None  # edgeq's figure over the one it is held to, for a ratio target

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
    status = "n/a" if ok is None else ("met" if ok else "missed")
    return Target(name, goal, measured if ok is not None else "not measured", status)


def _ratio(
    name: str, goal: str, e: float | None, peer: float | None, factor: float, unit: str, *,
    at_most: bool = False,
) -> Target:
    """A target "edgeq at least ``factor`` times ``peer``" (``at_most``: at most, for a cost)."""
    ratio = None if e is None or not peer else e / peer
    target = _judge(
        name, goal,
        None if ratio is None else (ratio <= factor if at_most else ratio >= factor),
        f"{ratio:.2f}x ({e:,.0f} vs {peer:,.0f} {unit})" if ratio is not None and peer else "",
    )
    target.ratio = ratio
    return target


def evaluate(results: list[Result], s: Settings) -> list[Target]:
    """Every target of the issue, in the order it lists them."""
    out: list[Target] = []
    tb = s.target_backlog
    e = _metric(results, "get_confirm", "edgeq", "ops_per_s", tb)
    p = _metric(results, "get_confirm", "pq-ack", "ops_per_s", tb)
    out.append(_ratio(f"get+confirm @ {human(tb)} vs persist-queue", "≥ 20x SQLiteAckQueue get+ack", e, p, 20,
                      "ops/s"))
    lo = _metric(results, "get_confirm", "edgeq", "ops_per_s", s.small)
    hi = _metric(results, "get_confirm", "edgeq", "ops_per_s", s.large)
    out.append(_judge(
        f"get+confirm flat {human(s.small)} → {human(s.large)}",
        f"{human(s.large)} within 20% of {human(s.small)}", None
        if not lo or hi is None or s.small == s.large else hi >= 0.8 * lo,
        f"{hi / lo:.2f}x ({hi:,.0f} vs {lo:,.0f} ops/s)" if lo and hi else "",
    ))
    e = _metric(results, "put_single", "edgeq", "ops_per_s")
    pqs = [v for v in (_metric(results, "put_single", lib, "ops_per_s") for lib in ("pq-ack", "pq-queue"))
           if v]
    pq = max(pqs) if pqs else None
    out.append(_ratio("single durable put vs persist-queue", "≥ 1.5x the faster persist-queue class", e, pq,
                      1.5, "msg/s"))
    out.append(_ratio("single durable put vs persist-queue SQLiteAckQueue", "≥ 1.0x SQLiteAckQueue put", e,
                      _metric(results, "put_single", "pq-ack", "ops_per_s"), 1.0, "msg/s"))
    raw = _metric(results, "put_single", "raw-sqlite", "ops_per_s")
    out.append(_ratio("single durable put vs raw sqlite3", "≥ 0.75x 1 row/txn", e, raw, 0.75, "msg/s"))
    out.append(_ratio("CPU per single durable put vs raw sqlite3", "≤ 2x raw sqlite3's cpu/op (1 row/txn)",
                      _metric(results, "put_single", "edgeq", "cpu_us_per_op"),
                      _metric(results, "put_single", "raw-sqlite", "cpu_us_per_op"), 2, "µs", at_most=True))
    e = _metric(results, "put_batch", "edgeq", "msgs_per_s")
    raw = _metric(results, "put_batch", "raw-sqlite", "msgs_per_s")
    out.append(_ratio("batch put vs raw sqlite3", "≥ 0.5x one transaction", e, raw, 0.5, "msg/s"))
    out += _get_floors(results, s)
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
    out += _fleet_targets(results, s)
    out.append(_aio_target(results))
    out += _rule_targets(results, s)
    out += _waiting_targets(results)
    out += _thread_targets(results)
    out += _slow_flush_targets(results, s)
    out += _cli_targets(results)
    out += _bridge_out_targets(results, s)
    out += _bridge_in_targets(results, s)
    return out


def _bridge_out_targets(results: list[Result], s: Settings) -> list[Target]:
    """Issue 32's floors: each out-bridge ≥ 0.5x its broker's own Python client, side by side in one run;
    its peak RSS flat with the backlog (≤ +5 MB)."""
    n, backlog = s.bridge_messages, s.bridge_backlog
    out = []
    for lib, peer, what in (("edgeq-mqtt-out", "paho-qos1", "MQTT QoS 1: paho-mqtt → mosquitto"),
                            ("edgeq-jetstream-out", "nats-py", "JetStream with acks: nats-py, all at once")):
        kind = lib.removeprefix("edgeq-")
        out.append(_ratio(f"{kind} bridge, {human(n)} msgs, vs the client", f"≥ 0.5x {what}",
                          _metric(results, "bridge_out", lib, "msgs_per_s", n),
                          _metric(results, "bridge_out", peer, "msgs_per_s", n), 0.5, "msg/s"))
        peaks = [_metric(results, "bridge_out", lib, "peak_rss_mb", k) for k in (n, backlog, 2 * backlog)]
        out.append(_flat(f"{kind} bridge memory", *peaks, n, backlog))
    return out


def _flat(name: str, small: float | None, large: float | None, double: float | None, n: int,
          backlog: int) -> Target:
    """Memory flat with the backlog: a bridge's peak RSS at twice ``backlog`` within +1 MB of its peak at
    ``backlog``: no growth with the backlog (what ``n`` to ``backlog`` adds first can be a bounded warm-up,
    SQLite's page cache filling to its cap), all three shown."""
    ok = None if large is None or double is None else double <= large + 1
    shown = (f"{small or 0:.1f} / {large:.1f} / {double:.1f} MB at {human(n)} / {human(backlog)} / "
             f"{human(2 * backlog)} ({double - large:+.1f} MB for twice the backlog)"
             if large is not None and double is not None else "")
    return _judge(f"{name}, {human(backlog)} vs {human(2 * backlog)} backlog",
                  "flat: ≤ +1 MB peak RSS for twice the backlog", ok, shown)


def _bridge_in_targets(results: list[Result], s: Settings) -> list[Target]:
    """Issue 32's in direction: each in-bridge ≥ 0.5x its broker's own Python client publishing the same
    messages (the floor's words; the stricter ratio to the client consuming is shown beside it), and its
    peak RSS flat with the backlog."""
    out = []
    n, big = s.bridge_messages, s.bridge_backlog
    for bridge, client, what in (("edgeq-mqtt-in", "paho", "MQTT QoS 1"),
                                 ("edgeq-jetstream-in", "nats-py", "JetStream, PubAck each")):
        rate = _metric(results, "bridge_in", bridge, "msgs_per_s", n)
        target = _ratio(f"{bridge} bridge vs {client} publishing ({what})",
                        f"≥ 0.5x, {human(n)} messages side by side", rate,
                        _metric(results, "bridge_in", f"{client}-publish", "msgs_per_s", n), 0.5, "msg/s")
        consume = _metric(results, "bridge_in", f"{client}-consume", "msgs_per_s", n)
        if target.ratio is not None and rate and consume:
            target.measured += f"; vs {client} consuming {rate / consume:.2f}x ({consume:,.0f} msg/s)"
        out.append(target)
        peaks = [_metric(results, "bridge_in", bridge, "peak_rss_mb", size) for size in (n, big, 2 * big)]
        out.append(_flat(f"{bridge.removeprefix('edgeq-')} bridge memory", *peaks, n, big))
    return out


#: Issue 31's floors: a command-line row of the cli_start case -> its whole-process ceiling in ms.
CLI_FLOORS_MS = {"edgeq": 100.0, "edgeq-put": 150.0, "edgeq-import": 60.0}


def _cli_targets(results: list[Result]) -> list[Target]:
    """A CLI that starts in a blink: each cli_start row's median wall time within its floor."""
    out = []
    for row, ceiling in CLI_FLOORS_MS.items():
        median = _metric(results, "cli_start", row, "median_ms")
        out.append(_judge(
            f"start-up: {ROWS[row].format(db='DB')}", f"≤ {ceiling:.0f} ms, whole process, median",
            None if median is None else median <= ceiling,
            f"{median:.0f} ms" if median is not None else "",
        ))
    return out


def _get_floors(results: list[Result], s: Settings) -> list[Target]:
    """get+confirm at the smallest and largest backlog: ≥ 0.75x raw sqlite3's two transactions,
    ≥ 1.2x persist-queue's get+ack."""
    out = []
    for size in sorted({s.small, s.large}):
        e = _metric(results, "get_confirm", "edgeq", "ops_per_s", size)
        for lib, peer, floor, what in (("raw-sqlite", "raw sqlite3", 0.75, "lock txn + delete txn"),
                                       ("pq-ack", "persist-queue SQLiteAckQueue", 1.2, "get+ack")):
            out.append(_ratio(f"get+confirm @ {human(size)} vs {peer}", f"≥ {floor}x {peer}'s {what}", e,
                              _metric(results, "get_confirm", lib, "ops_per_s", size), floor, "ops/s"))
    return out


def _slow_flush_targets(results: list[Result], s: Settings) -> list[Target]:
    """Under the slowsync shim (a flush as slow as a cheap SD card's): 8 threads putting ≥ 4x one
    thread, and ≥ 3x raw sqlite3's 8 threads."""
    case, flush = "put_threads_slowsync", f"flush +{s.slowsync_us:,} µs"
    eight = _metric(results, case, "edgeq", "ops_per_s", 8)
    return [
        _ratio(f"durable single puts, 8 threads vs 1, {flush} (edgeq)", "≥ 4x edgeq's own 1-thread rate",
               eight, _metric(results, case, "edgeq", "ops_per_s", 1), 4, "msg/s"),
        _ratio(f"durable single puts, 8 threads, {flush}, vs raw sqlite3", "≥ 3x raw sqlite3's 8 threads",
               eight, _metric(results, case, "raw-sqlite", "ops_per_s", 8), 3, "msg/s"),
    ]


def _fleet_targets(results: list[Result], s: Settings) -> list[Target]:
    """The fleet issue: signed + TLS sync ≥ 80% of plain; compressed bytes per message at
    batches ≥ 100 ≤ 0.5x MQTT QoS 2's; many devices at once without a collapse."""
    plain = _metric(results, "sync_secure", "edgeq", "msgs_per_s")
    secure = _metric(results, "sync_secure", "edgeq-signed-tls", "msgs_per_s")
    out = [_judge(
        "signed + TLS sync vs unsigned plain HTTP", "≥ 80% of plain, in one run",
        None if not plain or secure is None else secure >= 0.8 * plain,
        f"{secure / plain:.0%} ({secure:,.0f} vs {plain:,.0f} msg/s)" if plain and secure else "",
    )]
    for lib, codec in (("edgeq-zstd", "zstd"), ("edgeq-zlib", "zlib")):
        ratios = {b: _metric(results, "wire_bytes", lib, "vs_mqtt", b) for b in s.wire_batches if b >= 100}
        known = {b: r for b, r in ratios.items() if r is not None}
        out.append(_judge(
            f"bytes per message, batches ≥ 100, {codec} vs MQTT QoS 2", "≤ 0.5x MQTT QoS 2's bytes",
            None if not known or len(known) < len(ratios) else max(known.values()) <= 0.5,
            ", ".join(f"batch {b}: {r:.2f}x" for b, r in known.items()),
        ))
    rates = {n: _metric(results, "fleet", "edgeq", "msgs_per_s", n) for n in s.fleet_devices}
    best = max((r for r in rates.values() if r), default=None)
    top = max(s.fleet_devices)
    last = rates.get(top)
    lost = [_metric(results, "fleet", "edgeq", key, top) for key in ("lost", "duplicated")]
    out.append(_judge(
        f"{top} devices at once vs the best fleet size",
        "≥ 80% of the best msg/s at any size; 0 lost, 0 duplicated", None
        if best is None or last is None or None in lost else last >= 0.8 * best and not any(lost),
        f"{last / best:.0%} ({last:,.0f} vs best {best:,.0f} msg/s)" if best and last else "",
    ))
    return out


def _waiting_targets(results: list[Result]) -> list[Target]:
    """Waiting gets: wake-up p50 ≤ 5 ms in one process, ≤ 50 ms across processes; a
    process whose get waits idle uses ≤ 1% of a core."""
    out = []
    for case, where, floor in (("wakeup_same", "same process", 5.0), ("wakeup_other", "other process", 50.0)):
        p50 = _metric(results, case, "edgeq", "p50_ms")
        p99 = _metric(results, case, "edgeq", "p99_ms")
        out.append(_judge(
            f"wake-up after a put, {where} (edgeq)", f"p50 ≤ {floor:g} ms",
            None if p50 is None else p50 <= floor,
            f"p50 {p50:.2f} ms, p99 {p99:.2f} ms" if p50 is not None and p99 is not None else "",
        ))
    cpu = _metric(results, "idle_wait", "edgeq", "cpu_percent")
    wall = _metric(results, "idle_wait", "edgeq", "wall_s")
    out.append(_judge(
        "CPU of a process waiting idle (edgeq)", "≤ 1% of one core",
        None if cpu is None else cpu <= 1.0,
        f"{cpu:.2f}% over {wall:.0f} s" if cpu is not None and wall is not None else "",
    ))
    return out


def _thread_targets(results: list[Result]) -> list[Target]:
    """Group commit: 8 threads at least 4x edgeq's own 1-thread rate, puts and get+confirm."""
    out = []
    for case, what in (("put_threads", "durable single puts"), ("get_confirm_threads", "get+confirm")):
        one = _metric(results, case, "edgeq", "ops_per_s", 1)
        eight = _metric(results, case, "edgeq", "ops_per_s", 8)
        out.append(_ratio(f"{what}, 8 threads vs 1 (edgeq)", "≥ 4x edgeq's own 1-thread rate", eight, one, 4,
                          "ops/s"))
    return out


def _rule_targets(results: list[Result], s: Settings) -> list[Target]:
    """A bound rule (``counters``) costs its own work: put_many ≥ 0.7x, single puts ≥ 0.8x without it."""
    out = []
    cases = ((s.batch_size, f"put_many of {human(s.batch_size)}", 0.7), (1, "single puts", 0.8))
    for size, what, floor in cases:
        bare = _metric(results, "rule_cost", "edgeq", "msgs_per_s", size)
        ruled = _metric(results, "rule_cost", "edgeq-counters", "msgs_per_s", size)
        ratio = _metric(results, "rule_cost", "edgeq-counters", "vs_no_rule", size)
        out.append(_judge(
            f"{what} with the counters rule vs without", f"≥ {floor}x, side by side in one process",
            None if ratio is None else ratio >= floor,
            f"{ratio:.2f}x (median of the rounds' ratios; medians {ruled:,.0f} vs {bare:,.0f} msg/s)"
            if ratio is not None and ruled is not None and bare is not None else "",
        ))
    return out


def _aio_target(results: list[Result]) -> Target:
    """asyncio: 100 coroutines each putting at least 4x the single-coroutine rate."""
    one = _metric(results, "aio_puts", "edgeq", "ops_per_s", 1)
    hundred = _metric(results, "aio_puts", "edgeq", "ops_per_s", 100)
    return _ratio("asyncio puts, 100 coroutines vs 1 (edgeq)", "≥ 4x the single-coroutine rate",
                  hundred, one, 4, "msg/s")


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
            f"≥ 10,000 msg/s pushing {human(s.sync_messages)} over loopback, batches of {s.sync_batch}, "
            "server at full durability",
            None if e is None else e >= 10_000 and bool(once),
            f"{e:,.0f} msg/s, {dup:.0f} duplicates, {lost:.0f} lost"
            if e is not None and once is not None else "",
        ),
        _ratio("sync vs MQTT QoS 2 (mosquitto)", "≥ 2x paho-mqtt QoS 2 → mosquitto (to last PUBCOMP)", e, m,
               2, "msg/s"),
    ]

"""Every report, computed again in plain Python from the server's journal (``journal_since``),
independently of the export and of Spark, following the definitions in docs/pipeline.md."""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from datetime import UTC, date, datetime
from typing import Any

from edgeq.sync.pipeline.job import LATENCY_BUCKETS_MS

from edgeq.journal import JournalEntry

Row = dict[str, Any]


def percentile(values: list[int], p: float) -> float:
    """Linear interpolation between closest ranks (numpy's default, Spark's ``percentile``)."""
    ordered = sorted(values)
    rank = p * (len(ordered) - 1)
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def utc_date(ms: int) -> date:
    return datetime.fromtimestamp(ms / 1000, UTC).date()


def stamp(uid: str) -> int:
    return int(uid.rpartition(".")[2])


def latency_values(entries: list[JournalEntry]) -> dict[tuple[str, str], list[tuple[int, bool]]]:
    out: dict[tuple[str, str], list[tuple[int, bool]]] = defaultdict(list)
    for e in entries:
        if e.kind == "accepted" and e.created_ms is not None and e.confirmed_ms is not None:
            offset = e.clock_offset_ms or 0
            out[(e.device or e.origin, e.queue)].append((e.confirmed_ms - (e.created_ms - offset), e.clock_offset_ms is None))
    return out


def journal_totals(entries: list[JournalEntry]) -> list[Row]:
    counts = Counter((e.kind, e.side) for e in entries)
    return [{"kind": k, "side": s, "entries": n} for (k, s), n in sorted(counts.items())]


def latency(entries: list[JournalEntry]) -> list[Row]:
    rows = []
    for (device, queue), pairs in sorted(latency_values(entries).items()):
        values = [v for v, _ in pairs]
        rows.append({
            "device": device, "queue": queue, "messages": len(values), "uncorrected": sum(u for _, u in pairs),
            "min_ms": min(values), "mean_ms": sum(values) / len(values), "p50_ms": percentile(values, 0.5),
            "p95_ms": percentile(values, 0.95), "p99_ms": percentile(values, 0.99), "max_ms": max(values),
        })
    return rows


def latency_histogram(entries: list[JournalEntry]) -> list[Row]:
    counts: Counter[int] = Counter()
    for pairs in latency_values(entries).values():
        for value, _ in pairs:
            counts[-1 if value < 0 else bisect.bisect_right(LATENCY_BUCKETS_MS, value) - 1] += 1
    edges = [(-1, None, 0)] + [
        (i, low, LATENCY_BUCKETS_MS[i + 1] if i + 1 < len(LATENCY_BUCKETS_MS) else None)
        for i, low in enumerate(LATENCY_BUCKETS_MS)
    ]
    return [{"bucket": b, "low_ms": lo, "high_ms": hi, "messages": counts[b]} for b, lo, hi in edges]


def expired_messages(entries: list[JournalEntry]) -> dict[str, Row]:
    by_uid: dict[str, list[JournalEntry]] = defaultdict(list)
    for e in entries:
        if e.kind == "expired":
            by_uid[e.uid].append(e)
    out = {}
    for uid, group in by_uid.items():
        sides = {e.side for e in group}
        chosen = min(group, key=lambda e: (e.side != "server", e.at_ms, e.queue))
        where = "both" if sides == {"server", "device"} else sides.pop()
        out[uid] = {"queue": chosen.queue, "where": where, "entries": len(group),
                    "date": utc_date(min(e.at_ms for e in group))}
    return out


def expiry_daily(entries: list[JournalEntry]) -> list[Row]:
    acc: dict[tuple[str, date], Row] = {}
    for m in expired_messages(entries).values():
        row = acc.setdefault((m["queue"], m["date"]), {
            "queue": m["queue"], "date": m["date"], "expired": 0, "server_only": 0, "device_only": 0,
            "both": 0, "entries": 0,
        })
        row["expired"] += 1
        row[{"server": "server_only", "device": "device_only", "both": "both"}[m["where"]]] += 1
        row["entries"] += m["entries"]
    return [acc[k] for k in sorted(acc)]


def expiry_where(entries: list[JournalEntry]) -> list[Row]:
    uids: dict[tuple[str, str, str | None], set[str]] = defaultdict(set)
    for e in entries:
        if e.kind == "expired":
            uids[(e.queue, e.side, e.check_point)].add(e.uid)
    return [{"queue": q, "side": s, "check_point": c, "messages": len(u)}
            for (q, s, c), u in sorted(uids.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2] or ""))]


def audit(entries: list[JournalEntry]) -> tuple[list[Row], list[Row], list[Row]]:
    devices = {e.origin for e in entries if e.kind == "accepted" or (
        e.kind == "expired" and e.side == "device" and e.origin.partition(":")[0] == e.device)}
    status: dict[str, dict[str, Any]] = {}
    for e in entries:
        if e.origin not in devices:
            continue
        s = status.setdefault(e.uid, {"origin": e.origin, "accepted": 0, "expired": False, "expired_on_device": False,
                                      "kinds": set(), "first_seen_ms": e.at_ms})
        s["accepted"] += e.kind == "accepted"
        s["expired"] |= e.kind == "expired"
        s["expired_on_device"] |= e.kind == "expired" and e.side == "device"
        s["kinds"].add(e.kind)
        s["first_seen_ms"] = min(s["first_seen_ms"], e.at_ms)
    per_origin: list[Row] = []
    for origin in sorted(devices):
        mine = {u: s for u, s in status.items() if s["origin"] == origin}
        accepted = [stamp(u) for u, s in mine.items() if s["accepted"] > 0]
        per_origin.append({
            "origin": origin, "accepted": len(accepted),
            "first_stamp": min(accepted, default=None), "last_stamp": max(accepted, default=None),
            "duplicates": sum(s["accepted"] > 1 for s in mine.values()),
            "expired_unaccepted": sum(s["accepted"] == 0 and s["expired"] for s in mine.values()),
            "expired_on_device_after_accept": sum(s["accepted"] > 0 and s["expired_on_device"] for s in mine.values()),
            "gaps": sum(s["accepted"] == 0 and not s["expired"] for s in mine.values()),
        })
    times = Counter(e.uid for e in entries if e.kind == "accepted")
    duplicates = []
    for uid, n in sorted(times.items()):
        if n > 1:
            group = [e for e in entries if e.kind == "accepted" and e.uid == uid]
            duplicates.append({"uid": uid, "origin": group[0].origin, "times": n,
                               "queues": sorted({e.queue for e in group}),
                               "first_ms": min(e.at_ms for e in group), "last_ms": max(e.at_ms for e in group)})
    gaps = [{"origin": s["origin"], "uid": u, "stamp": stamp(u), "kinds": sorted(s["kinds"]),
             "first_seen_ms": s["first_seen_ms"]}
            for u, s in sorted(status.items(), key=lambda kv: (kv[1]["origin"], stamp(kv[0])))
            if s["accepted"] == 0 and not s["expired"]]
    return per_origin, duplicates, gaps


def throughput_hourly(entries: list[JournalEntry]) -> list[Row]:
    acc: dict[tuple[int, str], Row] = {}
    for e in entries:
        hour = e.at_ms // 3_600_000 * 3_600_000
        row = acc.setdefault((hour, e.queue), {"hour_ms": hour, "queue": e.queue, "accepted": 0, "delivered": 0,
                                               "expired_entries": 0, "accepted_bytes": 0})
        if e.kind == "accepted":
            row["accepted"] += 1
            row["accepted_bytes"] += e.size or 0
        elif e.kind == "delivered":
            row["delivered"] += 1
        else:
            row["expired_entries"] += 1
    return [acc[k] for k in sorted(acc)]


def all_reports(entries: list[JournalEntry]) -> dict[str, list[Row]]:
    devices, duplicates, gaps = audit(entries)
    return {
        "journal_totals": journal_totals(entries),
        "latency": latency(entries),
        "latency_histogram": latency_histogram(entries),
        "expiry_daily": expiry_daily(entries),
        "expiry_where": expiry_where(entries),
        "audit_devices": devices,
        "audit_duplicates": duplicates,
        "audit_gaps": gaps,
        "throughput_hourly": throughput_hourly(entries),
    }

"""Every report and the headline totals, computed again in plain Python from journal entries
(``journal_since``, or rows read back from an export), independently of Spark, following
the definitions in docs/pipeline.md."""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any

from edgeq.store.journal import JournalEntry
from edgeq.sync.pipeline.report.results import LATENCY_BUCKETS_MS

Row = dict[str, Any]
HOUR = 3_600_000


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


def name_of(origin: str) -> str:
    return origin.partition(":")[0]


def latency_values(entries: list[JournalEntry]) -> dict[tuple[str, str], list[tuple[int, bool]]]:
    out: dict[tuple[str, str], list[tuple[int, bool]]] = defaultdict(list)
    for e in entries:
        if e.kind == "accepted" and e.created_ms is not None and e.confirmed_ms is not None:
            offset = e.clock_offset_ms or 0
            out[(e.device or e.origin, e.queue)].append((e.confirmed_ms - (e.created_ms - offset),
                                                         e.clock_offset_ms is None))
    return out


def journal_totals(entries: list[JournalEntry]) -> list[Row]:
    counts = Counter((e.kind, e.side) for e in entries)
    return [{"kind": k, "side": s, "entries": n} for (k, s), n in sorted(counts.items())]


def latency(entries: list[JournalEntry]) -> list[Row]:
    rows = []
    for (device, queue), pairs in sorted(latency_values(entries).items()):
        values = [v for v, _ in pairs]
        rows.append({
            "device": device, "queue": queue, "messages": len(values),
            "uncorrected": sum(u for _, u in pairs), "min_ms": min(values),
            "mean_ms": sum(values) / len(values), "p50_ms": percentile(values, 0.5),
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


@dataclass
class Story:
    """Everything the journal says about one uid."""

    uid: str
    origin: str
    rows: list[JournalEntry] = field(default_factory=list)

    def of(self, kind: str, side: str | None = None) -> list[JournalEntry]:
        return sorted((e for e in self.rows if e.kind == kind and (side is None or e.side == side)),
                      key=lambda e: e.id)

    @property
    def accepted(self) -> int:
        return len(self.of("accepted"))

    @property
    def delivered(self) -> bool:
        return bool(self.of("delivered"))

    @property
    def category(self) -> str | None:
        """docs/pipeline.md, expiry reconciliation."""
        server, device = bool(self.of("expired", "server")), bool(self.of("expired", "device"))
        if not server and not device:
            return None
        # the origin device's own copy expired (not a copy another device pulled)
        own = any(e.device == name_of(self.origin) for e in self.of("expired", "device"))
        if device and not server and own and self.delivered:
            return "delivered_then_device_expired"
        if device and not server and own and self.accepted:
            return "accepted_then_device_expired"
        return "both" if server and device else "server_only" if server else "device_only"


def stories(entries: list[JournalEntry]) -> dict[str, Story]:
    out: dict[str, Story] = {}
    for e in entries:
        out.setdefault(e.uid, Story(e.uid, e.origin)).rows.append(e)
    return out


def expiry_daily(entries: list[JournalEntry]) -> list[Row]:
    acc: dict[tuple[str, date], Row] = {}
    for s in stories(entries).values():
        if s.category is None:
            continue
        first = (s.of("expired", "server") or s.of("expired", "device"))[0]
        expired = s.of("expired")
        key = (first.queue, utc_date(min(e.at_ms for e in expired)))
        row = acc.setdefault(key, {
            "queue": key[0], "date": key[1], "expired": 0, "server_only": 0, "device_only": 0, "both": 0,
            "delivered_then_device_expired": 0, "accepted_then_device_expired": 0, "entries": 0,
        })
        row[s.category] += 1
        row["expired"] += s.category in ("server_only", "device_only", "both")
        row["entries"] += len(expired)
    return [acc[k] for k in sorted(acc)]


def expiry_where(entries: list[JournalEntry]) -> list[Row]:
    uids: dict[tuple[str, str, str | None], set[str]] = defaultdict(set)
    for e in entries:
        if e.kind == "expired":
            uids[(e.queue, e.side, e.check_point)].add(e.uid)
    return [{"queue": q, "side": s, "check_point": c, "messages": len(u)}
            for (q, s, c), u in sorted(uids.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2] or ""))]


def device_origins(entries: list[JournalEntry]) -> set[str]:
    return {e.origin for e in entries if e.kind in ("accepted", "dead-lettered") or (
        e.kind == "expired" and e.side == "device" and name_of(e.origin) == e.device)}


def from_ms(entries: list[JournalEntry]) -> int | None:
    """The first server-side row: a uid that reached the server before it cannot be audited."""
    return min((e.at_ms for e in entries if e.side == "server"), default=None)


def judged(s: Story, start: int | None) -> str | None:
    """'gap', 'unauditable', or None (accepted, expired or dead-lettered: accounted for)."""
    if s.accepted or s.of("expired") or s.of("dead-lettered") or s.of("discarded"):
        return None
    arrivals = [e.arrived_ms for e in s.rows if e.arrived_ms is not None]
    arrival = min(arrivals) if arrivals else min(e.at_ms for e in s.rows)
    return "unauditable" if start is not None and arrival < start else "gap"


def dead_letter_waiting(s: Story) -> bool:
    """Moved to its device's dead-letter queue and since neither accepted, expired nor deleted there."""
    return bool(s.of("dead-lettered")) and not (s.accepted or s.of("expired") or s.of("discarded"))


def audit(entries: list[JournalEntry]) -> tuple[list[Row], list[Row], list[Row]]:
    devices, start = device_origins(entries), from_ms(entries)
    by_uid = stories(entries)
    per_origin: list[Row] = []
    for origin in sorted(devices):
        mine = [s for s in by_uid.values() if s.origin == origin]
        accepted = [stamp(s.uid) for s in mine if s.accepted]
        per_origin.append({
            "origin": origin, "device": name_of(origin), "accepted": len(accepted),
            "first_stamp": min(accepted, default=None), "last_stamp": max(accepted, default=None),
            "duplicates": sum(s.accepted > 1 for s in mine),
            "expired_unaccepted": sum(not s.accepted and bool(s.of("expired")) for s in mine),
            "expired_on_device_after_accept": sum(bool(s.accepted) and bool(s.of("expired", "device"))
                                                  for s in mine),
            "delivered_then_device_expired": sum(s.category == "delivered_then_device_expired" for s in mine),
            "gaps": sum(judged(s, start) == "gap" for s in mine),
            "unauditable": sum(judged(s, start) == "unauditable" for s in mine),
            "dead_lettered": sum(dead_letter_waiting(s) for s in mine),
        })
    duplicates = []
    for s in sorted(by_uid.values(), key=lambda s: s.uid):
        group = s.of("accepted")
        if len(group) > 1:
            duplicates.append({"uid": s.uid, "origin": s.origin, "times": len(group),
                               "queues": sorted({group[0].queue, group[-1].queue}),
                               "first_ms": min(e.at_ms for e in group),
                               "last_ms": max(e.at_ms for e in group)})
    gaps = [{"origin": s.origin, "uid": s.uid, "stamp": stamp(s.uid),
             "kinds": sorted({e.kind for e in s.rows}),
             "first_seen_ms": min(e.at_ms for e in s.rows)}
            for s in sorted(by_uid.values(), key=lambda s: (s.origin, stamp(s.uid)))
            if s.origin in devices and judged(s, start) == "gap"]
    return per_origin, duplicates, gaps


def throughput_hourly(entries: list[JournalEntry]) -> list[Row]:
    acc: dict[tuple[int, str], Row] = {}
    for e in entries:
        hour = e.at_ms // HOUR * HOUR
        row = acc.setdefault((hour, e.queue),
                             {"hour_ms": hour, "queue": e.queue, "accepted": 0, "delivered": 0,
                              "expired_entries": 0, "accepted_bytes": 0})
        if e.kind == "accepted":
            row["accepted"] += 1
            row["accepted_bytes"] += e.size or 0
        elif e.kind == "delivered":
            row["delivered"] += 1
        elif e.kind == "expired":
            row["expired_entries"] += 1
    return [acc[k] for k in sorted(acc)]


def e2e_latency(entries: list[JournalEntry]) -> list[Row]:
    """Per accepted uid, its first acceptance (by journal id) and its first delivery."""
    groups: dict[tuple[str, str], dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    counts: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    for s in stories(entries).values():
        if not s.accepted:
            continue
        first = s.of("accepted")[0]
        created = min(e.created_ms for e in s.rows if e.created_ms is not None)
        offset = first.clock_offset_ms
        key = (name_of(s.origin), first.queue)
        counts[key]["messages"] += 1
        counts[key]["uncorrected"] += offset is None
        assert first.confirmed_ms is not None
        groups[key]["confirm"].append(first.confirmed_ms - created + (offset or 0))
        groups[key]["confirm_raw"].append(first.confirmed_ms - created)
        if s.delivered:
            delivered = min(e.at_ms for e in s.of("delivered"))
            counts[key]["delivered"] += 1
            groups[key]["delivered"].append(delivered - created + (offset or 0))
            groups[key]["delivered_raw"].append(delivered - created)
    rows = []
    for key in sorted(groups):
        row: Row = {"device": key[0], "queue": key[1],
                    **{k: counts[key][k] for k in ("messages", "delivered", "uncorrected")}}
        for metric in ("confirm", "confirm_raw", "delivered", "delivered_raw"):
            values = groups[key][metric]
            for p in (50, 90, 99):
                row[f"{metric}_p{p}_ms"] = percentile(values, p / 100) if values else None
        rows.append(row)
    return rows


def device_clock_hourly(entries: list[JournalEntry]) -> list[Row]:
    acc: dict[tuple[str, int], list[JournalEntry]] = defaultdict(list)
    for e in entries:
        if e.kind == "accepted" and e.device is not None:
            acc[(e.device, e.at_ms // HOUR * HOUR)].append(e)
    rows = []
    for (device, hour), group in sorted(acc.items()):
        measured = sorted((e for e in group if e.clock_offset_ms is not None), key=lambda e: e.id)
        offsets = [e.clock_offset_ms for e in measured]
        rows.append({"device": device, "hour_ms": hour, "entries": len(group),
                     "offset_min_ms": min(offsets, default=None), "offset_max_ms": max(offsets, default=None),
                     "offset_last_ms": offsets[-1] if offsets else None})
    return rows


def device_health(entries: list[JournalEntry]) -> list[Row]:
    devices, start = device_origins(entries), from_ms(entries)
    by_uid = stories(entries)
    names = {e.device for e in entries if e.device is not None} | {name_of(o) for o in devices}
    rows = []
    for name in sorted(names):
        sent = [e for e in entries if e.device == name]
        accepted = sorted((e for e in sent if e.kind == "accepted"), key=lambda e: e.id)
        measured = [e.clock_offset_ms for e in accepted if e.clock_offset_ms is not None]
        mine = [s for s in by_uid.values() if s.origin in devices and name_of(s.origin) == name]
        reported = {e.uid for e in sent if e.kind == "expired" and e.side == "device"}
        rows.append({
            "device": name,
            "origins": sorted({s.origin for s in mine} | {o for o in devices if name_of(o) == name}),
            "first_seen_ms": min((e.at_ms for e in sent), default=None),
            "last_seen_ms": max((e.at_ms for e in sent), default=None), "accepted": len(accepted),
            "uncorrected": sum(e.clock_offset_ms is None for e in accepted),
            "offset_min_ms": min(measured, default=None), "offset_max_ms": max(measured, default=None),
            "offset_last_ms": measured[-1] if measured else None, "device_expired": len(reported),
            "delivered_then_device_expired": sum(s.category == "delivered_then_device_expired" for s in mine),
            "held_expired": sum(not s.accepted and bool(s.of("expired", "server")) for s in mine),
            "duplicates": sum(s.accepted > 1 for s in mine),
            "gaps": sum(judged(s, start) == "gap" for s in mine),
        })
    return rows


def all_reports(entries: list[JournalEntry]) -> dict[str, list[Row]]:
    devices, duplicates, gaps = audit(entries)
    return {
        "journal_totals": journal_totals(entries),
        "latency": latency(entries),
        "latency_histogram": latency_histogram(entries),
        "e2e_latency": e2e_latency(entries),
        "expiry_daily": expiry_daily(entries),
        "expiry_where": expiry_where(entries),
        "audit_devices": devices,
        "audit_duplicates": duplicates,
        "audit_gaps": gaps,
        "throughput_hourly": throughput_hourly(entries),
        "device_health": device_health(entries),
        "device_clock_hourly": device_clock_hourly(entries),
    }


def totals(entries: list[JournalEntry]) -> dict[str, int | float]:
    """The headline figures (results.TOTALS)."""
    by_uid = stories(entries)
    devices, start = device_origins(entries), from_ms(entries)
    kinds = Counter(e.kind for e in entries)
    categories = Counter(s.category for s in by_uid.values())
    mine = [s for s in by_uid.values() if s.origin in devices]
    out: dict[str, int | float] = {
        "journal_rows": len(entries), "accepted": sum(bool(s.accepted) for s in by_uid.values()),
        "accepted_entries": kinds["accepted"], "delivered": sum(s.delivered for s in by_uid.values()),
        "delivered_entries": kinds["delivered"], "expired_entries": kinds["expired"],
        "expired": categories["server_only"] + categories["device_only"] + categories["both"],
        "expired_server_only": categories["server_only"], "expired_device_only": categories["device_only"],
        "expired_both": categories["both"],
        "delivered_then_device_expired": categories["delivered_then_device_expired"],
        "accepted_then_device_expired": categories["accepted_then_device_expired"],
        "duplicates": sum(s.accepted > 1 for s in by_uid.values()),
        "gaps": sum(judged(s, start) == "gap" for s in mine),
        "unauditable": sum(judged(s, start) == "unauditable" for s in mine),
        "dead_lettered": sum(dead_letter_waiting(s) for s in mine),
        "devices": len(devices), "device_names": len({e.device for e in entries if e.device is not None}),
        "queues": len({e.queue for e in entries}),
        "uncorrected": sum(u for pairs in latency_values(entries).values() for _, u in pairs),
    }
    latencies = [v for pairs in latency_values(entries).values() for v, _ in pairs]
    if latencies:
        out["latency_p50_ms"], out["latency_p99_ms"] = percentile(latencies, 0.5), percentile(latencies, 0.99)
    e2e = []
    for s in by_uid.values():
        if s.accepted and s.delivered:
            first = s.of("accepted")[0]
            created = min(e.created_ms for e in s.rows if e.created_ms is not None)
            e2e.append(min(e.at_ms for e in s.of("delivered")) - created + (first.clock_offset_ms or 0))
    if e2e:
        out["e2e_p50_ms"], out["e2e_p99_ms"] = percentile(e2e, 0.5), percentile(e2e, 0.99)
    return out

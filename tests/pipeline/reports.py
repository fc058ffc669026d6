"""PipelineResult objects built by hand, shaped as the job fills them, for the report tests
(no Spark needed): each report's rows, counts, totals and audit scope."""

from __future__ import annotations

from datetime import date
from typing import Any

from edgeq.sync.pipeline.report.results import COLUMNS, LATENCY_BUCKETS_MS, REPORTS, PipelineResult

HOUR = 3_600_000
#: 2025-11-21T22:00:00Z
T0 = 1_763_762_400_000
#: A uid stamp (created_ms * 1000 + n): 2026-11-22T20:22:20.077Z, the issue's example.
STAMP = 1_795_378_940_077_000


def histogram(counts: dict[int, int]) -> list[dict[str, Any]]:
    """``latency_histogram`` rows with ``counts`` by lower bound (ms; -1: below 0)."""
    rows = [{"bucket": -1, "low_ms": None, "high_ms": 0, "messages": counts.get(-1, 0)}]
    bounds = list(LATENCY_BUCKETS_MS)
    for i, low in enumerate(bounds):
        high = bounds[i + 1] if i + 1 < len(bounds) else None
        rows.append({"bucket": i, "low_ms": low, "high_ms": high, "messages": counts.get(low, 0)})
    return rows


def throughput(hours: int, queues: tuple[str, ...] = ("ORDERS", "TELEMETRY")) -> list[dict[str, Any]]:
    return [
        {"hour": None, "hour_ms": T0 + h * HOUR, "queue": q, "accepted": 40 + 7 * h + len(q),
         "delivered": 30 + 5 * h, "expired_entries": 3 + h % 4, "accepted_bytes": 1000 * (40 + h)}
        for h in range(hours) for q in queues
    ]


def sample(*, hours: int = 4, devices: int = 3, duplicates: int = 0, gaps: int = 0) -> PipelineResult:
    """A result as a small run gives it: ``devices`` devices, ``hours`` hours of throughput."""
    names = [f"DEV{i + 1}" for i in range(devices)]
    offsets = {n: (1_500, -700, 0, 90_000)[i % 4] for i, n in enumerate(names)}
    rows: dict[str, list[dict[str, Any]]] = {
        "journal_totals": [{"kind": "accepted", "side": "server", "entries": 600},
                           {"kind": "delivered", "side": "server", "entries": 420},
                           {"kind": "expired", "side": "device", "entries": 30},
                           {"kind": "expired", "side": "server", "entries": 25}],
        "latency": [{"device": n, "queue": q, "messages": 100, "uncorrected": 100 if offsets[n] == 0 else 0,
                     "min_ms": 3, "mean_ms": 900.5, "p50_ms": 640.0, "p95_ms": 2100.0, "p99_ms": 2450.25,
                     "max_ms": 2600} for n in names for q in ("ORDERS", "TELEMETRY")],
        "latency_histogram": histogram({5: 10, 100: 80, 200: 150, 500: 220, 1000: 90, 2000: 50}),
        "e2e_latency": [{"device": n, "queue": "ORDERS", "messages": 100, "delivered": 70,
                         "uncorrected": 100 if offsets[n] == 0 else 0,
                         **{f"{what}_p{p}_ms": float(base * p) for what, base in
                            (("confirm", 20), ("confirm_raw", 21), ("delivered", 900), ("delivered_raw", 905))
                            for p in (50, 90, 99)}} for n in names],
        "expiry_daily": [{"queue": "TELEMETRY", "date": date(2025, 11, 21 + d), "expired": 12 + d,
                          "server_only": 5, "device_only": 4 + d, "both": 3,
                          "delivered_then_device_expired": 2, "accepted_then_device_expired": 1,
                          "entries": 15 + d} for d in range(2)],
        "expiry_where": [{"queue": "TELEMETRY", "side": s, "check_point": c, "messages": 4}
                         for s, c in (("server", "add"), ("server", "sweep"), ("device", "sweep"))],
        "audit_devices": [{"origin": f"{n}:k{i}x7q", "device": n, "accepted": 200, "first_stamp": STAMP,
                           "last_stamp": STAMP + 3_600_000_000, "duplicates": duplicates if i == 0 else 0,
                           "expired_unaccepted": 4, "expired_on_device_after_accept": 2,
                           "delivered_then_device_expired": 2, "gaps": gaps if i == 0 else 0,
                           "unauditable": 0, "dead_lettered": 0}
                          for i, n in enumerate(names)],
        "audit_duplicates": [{"uid": f"DEV1:k0x7q.{STAMP + i}", "origin": "DEV1:k0x7q", "times": 2,
                              "queues": ["ORDERS"], "first_ms": T0 + 60_000, "last_ms": T0 + 900_000}
                             for i in range(duplicates)],
        "audit_gaps": [{"origin": "DEV1:k0x7q", "uid": f"DEV1:k0x7q.{STAMP + 10 + i}",
                        "stamp": STAMP + 10 + i,
                        "kinds": ["delivered"], "first_seen_ms": T0 + 120_000} for i in range(gaps)],
        "throughput_hourly": throughput(hours),
        "device_health": [{"device": n, "origins": [f"{n}:k{i}x7q"], "first_seen_ms": T0,
                           "last_seen_ms": T0 + 3 * HOUR,
                           "accepted": 200, "uncorrected": 200 if offsets[n] == 0 else 0,
                           "offset_min_ms": offsets[n] - 40, "offset_max_ms": offsets[n] + 40,
                           "offset_last_ms": offsets[n], "device_expired": 4,
                           "delivered_then_device_expired": 2, "held_expired": 0, "duplicates": 0,
                           "gaps": 0} for i, n in enumerate(names)],
        "device_clock_hourly": [{"device": n, "hour": None, "hour_ms": T0 + h * HOUR, "entries": 50,
                                 "offset_min_ms": offsets[n] - 10 * h, "offset_max_ms": offsets[n] + 10 * h,
                                 "offset_last_ms": offsets[n] + 5 * h} for n in names for h in range(hours)],
    }
    assert set(rows) == set(REPORTS)
    for name, table in rows.items():
        assert all(set(r) == set(COLUMNS[name]) for r in table), name
    totals: dict[str, int | float] = {
        "journal_rows": 1075, "accepted": 598, "accepted_entries": 600, "delivered": 420,
        "delivered_entries": 420, "expired": 25, "expired_server_only": 10, "expired_device_only": 9,
        "expired_both": 6, "delivered_then_device_expired": 4, "accepted_then_device_expired": 2,
        "expired_entries": 55, "duplicates": duplicates, "gaps": gaps, "unauditable": 0, "dead_lettered": 0,
        "devices": devices, "device_names": devices,
        "queues": 2, "uncorrected": 200, "latency_p50_ms": 640.0, "latency_p99_ms": 2450.25,
        "e2e_p50_ms": 45_000.0, "e2e_p99_ms": 89_100.0,
    }
    return PipelineResult(
        journal="/data/journal", out="/data/reports", rows=rows, counts={n: len(t) for n, t in rows.items()},
        seconds={n: 0.5 for n in rows}, totals=totals, journal_rows=1075, total_seconds=12.3,
        audit_scope={"mode": "full", "from_ms": T0, "text": "every part file read; the journal starts at "
                     "2025-11-21T22:00Z, so every device message in it is judged"},
    )


def documented_schema() -> dict[str, list[tuple[str, str, str]]]:
    """docs/pipeline.md's "Schema" section: (column, type, what the third cell says) per
    table, the exported journal as ``"journal"``, each report by its name."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "pipeline.md").read_text("utf-8")
    section = text[text.index("\n## Schema\n"):]
    section = section[: section.index("\n## ", 1)]
    tables: dict[str, list[tuple[str, str, str]]] = {}
    current = ""
    for line in section.splitlines():
        if line.startswith("### The exported journal"):
            current = "journal"
        elif (heading := re.match(r"#### `(\w+)`", line)) is not None:
            current = heading.group(1)
        elif current and (row := re.match(r"\| `(\w+)` \| ([\w<>]+) \| (.*) \|$", line)) is not None:
            tables.setdefault(current, []).append((row.group(1), row.group(2), row.group(3)))
    return tables

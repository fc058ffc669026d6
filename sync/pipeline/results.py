"""What the analytics job produces, defined apart from the Spark code: the reports
(names, descriptions, row order), the latency buckets, and :class:`PipelineResult`.
Both the job and the report writer use these."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["COLLECT_LIMIT", "LATENCY_BUCKETS_MS", "ORDER_BY", "REPORTS", "PipelineResult"]

#: The reports, in the order they are computed, with a one-line description.
REPORTS: dict[str, str] = {
    "journal_totals": "journal entries per kind and side",
    "latency": "delivery latency (creation to server confirm) per device and queue",
    "latency_histogram": "delivery latency distribution (all devices and queues)",
    "expiry_daily": "distinct expired messages per queue and day, by where they expired",
    "expiry_where": "expired messages per queue, side and check point",
    "audit_devices": "exactly-once audit per origin device",
    "audit_duplicates": "uids accepted more than once (must be empty)",
    "audit_gaps": "uids of a device seen in the journal but never accepted nor expired (must be empty)",
    "throughput_hourly": "accepted, delivered and expired entries per queue and hour",
}

#: How each report's rows are ordered (the Parquet files and :attr:`PipelineResult.rows`).
ORDER_BY: dict[str, tuple[str, ...]] = {
    "journal_totals": ("kind", "side"),
    "latency": ("device", "queue"),
    "latency_histogram": ("bucket",),
    "expiry_daily": ("queue", "date"),
    "expiry_where": ("queue", "side", "check_point"),
    "audit_devices": ("origin",),
    "audit_duplicates": ("origin", "uid"),
    "audit_gaps": ("origin", "stamp"),
    "throughput_hourly": ("hour_ms", "queue"),
}

#: Lower bounds (ms) of the latency histogram's buckets; a latency below 0 (clocks
#: disagreeing beyond the recorded offset) has its own bucket, -1.
LATENCY_BUCKETS_MS: tuple[int, ...] = (
    0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 30_000, 60_000,
    120_000, 300_000, 600_000, 1_800_000, 3_600_000, 21_600_000, 86_400_000,
)

#: How many rows of each report :class:`PipelineResult` keeps for the summary (all are in the Parquet).
COLLECT_LIMIT = 10_000


@dataclass(slots=True)
class PipelineResult:
    """What a run produced: each report's rows (up to ``COLLECT_LIMIT``) as dicts, its row count,
    where it was written, and how long each step took."""

    journal: str
    out: str
    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    journal_rows: int = 0
    total_seconds: float = 0.0

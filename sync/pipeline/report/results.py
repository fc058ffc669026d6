"""What the analytics job produces (reports, totals, latency buckets, :class:`PipelineResult`): the
contract between the job and the report writer, standard library only (loads on a bare Spark driver)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "COLLECT_LIMIT",
    "COLUMNS",
    "LATENCY_BUCKETS_MS",
    "ORDER_BY",
    "REPORTS",
    "SCHEMA_VERSION",
    "TOTALS",
    "PipelineResult",
]

#: Version of the reports' schema (their names and columns, :data:`COLUMNS`), written to
#: ``OUT/_edgeq_reports.json``. Version 1 had nine reports; version 2 added ``e2e_latency``,
#: ``device_health``, ``device_clock_hourly``, the expiry categories for a device copy that
#: expired after acceptance, and the audit's ``device`` and ``unauditable`` columns; version
#: 3 added ``audit_devices.dead_lettered`` (messages waiting in a device's dead-letter queue).
SCHEMA_VERSION = 3

#: The reports, in the order they are written, with a one-line description.
REPORTS: dict[str, str] = {
    "journal_totals": "journal entries per kind and side",
    "latency": "delivery latency (creation to server confirm) per device and queue",
    "latency_histogram": "delivery latency distribution (all devices and queues)",
    "e2e_latency": (
        "end-to-end latency per device and queue: creation to server confirm beside creation to first "
        "delivery (consumption), each corrected by the device's clock offset and raw (uncorrected)"
    ),
    "expiry_daily": (
        "distinct expired messages per queue and day, by where they expired; a device copy that expired "
        "after the server accepted the message is counted apart, not as an expired message"
    ),
    "expiry_where": "expired messages per queue, side and check point",
    "audit_devices": "exactly-once audit per origin device",
    "audit_duplicates": "uids accepted more than once (must be empty)",
    "audit_gaps": "uids of a device seen in the journal but never accepted nor expired (must be empty)",
    "throughput_hourly": "accepted, delivered and expired entries per queue and hour",
    "device_health": (
        "per device: when the journal last saw it, its clock offset, what it sent and what expired; "
        "the journal does not record syncs, failing syncs, refusals or puts held now, so neither does this"
    ),
    "device_clock_hourly": (
        "each device's clock offset (device clock minus server clock) per hour: min, max, last"
    ),
}

#: Every report's columns, in order (the Parquet files have exactly these).
COLUMNS: dict[str, tuple[str, ...]] = {
    "journal_totals": ("kind", "side", "entries"),
    "latency": ("device", "queue", "messages", "uncorrected", "min_ms", "mean_ms", "p50_ms", "p95_ms",
                "p99_ms", "max_ms"),
    "latency_histogram": ("bucket", "low_ms", "high_ms", "messages"),
    "e2e_latency": (
        "device", "queue", "messages", "delivered", "uncorrected",
        "confirm_p50_ms", "confirm_p90_ms", "confirm_p99_ms",
        "confirm_raw_p50_ms", "confirm_raw_p90_ms", "confirm_raw_p99_ms",
        "delivered_p50_ms", "delivered_p90_ms", "delivered_p99_ms",
        "delivered_raw_p50_ms", "delivered_raw_p90_ms", "delivered_raw_p99_ms",
    ),
    "expiry_daily": ("queue", "date", "expired", "server_only", "device_only", "both",
                     "delivered_then_device_expired", "accepted_then_device_expired", "entries"),
    "expiry_where": ("queue", "side", "check_point", "messages"),
    "audit_devices": ("origin", "device", "accepted", "first_stamp", "last_stamp", "duplicates",
                      "expired_unaccepted", "expired_on_device_after_accept", "delivered_then_device_expired",
                      "gaps", "unauditable", "dead_lettered"),
    "audit_duplicates": ("uid", "origin", "times", "queues", "first_ms", "last_ms"),
    "audit_gaps": ("origin", "uid", "stamp", "kinds", "first_seen_ms"),
    "throughput_hourly": ("hour", "hour_ms", "queue", "accepted", "delivered", "expired_entries",
                          "accepted_bytes"),
    "device_health": ("device", "origins", "first_seen_ms", "last_seen_ms", "accepted", "uncorrected",
                      "offset_min_ms", "offset_max_ms", "offset_last_ms", "device_expired",
                      "delivered_then_device_expired", "held_expired", "duplicates", "gaps"),
    "device_clock_hourly": ("device", "hour", "hour_ms", "entries", "offset_min_ms", "offset_max_ms",
                            "offset_last_ms"),
}

#: How each report's rows are ordered (the Parquet files and :attr:`PipelineResult.rows`).
ORDER_BY: dict[str, tuple[str, ...]] = {
    "journal_totals": ("kind", "side"),
    "latency": ("device", "queue"),
    "latency_histogram": ("bucket",),
    "e2e_latency": ("device", "queue"),
    "expiry_daily": ("queue", "date"),
    "expiry_where": ("queue", "side", "check_point"),
    "audit_devices": ("origin",),
    "audit_duplicates": ("origin", "uid"),
    "audit_gaps": ("origin", "stamp"),
    "throughput_hourly": ("hour_ms", "queue"),
    "device_health": ("device",),
    "device_clock_hourly": ("device", "hour_ms"),
}

#: The headline figures of :attr:`PipelineResult.totals`, computed by Spark over all the data
#: (never from the collected rows), with what each means. Counts are ints; ``*_ms`` are floats
#: (exact percentiles) and are absent when there is nothing to measure (no accepted or no
#: delivered message).
TOTALS: dict[str, str] = {
    "journal_rows": "journal entries the reports cover (all runs so far, for an incremental run)",
    "accepted": "distinct messages (uids) the server accepted",
    "accepted_entries": "accepted journal entries (a duplicate acceptance counts twice)",
    "delivered": "distinct messages delivered (consumed) on the server",
    "delivered_entries": "delivered journal entries",
    "expired": "messages expired: expired_server_only + expired_device_only + expired_both",
    "expired_server_only": "messages that expired on the server only",
    "expired_device_only": "messages that expired on their device, never accepted by the server",
    "expired_both": "messages that expired on both sides (MQe's 'may seem to expire twice'), counted once",
    "delivered_then_device_expired": (
        "device messages delivered on the server whose copy on their device expired later (a lost confirm "
        "reply): not expired, not lost"
    ),
    "accepted_then_device_expired": (
        "device messages accepted by the server, not delivered yet, whose copy on their device expired: "
        "not expired, not lost"
    ),
    "expired_entries": "expired journal entries (both sides)",
    "duplicates": "uids accepted more than once (must be 0)",
    "gaps": "device uids in the journal never accepted nor expired (must be 0)",
    "dead_lettered": (
        "device messages waiting in their device's dead-letter queue (refused by the server refusal_limit "
        "times; neither re-sent and accepted, expired nor deleted since): for an operator (edgeq dlq)"
    ),
    "unauditable": (
        "device uids the audit could not judge: seen without acceptance, but they reached the server "
        "before the data the job has seen starts, so their acceptance may lie before it"
    ),
    "devices": "device stores audited (origins)",
    "device_names": "devices (names) that sent or reported something",
    "queues": "queues in the journal",
    "uncorrected": "accepted entries without a measured clock offset (their latency is uncorrected)",
    "latency_p50_ms": "median creation-to-confirm latency over all accepted entries, offset-corrected",
    "latency_p99_ms": (
        "99th percentile creation-to-confirm latency over all accepted entries, offset-corrected"
    ),
    "e2e_p50_ms": "median creation-to-first-delivery latency over all delivered messages, offset-corrected",
    "e2e_p99_ms": "99th percentile creation-to-first-delivery latency, offset-corrected",
}

#: Lower bounds (ms) of the latency histogram's buckets; a latency below 0 (clocks
#: disagreeing beyond the recorded offset) has its own bucket, -1.
LATENCY_BUCKETS_MS: tuple[int, ...] = (
    0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 30_000, 60_000,
    120_000, 300_000, 600_000, 1_800_000, 3_600_000, 21_600_000, 86_400_000,
)

#: How many rows of each report :class:`PipelineResult` keeps by default (all are in the
#: Parquet; the figures in :attr:`PipelineResult.totals` never depend on it).
COLLECT_LIMIT = 10_000


@dataclass(slots=True)
class PipelineResult:
    """What a run produced (docs/pipeline.md, 'Headline totals'): ``rows``, each report's first
    ``collect_limit`` rows (never sum them for a headline: use ``totals``), ``counts``, ``audit_scope``."""

    journal: str
    out: str
    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    totals: dict[str, int | float] = field(default_factory=dict)
    audit_scope: dict[str, Any] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION
    journal_rows: int = 0
    total_seconds: float = 0.0

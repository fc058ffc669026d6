"""The reports and the headline totals, read off the state (every run's, merged).

Everything here reads small datasets: aggregates, partials, and the latencies as one
sorted array per group (:mod:`edgeq.sync.pipeline.latency`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from edgeq.sync.pipeline import audit, latency, traffic
from edgeq.sync.pipeline.errors import PipelineError
from edgeq.sync.pipeline.state import State, read_dataset

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["finals", "totals"]


def _need(spark: SparkSession, state: State, name: str) -> DataFrame:
    frame = read_dataset(spark, state, name)
    if frame is None:
        raise PipelineError(f"the job's state has no {name!r} dataset: run again with --full to rebuild it")
    return frame


def finals(spark: SparkSession, state: State) -> dict[str, DataFrame]:
    """Every report's DataFrame (by name, in :data:`~edgeq.sync.pipeline.results.REPORTS`
    order), from ``state``."""
    e2e = _need(spark, state, "e2e")
    queues = _need(spark, state, "queues")
    partials = _need(spark, state, "audit")
    devices = audit.device_origins(partials)
    hourly = _need(spark, state, "device_hourly")
    return {
        "journal_totals": traffic.journal_totals(_need(spark, state, "kinds")),
        "latency": latency.latency(_need(spark, state, "latency_groups")),
        "latency_histogram": latency.latency_histogram(_need(spark, state, "latency_buckets")),
        "e2e_latency": latency.e2e_latency(e2e, queues),
        "expiry_daily": audit.expiry_daily(_need(spark, state, "expiry_daily"), queues),
        "expiry_where": audit.expiry_where(_need(spark, state, "expiry_where")),
        "audit_devices": audit.audit_devices(partials, devices),
        "audit_duplicates": audit.audit_duplicates(_need(spark, state, "dups"), queues),
        "audit_gaps": audit.audit_gaps(_need(spark, state, "gaps")),
        "throughput_hourly": traffic.throughput_hourly(_need(spark, state, "throughput")),
        "device_health": traffic.device_health(hourly, partials, devices, _need(spark, state, "device_expired")),
        "device_clock_hourly": traffic.device_clock_hourly(hourly),
    }


def totals(spark: SparkSession, state: State) -> dict[str, int | float]:
    """The headline figures (:data:`~edgeq.sync.pipeline.results.TOTALS`): small aggregates over
    the whole state, each turned into ``(name, value)`` rows, collected at once (one union)."""
    from pyspark.sql import functions as F

    kinds = _need(spark, state, "kinds")
    partials = _need(spark, state, "audit")
    daily = _need(spark, state, "expiry_daily")
    def kind(name: str) -> Any:
        return F.sum(F.when(F.col("kind") == name, F.col("entries")).otherwise(0))

    def figures(frame: DataFrame, **named: Any) -> DataFrame:
        pairs = [F.struct(F.lit(n).alias("name"), F.col(n).cast("double").alias("value")) for n in named]
        return frame.agg(*(c.alias(n) for n, c in named.items())).select(F.inline(F.array(*pairs)))

    def p50_p99(counts: DataFrame, prefix: str) -> DataFrame:
        """The p50 and p99 of ``latency_ms`` weighted by ``messages`` (every device and queue)."""
        pct = counts.agg(F.percentile("latency_ms", [0.5, 0.99], F.col("messages")).alias("p"))
        return pct.select(F.inline(F.array(*(
            F.struct(F.lit(f"{prefix}_p{round(p * 100)}_ms").alias("name"), F.col("p")[i].alias("value"))
            for i, p in enumerate((0.5, 0.99))
        ))))

    devices = partials.groupBy("origin").agg(
        F.max("evidence").alias("evidence"), F.sum("unauditable").alias("unauditable"), F.sum("gaps").alias("gaps"))
    parts = [
        figures(kinds, journal_rows=F.sum("entries"), accepted_entries=kind("accepted"),
                delivered_entries=kind("delivered"), expired_entries=kind("expired")),
        figures(partials, accepted=F.sum("accepted"), delivered=F.sum("delivered")),
        figures(devices.filter(F.col("evidence") == 1), unauditable=F.sum("unauditable"), gaps=F.sum("gaps"),
                devices=F.count("*")),
        figures(_need(spark, state, "dups"), duplicates=F.count("*")),
        figures(daily, expired=F.sum("expired"), expired_server_only=F.sum("server_only"),
                expired_device_only=F.sum("device_only"), expired_both=F.sum("both"),
                delivered_then_device_expired=F.sum("delivered_then_device_expired"),
                accepted_then_device_expired=F.sum("accepted_then_device_expired")),
        figures(_need(spark, state, "device_hourly"), device_names=F.count_distinct("device")),
        figures(_need(spark, state, "queues"), queues=F.count_distinct("queue"),
                queue_id_clashes=F.count_distinct("queue") - F.count_distinct("qid")),
        figures(_need(spark, state, "latency_groups"), uncorrected=F.sum("uncorrected")),
        p50_p99(_need(spark, state, "latency_values"), "latency"),
        p50_p99(_need(spark, state, "e2e_delivered"), "e2e"),
    ]
    union = parts[0]
    for part in parts[1:]:
        union = union.unionByName(part)
    got = {r["name"]: r["value"] for r in union.collect()}
    if got.pop("queue_id_clashes", 0):
        raise PipelineError(
            "two queue names have the same 64-bit hash, which the job uses as their id: report this to edgeq's "
            "maintainers with the queue names (edgeq export's journal has them)"
        )
    # Percentiles are absent when there is nothing to measure; every count is an int.
    return {name: (float(v) if name.endswith("_ms") else int(v or 0)) for name, v in got.items()
            if v is not None or not name.endswith("_ms")}

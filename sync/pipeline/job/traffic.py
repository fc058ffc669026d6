"""What adds up row by row: entries per kind, throughput per queue and hour, each device's activity and
clock offset per hour, the queue names: small mergeable datasets the reports are read off."""

from __future__ import annotations

from typing import TYPE_CHECKING

from edgeq.sync.pipeline.export.layout import REQUIRED
from edgeq.sync.pipeline.job.merge import Col, Spec, is_
from edgeq.sync.pipeline.job.uids import device_name, queue_id

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = [
    "device_clock_hourly",
    "device_health",
    "device_hourly",
    "journal_totals",
    "kind_totals",
    "queue_names",
    "throughput",
    "throughput_hourly",
]

HOUR_MS = 3_600_000


def _hour() -> Column:
    from pyspark.sql import functions as F

    return (F.floor(F.col("at_ms") / HOUR_MS) * HOUR_MS).cast("long")


def kind_totals(*, check_nulls: bool = True) -> Spec:
    """Entries per kind and side, the earliest ``at_ms``, and ``incomplete``: rows lacking a column
    the journal always fills (counted only with ``check_nulls``)."""
    from pyspark.sql import functions as F

    incomplete = F.lit(False)
    for name in REQUIRED if check_nulls else ():
        incomplete = incomplete | F.col(name).isNull()
    cols = (Col("entries", F.lit(1).cast("long"), "sum"), Col("incomplete", incomplete.cast("long"), "sum"),
            Col("first_ms", F.col("at_ms"), "min"))
    keys = (F.coalesce(F.col("kind"), F.lit("?")), F.coalesce(F.col("side"), F.lit("?")))
    return Spec(keys, ("kind", "side"), cols)


def journal_totals(totals: DataFrame) -> DataFrame:
    """Report ``journal_totals``."""
    return totals.select("kind", "side", "entries")


def throughput() -> Spec:
    """Per queue and UTC hour: accepted, delivered and expired entries, accepted bytes."""
    from pyspark.sql import functions as F

    acc = is_("kind", "accepted")
    cols = (
        Col("accepted", acc.cast("long"), "sum"),
        Col("delivered", is_("kind", "delivered").cast("long"), "sum"),
        Col("expired_entries", is_("kind", "expired").cast("long"), "sum"),
        Col("accepted_bytes",
            F.when(acc, F.coalesce(F.col("size"), F.lit(0))).otherwise(0).cast("long"), "sum"),
    )
    return Spec(("queue", _hour()), ("queue", "hour_ms"), cols)


def throughput_hourly(state: DataFrame) -> DataFrame:
    """Report ``throughput_hourly``."""
    from pyspark.sql import functions as F

    return state.select(F.timestamp_millis("hour_ms").alias("hour"), "hour_ms", "queue", "accepted",
                        "delivered", "expired_entries", "accepted_bytes")


def queue_names() -> Spec:
    """Every queue name and its id (:func:`~edgeq.sync.pipeline.job.uids.queue_id`)."""
    from pyspark.sql import functions as F

    return Spec((queue_id(), "queue"), ("qid", "queue"), (Col("entries", F.lit(1).cast("long"), "sum"),))


def device_hourly() -> Spec:
    """Per device (who sent an acceptance or reported a device-side expiry) and UTC hour: rows,
    acceptances, those without an offset, and the offsets measured (min, max, last by journal id)."""
    from pyspark.sql import functions as F

    acc = is_("kind", "accepted")
    offset = F.col("clock_offset_ms")
    measured = acc & offset.isNotNull()
    cols = (
        Col("rows", F.lit(1).cast("long"), "sum"),
        Col("accepted", acc.cast("long"), "sum"),
        Col("uncorrected", (acc & offset.isNull()).cast("long"), "sum"),
        Col("offset_min_ms", F.when(measured, offset), "min"),
        Col("offset_max_ms", F.when(measured, offset), "max"),
        Col("offset_last_id", F.when(measured, F.col("id")), "max"),
        Col("offset_last_ms", F.when(measured, offset), "max_by:offset_last_id"),
        Col("first_ms", F.col("at_ms"), "min"),
        Col("last_ms", F.col("at_ms"), "max"),
    )
    return Spec(("device", _hour()), ("device", "hour_ms"), cols, F.col("device").isNotNull())


def device_clock_hourly(state: DataFrame) -> DataFrame:
    """Report ``device_clock_hourly``: hours in which a device had messages accepted."""
    from pyspark.sql import functions as F

    return state.filter(F.col("accepted") > 0).select(
        "device", F.timestamp_millis("hour_ms").alias("hour"), "hour_ms", F.col("accepted").alias("entries"),
        "offset_min_ms", "offset_max_ms", "offset_last_ms",
    )


def device_health(hourly: DataFrame, audit: DataFrame, devices: DataFrame, expired: DataFrame | None,
                  contacts: DataFrame | None = None) -> DataFrame:
    """Report ``device_health``: per device name, from its hourly activity, the audit of its origins
    (``audit``, ``devices``), what it reported expired (``expired``) and its last request (``contacts``)."""
    from pyspark.sql import functions as F

    activity = hourly.groupBy("device").agg(
        F.min("first_ms").alias("first_seen_ms"),
        F.max("last_ms").alias("last_row_ms"),
        F.sum("accepted").cast("long").alias("accepted"),
        F.sum("uncorrected").cast("long").alias("uncorrected"),
        F.min("offset_min_ms").alias("offset_min_ms"),
        F.max("offset_max_ms").alias("offset_max_ms"),
        F.max_by("offset_last_ms", "offset_last_id").alias("offset_last_ms"),
    )
    own = (
        audit.join(F.broadcast(devices), "origin", "left_semi")
        .groupBy(device_name().alias("device"))
        .agg(
            F.array_sort(F.collect_set("origin")).alias("origins"),
            *(F.sum(c).cast("long").alias(c) for c in ("delivered_then_device_expired", "held_expired",
                                                       "duplicates", "gaps")),
        )
    )
    joined = activity.join(own, "device", "full_outer")
    if contacts is not None:
        joined = joined.join(F.broadcast(contacts.withColumnRenamed("last_seen_ms", "request_ms")),
                             "device", "left")
        last_seen = F.greatest(F.col("last_row_ms"), F.col("request_ms"))  # greatest skips a null
    else:
        last_seen = F.col("last_row_ms")
    if expired is not None:
        joined = joined.join(
            expired.groupBy("device").agg(F.sum("device_expired").cast("long").alias("device_expired")),
            "device", "left")
    else:
        joined = joined.withColumn("device_expired", F.lit(None).cast("long"))
    zero = F.lit(0).cast("long")
    return joined.select(
        "device", F.coalesce(F.col("origins"), F.array().cast("array<string>")).alias("origins"),
        "first_seen_ms", last_seen.alias("last_seen_ms"),
        *(F.coalesce(F.col(c), zero).alias(c) for c in ("accepted", "uncorrected")),
        "offset_min_ms", "offset_max_ms", "offset_last_ms",
        *(F.coalesce(F.col(c), zero).alias(c) for c in ("device_expired", "delivered_then_device_expired",
                                                          "held_expired", "duplicates", "gaps")),
    )

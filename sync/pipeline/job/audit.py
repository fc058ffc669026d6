"""The exactly-once audit and the expiry reconciliation, summed from every bucket's uid partials
(which origins are devices: docs/pipeline.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from edgeq.sync.pipeline.job.latency import with_queue_names
from edgeq.sync.pipeline.job.uids import CATEGORIES, device_name

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = [
    "audit_devices", "audit_duplicates", "audit_gaps", "device_origins", "expiry_daily", "expiry_where",
]

_SUMS = ("accepted", "duplicates", "expired_unaccepted", "expired_on_device_after_accept",
         "delivered_then_device_expired", "gaps", "unauditable", "dead_lettered")


def device_origins(audit: DataFrame) -> DataFrame:
    """The device origins (one column, ``origin``) from the audit partials of every bucket."""
    from pyspark.sql import functions as F

    return (audit.groupBy("origin").agg(F.max("evidence").alias("evidence"))
            .filter(F.col("evidence") == 1).select("origin"))


def audit_devices(audit: DataFrame, devices: DataFrame) -> DataFrame:
    """The exactly-once audit summed per device (origin)."""
    from pyspark.sql import functions as F

    return (
        audit.join(F.broadcast(devices), "origin", "left_semi")
        .groupBy("origin")
        .agg(
            F.min("first_stamp").alias("first_stamp"), F.max("last_stamp").alias("last_stamp"),
            *(F.sum(c).cast("long").alias(c) for c in _SUMS),
        )
        .select("origin", device_name().alias("device"), "accepted", "first_stamp", "last_stamp",
                "duplicates", "expired_unaccepted", "expired_on_device_after_accept",
                "delivered_then_device_expired", "gaps", "unauditable", "dead_lettered")
    )


def audit_duplicates(dups: DataFrame, queues: DataFrame) -> DataFrame:
    """Report ``audit_duplicates``: ``queues`` are those of the first and the last acceptance."""
    from pyspark.sql import functions as F

    named = with_queue_names(with_queue_names(dups, queues, "first_qid", "first_queue"), queues,
                             "last_qid", "last_queue")
    return named.select(
        "uid", "origin", "times",
        F.array_sort(F.array_distinct(F.array("first_queue", "last_queue"))).alias("queues"),
        "first_ms", "last_ms",
    )


def audit_gaps(gaps: DataFrame) -> DataFrame:
    """The audit's gaps as reported: one row per uid with the kinds the journal holds for it."""
    return gaps.select("origin", "uid", "stamp", "kinds", "first_seen_ms")


def expiry_daily(partials: DataFrame, queues: DataFrame) -> DataFrame:
    """Expiries and their categories per queue and day."""
    from pyspark.sql import functions as F

    counts = ("expired", *CATEGORIES.values(), "entries")
    summed = partials.groupBy("qid", "date").agg(*(F.sum(c).cast("long").alias(c) for c in counts))
    return with_queue_names(summed, queues).select("queue", "date", *counts)


def expiry_where(partials: DataFrame) -> DataFrame:
    """Expired messages per queue, side and check point."""
    from pyspark.sql import functions as F

    return partials.groupBy("queue", "side", "check_point").agg(
        F.sum("messages").cast("long").alias("messages"))

"""Latency: creation to the server's confirm (``latency``, ``latency_histogram``), and
end to end, creation to the first delivery beside creation to confirm (``e2e_latency``).

Percentiles are exact (linear interpolation between the closest ranks, numpy's default,
as Spark's ``percentile``), from each group's values sorted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from edgeq.sync.pipeline.merge import Spec, is_
from edgeq.sync.pipeline.results import LATENCY_BUCKETS_MS
from edgeq.sync.pipeline.uids import E2E_METRICS

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = [
    "at_percentile",
    "e2e_latency",
    "histogram_edges",
    "latency",
    "latency_histogram",
    "latency_values",
    "sorted_values",
    "with_queue_names",
]

LATENCY_KEYS = ("device", "queue", "latency_ms")


def latency_values() -> Spec:
    """Each accepted row's latency, ``confirmed_ms - (created_ms - clock_offset_ms)``, with its
    device (the sender; the origin if none) and queue, and whether it had no offset (counted as
    0): a row-level dataset (nothing to merge), to which a run adds its new rows."""
    from pyspark.sql import functions as F

    accepted = is_("kind", "accepted") & F.col("created_ms").isNotNull() & F.col("confirmed_ms").isNotNull()
    created_on_server = F.col("created_ms") - F.coalesce(F.col("clock_offset_ms"), F.lit(0))

    def project(rows: DataFrame) -> DataFrame:
        return rows.select(
            F.coalesce(F.col("device"), F.col("origin")).alias("device"), "queue",
            (F.col("confirmed_ms") - created_on_server).alias("latency_ms"),
            F.col("clock_offset_ms").isNull().alias("uncorrected"),
        )

    return Spec((), LATENCY_KEYS, (), accepted, prepare=project)


def sorted_values(column: str) -> Column:
    """An aggregate: the group's non-null values of ``column``, sorted (for :func:`at_percentile`)."""
    from pyspark.sql import functions as F

    return F.array_sort(F.collect_list(F.col(column)))


def at_percentile(values: Column, p: float) -> Column:
    """The exact ``p`` percentile of a sorted array (null if empty): linear interpolation
    between the closest ranks, numpy's default (Spark's ``percentile``, which is much slower
    grouped: it keeps a hash map per group)."""
    from pyspark.sql import functions as F

    n = F.size(values)
    rank = F.lit(p) * (n - 1)
    low = F.floor(rank).cast("int")
    high = F.least(low + 1, n - 1)
    below, above = F.get(values, low), F.get(values, high)
    return F.when(n > 0, below + (above - below) * (rank - low))


def latency(values: DataFrame) -> DataFrame:
    """Report ``latency`` from :func:`latency_values` (of every run, unioned)."""
    from pyspark.sql import functions as F

    grouped = values.groupBy("device", "queue").agg(
        F.count("*").alias("messages"),
        F.sum(F.col("uncorrected").cast("long")).alias("uncorrected"),
        F.min("latency_ms").alias("min_ms"),
        (F.sum("latency_ms") / F.count("*")).alias("mean_ms"),  # an exact sum: the same in any order
        sorted_values("latency_ms").alias("sorted"),
        F.max("latency_ms").alias("max_ms"),
    )
    return grouped.select(
        "device", "queue", "messages", "uncorrected", "min_ms", "mean_ms",
        *(at_percentile(F.col("sorted"), p).alias(f"p{round(p * 100)}_ms") for p in (0.5, 0.95, 0.99)), "max_ms",
    )


def histogram_edges(spark: SparkSession) -> DataFrame:
    """The histogram's buckets (``bucket, low_ms, high_ms``) as a Spark literal table: built in
    the plan, not from a Python list, so executors need no Python to read it."""
    from pyspark.sql import functions as F

    bounds: list[tuple[int, int | None, int | None]] = [(-1, None, 0)]
    bounds += [(i, low, LATENCY_BUCKETS_MS[i + 1] if i + 1 < len(LATENCY_BUCKETS_MS) else None)
               for i, low in enumerate(LATENCY_BUCKETS_MS)]
    rows = F.array(*(
        F.struct(F.lit(b).cast("int").alias("bucket"), F.lit(lo).cast("long").alias("low_ms"),
                 F.lit(hi).cast("long").alias("high_ms"))
        for b, lo, hi in bounds
    ))
    return spark.range(1).select(F.inline(rows))


def latency_histogram(values: DataFrame) -> DataFrame:
    """Report ``latency_histogram``: accepted messages per latency bucket, empty buckets included."""
    from pyspark.sql import functions as F

    value = F.col("latency_ms")
    bucket = F.when(value < 0, F.lit(-1))
    for index, low in reversed(list(enumerate(LATENCY_BUCKETS_MS))):
        bucket = bucket.when(value >= low, F.lit(index))
    counted = values.groupBy(bucket.alias("bucket")).agg(F.count("*").alias("messages"))
    return (
        histogram_edges(values.sparkSession)
        .join(counted, "bucket", "left")
        .select("bucket", "low_ms", "high_ms", F.coalesce(F.col("messages"), F.lit(0).cast("long")).alias("messages"))
    )


def with_queue_names(frame: DataFrame, queues: DataFrame, qid: str = "qid", name: str = "queue") -> DataFrame:
    """``frame`` with the queue name of its ``qid`` column (``queues``: ``qid, queue``)."""
    from pyspark.sql import functions as F

    names = queues.select(F.col("qid").alias(qid), F.col("queue").alias(name))
    return frame.join(F.broadcast(names), qid, "left")


def e2e_latency(values: DataFrame, queues: DataFrame) -> DataFrame:
    """Report ``e2e_latency`` from the accepted uids' latencies (:func:`edgeq.sync.pipeline.uids.e2e_values`)."""
    from pyspark.sql import functions as F

    ps = (0.5, 0.9, 0.99)
    grouped = values.groupBy("device", "qid").agg(
        F.count("*").alias("messages"),
        F.sum(F.col("is_delivered").cast("long")).alias("delivered"),
        F.sum(F.col("uncorrected").cast("long")).alias("uncorrected"),
        *(sorted_values(m).alias(f"s_{m}") for m in E2E_METRICS),
    )
    columns = [at_percentile(F.col(f"s_{m}"), p).alias(f"{m}_p{round(p * 100)}_ms") for m in E2E_METRICS for p in ps]
    return with_queue_names(grouped, queues).select("device", "queue", "messages", "delivered", "uncorrected", *columns)

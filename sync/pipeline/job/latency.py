"""Latency: creation to the server's confirm (``latency``, ``latency_histogram``), and end to end
(``e2e_latency``). Exact percentiles, read off each group's values kept sorted in one array."""

from __future__ import annotations

from typing import TYPE_CHECKING

from edgeq.sync.pipeline.job.merge import Col, Spec, is_
from edgeq.sync.pipeline.job.uids import E2E_METRICS
from edgeq.sync.pipeline.report.results import LATENCY_BUCKETS_MS

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = [
    "at_percentile",
    "e2e_delivered",
    "e2e_latency",
    "e2e_partial",
    "histogram_edges",
    "latency",
    "latency_buckets",
    "latency_groups",
    "latency_histogram",
    "latency_values",
    "merge_sorted",
    "with_queue_names",
]

_PS_LATENCY = (0.5, 0.95, 0.99)
_PS_E2E = (0.5, 0.9, 0.99)


def _accepted() -> Column:
    from pyspark.sql import functions as F

    return is_("kind", "accepted") & F.col("created_ms").isNotNull() & F.col("confirmed_ms").isNotNull()


def _latency() -> Column:
    """``confirmed_ms - (created_ms - clock_offset_ms)``; a null offset counts as 0."""
    from pyspark.sql import functions as F

    return F.col("confirmed_ms") - (F.col("created_ms") - F.coalesce(F.col("clock_offset_ms"), F.lit(0)))


def latency_groups() -> Spec:
    """Per device (the sender, else the origin) and queue, over accepted rows: messages, those
    without an offset, the latencies' sum, min, max, and the latencies sorted."""
    from pyspark.sql import functions as F

    value = _latency()
    cols = (
        Col("messages", F.lit(1).cast("long"), "sum"),
        Col("uncorrected", F.col("clock_offset_ms").isNull().cast("long"), "sum"),
        Col("sum_ms", value, "sum"),
        Col("min_ms", value, "min"),
        Col("max_ms", value, "max"),
        Col("sorted", value, "sorted"),
    )
    return Spec((F.coalesce(F.col("device"), F.col("origin")), F.col("queue")), ("device", "queue"), cols,
                _accepted())


def latency_values() -> Spec:
    """Accepted rows per distinct latency (every device and queue): the headline percentiles' input."""
    from pyspark.sql import functions as F

    return Spec((_latency(),), ("latency_ms",), (Col("messages", F.lit(1).cast("long"), "sum"),), _accepted())


def _bucket(value: Column) -> Column:
    from pyspark.sql import functions as F

    bucket = F.when(value < 0, F.lit(-1))
    for index, low in reversed(list(enumerate(LATENCY_BUCKETS_MS))):
        bucket = bucket.when(value >= low, F.lit(index))
    return bucket


def latency_buckets() -> Spec:
    """Accepted rows per latency bucket (``report.results.LATENCY_BUCKETS_MS``)."""
    from pyspark.sql import functions as F

    return Spec((_bucket(_latency()),), ("bucket",), (Col("messages", F.lit(1).cast("long"), "sum"),),
                _accepted())


def merge_sorted(column: str) -> Column:
    """An aggregate: the group's sorted arrays of ``column`` merged into one, sorted."""
    from pyspark.sql import functions as F

    return F.sort_array(F.flatten(F.collect_list(F.col(column))))


def at_percentile(values: Column, p: float) -> Column:
    """The exact ``p`` percentile of a sorted array (null if empty), as numpy's default."""
    from pyspark.sql import functions as F

    n = F.size(values)
    rank = F.lit(p) * (n - 1)
    low = F.floor(rank).cast("int")
    high = F.least(low + 1, n - 1)
    below, above = F.get(values, low), F.get(values, high)
    return F.when(n > 0, below + (above - below) * (rank - low))


def latency(groups: DataFrame) -> DataFrame:
    """Latency from creation to the server's confirm, per device and queue."""
    from pyspark.sql import functions as F

    return groups.select(
        "device", "queue", "messages", "uncorrected", "min_ms",
        (F.col("sum_ms") / F.col("messages")).alias("mean_ms"),  # an exact sum: the same in any order
        *(at_percentile(F.col("sorted"), p).alias(f"p{round(p * 100)}_ms") for p in _PS_LATENCY), "max_ms",
    )


def histogram_edges(spark: SparkSession) -> DataFrame:
    """The histogram's buckets as a literal table in the plan: executors need no Python."""
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


def latency_histogram(buckets: DataFrame) -> DataFrame:
    """Report ``latency_histogram``, empty buckets included."""
    from pyspark.sql import functions as F

    return (
        histogram_edges(buckets.sparkSession)
        .join(buckets, "bucket", "left")
        .select("bucket", "low_ms", "high_ms",
                F.coalesce(F.col("messages"), F.lit(0).cast("long")).alias("messages"))
    )


def with_queue_names(frame: DataFrame, queues: DataFrame, qid: str = "qid", name: str = "queue") -> DataFrame:
    """``frame`` with the queue name of its ``qid`` column (``queues``: ``qid, queue``)."""
    from pyspark.sql import functions as F

    names = queues.select(F.col("qid").alias(qid), F.col("queue").alias(name))
    return frame.join(F.broadcast(names), qid, "left")


def e2e_partial(values: DataFrame) -> DataFrame:
    """Per bucket, device and queue id, from :func:`~edgeq.sync.pipeline.job.uids.e2e_values`:
    messages, delivered, without an offset, and each of ``E2E_METRICS`` sorted."""
    from pyspark.sql import functions as F

    return values.groupBy("bucket", "device", "qid").agg(
        F.count("*").alias("messages"),
        F.sum(F.col("is_delivered").cast("long")).alias("delivered"),
        F.sum(F.col("uncorrected").cast("long")).alias("uncorrected"),
        *(F.sort_array(F.collect_list(m)).alias(f"s_{m}") for m in E2E_METRICS),
    )


def e2e_delivered(values: DataFrame) -> DataFrame:
    """Per bucket, delivered messages per corrected creation-to-delivery latency (percentiles)."""
    from pyspark.sql import functions as F

    return (values.filter(F.col("delivered").isNotNull())
            .groupBy("bucket", F.col("delivered").alias("latency_ms")).agg(F.count("*").alias("messages")))


def e2e_latency(partials: DataFrame, queues: DataFrame) -> DataFrame:
    """Creation to delivery, end to end, per device and queue."""
    from pyspark.sql import functions as F

    grouped = partials.groupBy("device", "qid").agg(
        *(F.sum(c).cast("long").alias(c) for c in ("messages", "delivered", "uncorrected")),
        *(merge_sorted(f"s_{m}").alias(f"s_{m}") for m in E2E_METRICS),
    )
    columns = [at_percentile(F.col(f"s_{m}"), p).alias(f"{m}_p{round(p * 100)}_ms") for m in E2E_METRICS
               for p in _PS_E2E]
    return with_queue_names(grouped, queues).select(
        "device", "queue", "messages", "delivered", "uncorrected", *columns)

"""The reports and the headline totals, read off the state and written several at once (why:
docs/pipeline.md, 'Performance')."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from edgeq.sync.pipeline.errors import PipelineError
from edgeq.sync.pipeline.job import audit, latency, traffic
from edgeq.sync.pipeline.job.files import is_local, join, local_path
from edgeq.sync.pipeline.job.session import spark_errors
from edgeq.sync.pipeline.job.state import State, read_dataset
from edgeq.sync.pipeline.report.results import COLUMNS, ORDER_BY, REPORTS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["WRITERS", "Written", "finals", "totals", "write_reports"]

#: How many reports are computed at once (driver threads, each submitting one job at a time).
WRITERS = 4


def _need(spark: SparkSession, state: State, name: str) -> DataFrame:
    """A state dataset (an aggregate: small) in one partition, so that a report needs no shuffle."""
    frame = read_dataset(spark, state, name)
    if frame is None:
        raise PipelineError(f"the job's state has no {name!r} dataset: run again with --full to rebuild it")
    return frame.coalesce(1)


def _builders(spark: SparkSession, state: State,
              contacts: DataFrame | None = None) -> dict[str, Callable[[], DataFrame]]:
    """Each report's DataFrame maker, in :data:`REPORTS` order; ``contacts`` may be None."""

    def need(name: str) -> Callable[[], DataFrame]:
        return lambda: _need(spark, state, name)

    def devices() -> DataFrame:
        return audit.device_origins(need("audit")())

    return {
        "journal_totals": lambda: traffic.journal_totals(need("kinds")()),
        "latency": lambda: latency.latency(need("latency_groups")()),
        "latency_histogram": lambda: latency.latency_histogram(need("latency_buckets")()),
        "e2e_latency": lambda: latency.e2e_latency(need("e2e")(), need("queues")()),
        "expiry_daily": lambda: audit.expiry_daily(need("expiry_daily")(), need("queues")()),
        "expiry_where": lambda: audit.expiry_where(need("expiry_where")()),
        "audit_devices": lambda: audit.audit_devices(need("audit")(), devices()),
        "audit_duplicates": lambda: audit.audit_duplicates(need("dups")(), need("queues")()),
        "audit_gaps": lambda: audit.audit_gaps(need("gaps")()),
        "throughput_hourly": lambda: traffic.throughput_hourly(need("throughput")()),
        "device_health": lambda: traffic.device_health(need("device_hourly")(), need("audit")(), devices(),
                                                       need("device_expired")(), contacts),
        "device_clock_hourly": lambda: traffic.device_clock_hourly(need("device_hourly")()),
    }


def finals(spark: SparkSession, state: State, contacts: DataFrame | None = None) -> dict[str, DataFrame]:
    """Every report's DataFrame (by name, in ``REPORTS`` order), from ``state`` and ``contacts``."""
    return {name: build() for name, build in _builders(spark, state, contacts).items()}


@dataclass(slots=True)
class Written:
    """What :func:`write_reports` wrote: each report's row count, first rows and seconds, and the totals."""

    counts: dict[str, int] = field(default_factory=dict)
    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    totals: dict[str, int | float] = field(default_factory=dict)


def write_reports(spark: SparkSession, state: State, out: str, *, limit: int,
                  say: Callable[[str], None], contacts: DataFrame | None = None) -> Written:
    """Write every report under ``out/<name>/`` (replaced) and the totals; raise the first failure."""
    builders = _builders(spark, state, contacts)
    done = Written()

    def write(index: int, name: str) -> None:
        t0 = time.perf_counter()
        target = join(out, name)
        with spark_errors(f"computing {name}"):
            done.counts[name], done.rows[name] = _write_report(builders[name](), name, target, limit)
        done.seconds[name] = time.perf_counter() - t0
        say(f"[{index}/{len(builders)}] {name}: {REPORTS[name]}\n"
            f"      {done.counts[name]:,} row(s) -> {target} ({done.seconds[name]:.1f} s)")

    def figures() -> None:
        t0 = time.perf_counter()
        with spark_errors("computing the totals"):
            done.totals = totals(spark, state)
        done.seconds["totals"] = time.perf_counter() - t0

    with ThreadPoolExecutor(max_workers=WRITERS, thread_name_prefix="edgeq-report") as pool:
        # The totals first: the longest of the small jobs.
        futures: list[Future[None]] = [pool.submit(figures)]
        futures += [pool.submit(write, index, name) for index, name in enumerate(builders, 1)]
        try:
            for future in futures:
                future.result()
        except BaseException:
            for future in futures:
                future.cancel()
            raise
    return done


def _write_report(frame: DataFrame, name: str, target: str, limit: int) -> tuple[int, list[dict[str, Any]]]:
    """Write one report (ordered, one file); return its row count and first ``limit`` rows."""
    from pyspark import StorageLevel

    ordered = frame.select(*COLUMNS[name]).coalesce(1).sortWithinPartitions(*ORDER_BY[name])
    back = _read_back(target, limit)
    if back is not None:
        ordered.write.mode("overwrite").parquet(target)
        return back()
    ordered = ordered.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        ordered.write.mode("overwrite").parquet(target)
        rows = [r.asDict(recursive=True) for r in ordered.limit(limit).collect()] if limit > 0 else []
        count = len(rows) if len(rows) < limit else ordered.count()
        return count, rows
    finally:
        ordered.unpersist()


def _read_back(target: str, limit: int) -> Callable[[], tuple[int, list[dict[str, Any]]]] | None:
    """A reader of a local report's rows as pyspark gives them, or None if the driver cannot read it."""
    if not is_local(target):
        return None
    try:
        import pyarrow.parquet as pq
    except ImportError:
        return None

    def read() -> tuple[int, list[dict[str, Any]]]:
        table = pq.read_table(local_path(target))
        rows = table.slice(0, max(limit, 0)).to_pylist()
        stamps = [f.name for f in table.schema if str(f.type).startswith("timestamp")]
        for row in rows:
            for column in stamps:
                if row[column] is not None:  # pyspark's own conversion: naive, local time
                    moment = row[column] if row[column].tzinfo else row[column].replace(tzinfo=UTC)
                    row[column] = datetime.fromtimestamp(moment.timestamp())
        return table.num_rows, rows

    return read


def totals(spark: SparkSession, state: State) -> dict[str, int | float]:
    """The headline figures (``TOTALS``) as ``(name, value)`` rows, collected at once (one union)."""
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
        F.max("evidence").alias("evidence"), F.sum("unauditable").alias("unauditable"),
        F.sum("gaps").alias("gaps"), F.sum("dead_lettered").alias("dead_lettered"))
    parts = [
        figures(kinds, journal_rows=F.sum("entries"), accepted_entries=kind("accepted"),
                delivered_entries=kind("delivered"), expired_entries=kind("expired")),
        figures(partials, accepted=F.sum("accepted"), delivered=F.sum("delivered")),
        figures(devices.filter(F.col("evidence") == 1), unauditable=F.sum("unauditable"), gaps=F.sum("gaps"),
                dead_lettered=F.sum("dead_lettered"), devices=F.count("*")),
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
            "two queue names have the same 64-bit hash, which the job uses as their id: report this to "
            "edgeq's maintainers with the queue names (edgeq export's journal has them)"
        )
    # Percentiles are absent when there is nothing to measure; every count is an int.
    return {name: (float(v) if name.endswith("_ms") else int(v or 0)) for name, v in got.items()
            if v is not None or not name.endswith("_ms")}

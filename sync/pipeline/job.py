"""The Spark job: delivery latency, expiry reconciliation, an exactly-once audit and throughput.

Input is a journal exported by ``edgeq export`` (see :mod:`edgeq.sync.pipeline.export`);
every report is computed with the DataFrame API (no Python UDFs, so executors
need no Python packages) and written as Parquet under ``--out``; each report's
definition is in ``docs/pipeline.md``. Run it as::

    edgeq pipeline run --journal journal/ --out reports/ [--master local[*]] [--html]
    python -m edgeq.sync.pipeline.job --journal journal/ --out reports/
    spark-submit --master spark://host:7077 sync/pipeline/job.py --journal hdfs:///edgeq/journal --out hdfs:///edgeq/reports
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgeq.sync.pipeline.errors import (
    JournalNotFound,
    MalformedJournal,
    MissingDependency,
    PipelineError,
    SparkFailed,
    require,
)
from edgeq.sync.pipeline.export import COLUMN_TYPES, MANIFEST, REQUIRED
from edgeq.sync.pipeline.results import COLLECT_LIMIT, LATENCY_BUCKETS_MS, ORDER_BY, REPORTS, PipelineResult

from edgeq.names import INCARNATION_SEPARATOR

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = [
    "LATENCY_BUCKETS_MS",
    "REPORTS",
    "PipelineResult",
    "check_journal",
    "main",
    "read_journal",
    "run_pipeline",
    "spark_session",
]

Progress = Callable[[str], None]

_DAY_MS = 86_400_000
_HOUR_MS = 3_600_000


# -- the session ------------------------------------------------------------------------------


def spark_session(
    master: str | None = None, *, app_name: str = "edgeq-pipeline", conf: dict[str, str] | None = None,
    quiet: bool = True,
) -> SparkSession:
    """A SparkSession for the job: UTC session time zone; ``master`` None leaves it to
    ``spark-submit`` (or pyspark's default, ``local[*]``)."""
    require("pyspark")
    if shutil.which("java") is None and not _java_home():
        raise MissingDependency(
            "Spark needs Java 17 or later and none was found: install a JDK (check with java -version) "
            "or set JAVA_HOME"
        )
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name).config("spark.sql.session.timeZone", "UTC")
    if master is not None:
        builder = builder.master(master)
        if master.startswith("local"):
            builder = builder.config("spark.sql.shuffle.partitions", "8")
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    try:
        spark = builder.getOrCreate()
    except Exception as exc:  # pyspark raises PySparkRuntimeError, py4j errors, or RuntimeError
        raise SparkFailed(f"Spark could not start: {_first_line(exc)}; check java -version and JAVA_HOME") from exc
    if quiet:
        spark.sparkContext.setLogLevel("ERROR")
    return spark


def _java_home() -> bool:
    import os

    home = os.environ.get("JAVA_HOME")
    return bool(home) and Path(home or "", "bin", "java").exists()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("JVM stacktrace", "at ", "Traceback")):
            return line[:500]
    return text.splitlines()[0][:500]


@contextmanager
def _spark_errors(what: str) -> Iterator[None]:
    """Turn Spark's exceptions into :class:`PipelineError` subclasses with a hint."""
    try:
        yield
    except PipelineError:
        raise
    except Exception as exc:
        line = _first_line(exc)
        if any(s in line for s in ("Parquet", "parquet", "FAILED_READ_FILE", "CANNOT_READ_FILE", "schema")):
            raise MalformedJournal(
                f"{what}: the journal cannot be read ({line}); re-export it with edgeq export into a new directory"
            ) from exc
        if "PATH_NOT_FOUND" in line or "does not exist" in line:
            raise JournalNotFound(f"{what}: {line}; run edgeq export first, or check --journal") from exc
        raise SparkFailed(f"{what} failed: {line}") from exc


# -- the input --------------------------------------------------------------------------------


def _spark_schema() -> Any:
    from pyspark.sql.types import DateType, LongType, StringType, StructField, StructType

    types = {"int64": LongType(), "string": StringType()}
    fields = [StructField(n, types[t], nullable=n not in REQUIRED) for n, t in COLUMN_TYPES.items()]
    return StructType([*fields, StructField("date", DateType(), True)])


def _is_local(path: str) -> bool:
    return "://" not in path or path.startswith("file://")


def _local(path: str) -> Path:
    return Path(path.removeprefix("file://"))


def check_local_journal(path: Path) -> int:
    """Check an exported journal on the local disk before Spark reads it (clear errors,
    early); return how many part files it has."""
    if not path.exists():
        raise JournalNotFound(
            f"{path} does not exist: export the home server's journal first, "
            f"e.g. edgeq export --db home.db --out {path}"
        )
    if not path.is_dir():
        raise MalformedJournal(f"{path} is not a directory: --journal is the directory edgeq export wrote")
    parts = sorted(path.glob("date=*/*.parquet"))
    if not parts:
        stray = [p.name for p in path.iterdir() if p.suffix == ".parquet"][:3]
        if stray:
            raise MalformedJournal(
                f"{path} holds Parquet files but not in edgeq export's date=YYYY-MM-DD/ layout "
                f"(e.g. {stray[0]}): export with edgeq export"
            )
        hint = "it holds no entries yet" if (path / MANIFEST).exists() else "it is not an export"
        raise JournalNotFound(f"{path} has no journal files ({hint}): run edgeq export --db home.db --out {path}")
    require("pyarrow")
    import pyarrow.parquet as pq

    expected = {name: kind for name, kind in COLUMN_TYPES.items()}
    for part in parts:
        try:
            schema = pq.read_schema(part)
        except Exception as exc:  # pyarrow raises ArrowInvalid / OSError on a damaged file
            raise MalformedJournal(
                f"{part} is not a readable Parquet file ({_first_line(exc)}): delete it and its directory's "
                "export, or re-export into a new directory"
            ) from exc
        found = {f.name: str(f.type) for f in schema}
        missing = [n for n in expected if n not in found]
        wrong = [f"{n} is {found[n]}, not {t}" for n, t in expected.items() if n in found and found[n] != t]
        if missing or wrong:
            detail = f"missing column(s) {', '.join(missing)}" if missing else "; ".join(wrong)
            raise MalformedJournal(
                f"{part} is not an edgeq journal file ({detail}): export with edgeq export into a new directory"
            )
    return len(parts)


def check_journal(path: str | Path) -> None:
    """Check a local journal directory (:func:`check_local_journal`); a remote URI is left to Spark."""
    path = str(path)
    if _is_local(path):
        check_local_journal(_local(path))


def read_journal(spark: SparkSession, path: str) -> DataFrame:
    """The exported journal as a DataFrame (the journal's columns, ``date``, and ``stamp``:
    the uid's stamp as a long)."""
    from pyspark.sql import functions as F

    if _is_local(path):
        check_local_journal(_local(path))
    with _spark_errors(f"reading {path}"):
        df = spark.read.schema(_spark_schema()).option("basePath", path).parquet(path)
        return df.withColumn("stamp", F.regexp_extract("uid", r"\.(\d+)$", 1).cast("long"))


# -- the reports --------------------------------------------------------------------------------


def _is(column: str, value: str) -> Column:
    from pyspark.sql import functions as F

    return F.col(column) == F.lit(value)


def _count_if(condition: Column) -> Column:
    from pyspark.sql import functions as F

    return F.sum(F.when(condition, 1).otherwise(0)).cast("long")


def journal_totals(j: DataFrame) -> DataFrame:
    """Report ``journal_totals``: entries per kind and side."""
    from pyspark.sql import functions as F

    return j.groupBy("kind", "side").agg(F.count("*").alias("entries")).orderBy("kind", "side")


def latency(j: DataFrame) -> DataFrame:
    """Per (device, queue): confirmed_ms - (created_ms - clock_offset_ms) of accepted entries."""
    from pyspark.sql import functions as F

    lat = _latencies(j)
    return (
        lat.groupBy("device", "queue")
        .agg(
            F.count("*").alias("messages"),
            _count_if(F.col("uncorrected")).alias("uncorrected"),
            F.min("latency_ms").alias("min_ms"),
            F.mean("latency_ms").alias("mean_ms"),
            F.percentile("latency_ms", [0.5, 0.95, 0.99]).alias("p"),
            F.max("latency_ms").alias("max_ms"),
        )
        .select(
            "device", "queue", "messages", "uncorrected", "min_ms", "mean_ms",
            F.col("p")[0].alias("p50_ms"), F.col("p")[1].alias("p95_ms"), F.col("p")[2].alias("p99_ms"),
            "max_ms",
        )
        .orderBy("device", "queue")
    )


def _latencies(j: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    accepted = j.filter(_is("kind", "accepted") & F.col("created_ms").isNotNull() & F.col("confirmed_ms").isNotNull())
    created_on_server = F.col("created_ms") - F.coalesce(F.col("clock_offset_ms"), F.lit(0))
    return accepted.select(
        F.coalesce(F.col("device"), F.col("origin")).alias("device"),
        "queue",
        (F.col("confirmed_ms") - created_on_server).alias("latency_ms"),
        F.col("clock_offset_ms").isNull().alias("uncorrected"),
    )


def latency_histogram(j: DataFrame) -> DataFrame:
    """Report ``latency_histogram``: accepted messages per latency bucket, empty buckets included.

    Bucket -1 holds negative latencies (clocks out of step); bucket ``i`` spans ``low_ms`` to ``high_ms``.
    """
    from pyspark.sql import functions as F

    value = F.col("latency_ms")
    bucket = F.when(value < 0, F.lit(-1))
    for index, low in reversed(list(enumerate(LATENCY_BUCKETS_MS))):
        bucket = bucket.when(value >= low, F.lit(index))
    counted = _latencies(j).select(bucket.alias("bucket")).groupBy("bucket").agg(F.count("*").alias("messages"))
    bounds = [(-1, None, 0)] + [
        (i, low, LATENCY_BUCKETS_MS[i + 1] if i + 1 < len(LATENCY_BUCKETS_MS) else None)
        for i, low in enumerate(LATENCY_BUCKETS_MS)
    ]
    edges = j.sparkSession.createDataFrame(bounds, "bucket int, low_ms long, high_ms long")
    return (
        edges.join(counted, "bucket", "left")
        .select("bucket", "low_ms", "high_ms", F.coalesce(F.col("messages"), F.lit(0)).alias("messages"))
        .orderBy("bucket")
    )


def expired_messages(j: DataFrame) -> DataFrame:
    """One row per expired uid: whether it expired on the server, on a device, both; the
    queue it is reported under (its server-side entry's, else the device's) and the date
    of its first expiry (UTC, server clock)."""
    from pyspark.sql import functions as F

    expired = j.filter(_is("kind", "expired"))
    server = _is("side", "server")
    rank = F.struct(F.when(server, 0).otherwise(1), F.col("at_ms"), F.col("queue"))
    per_uid = expired.groupBy("uid").agg(
        F.max(server.cast("int")).alias("on_server"),
        F.max(_is("side", "device").cast("int")).alias("on_device"),
        F.min("at_ms").alias("first_ms"),
        F.min_by("queue", rank).alias("queue"),
        F.count("*").alias("entries"),
    )
    where = (
        F.when((F.col("on_server") == 1) & (F.col("on_device") == 1), "both")
        .when(F.col("on_server") == 1, "server")
        .otherwise("device")
    )
    return per_uid.select(
        "uid", "queue", "entries", where.alias("where"),
        F.date_from_unix_date(F.floor(F.col("first_ms") / _DAY_MS).cast("int")).alias("date"),
    )


def expiry_daily(j: DataFrame) -> DataFrame:
    """Report ``expiry_daily``: distinct expired messages per queue and day, by where they expired."""
    from pyspark.sql import functions as F

    return (
        expired_messages(j)
        .groupBy("queue", "date")
        .agg(
            F.count("*").alias("expired"),
            _count_if(_is("where", "server")).alias("server_only"),
            _count_if(_is("where", "device")).alias("device_only"),
            _count_if(_is("where", "both")).alias("both"),
            F.sum("entries").cast("long").alias("entries"),
        )
        .orderBy("date", "queue")
    )


def expiry_where(j: DataFrame) -> DataFrame:
    """Report ``expiry_where``: distinct expired messages per queue, side and check point."""
    from pyspark.sql import functions as F

    return (
        j.filter(_is("kind", "expired"))
        .groupBy("queue", "side", "check_point")
        .agg(F.count_distinct("uid").alias("messages"))
        .orderBy("queue", "side", "check_point")
    )


def _uid_status(j: DataFrame) -> DataFrame:
    """Per (origin, uid) of a device origin: times accepted, whether expired (and where),
    the kinds of entry seen, and when it was first seen."""
    from pyspark.sql import functions as F

    devices = (
        # A device-side expiry makes its origin a device only if the device reported its own
        # message: a message it pulled from the server and let expire stays the server's.
        j.filter(_is("kind", "accepted") | (
            _is("kind", "expired") & _is("side", "device")
            & (F.split(F.col("origin"), INCARNATION_SEPARATOR).getItem(0) == F.col("device"))
        ))
        .select("origin")
        .distinct()
    )
    return (
        j.join(F.broadcast(devices), "origin", "left_semi")
        .groupBy("origin", "uid")
        .agg(
            _count_if(_is("kind", "accepted")).alias("accepted"),
            F.max(_is("kind", "expired").cast("int")).alias("expired"),
            F.max((_is("kind", "expired") & _is("side", "device")).cast("int")).alias("expired_on_device"),
            F.max("stamp").alias("stamp"),
            F.array_sort(F.collect_set("kind")).alias("kinds"),
            F.min("at_ms").alias("first_seen_ms"),
        )
    )


def audit(j: DataFrame) -> tuple[DataFrame, DataFrame, DataFrame]:
    """(audit_devices, audit_duplicates, audit_gaps)."""
    from pyspark.sql import functions as F

    status = _uid_status(j).persist()
    acc = F.col("accepted")
    devices = (
        status.groupBy("origin")
        .agg(
            _count_if(acc > 0).alias("accepted"),
            F.min(F.when(acc > 0, F.col("stamp"))).alias("first_stamp"),
            F.max(F.when(acc > 0, F.col("stamp"))).alias("last_stamp"),
            _count_if(acc > 1).alias("duplicates"),
            _count_if((acc == 0) & (F.col("expired") == 1)).alias("expired_unaccepted"),
            _count_if((acc > 0) & (F.col("expired_on_device") == 1)).alias("expired_on_device_after_accept"),
            _count_if((acc == 0) & (F.col("expired") == 0)).alias("gaps"),
        )
        .orderBy("origin")
    )
    accepted = j.filter(_is("kind", "accepted"))
    duplicates = (
        accepted.groupBy("uid")
        .agg(
            F.first("origin").alias("origin"),
            F.count("*").alias("times"),
            F.array_sort(F.collect_set("queue")).alias("queues"),
            F.min("at_ms").alias("first_ms"),
            F.max("at_ms").alias("last_ms"),
        )
        .filter(F.col("times") > 1)
        .orderBy("origin", "uid")
    )
    gaps = (
        status.filter((acc == 0) & (F.col("expired") == 0))
        .select("origin", "uid", "stamp", "kinds", "first_seen_ms")
        .orderBy("origin", "stamp")
    )
    return devices, duplicates, gaps


def throughput_hourly(j: DataFrame) -> DataFrame:
    """Report ``throughput_hourly``: accepted, delivered and expired entries and bytes per queue and hour."""
    from pyspark.sql import functions as F

    hour_ms = (F.floor(F.col("at_ms") / _HOUR_MS) * _HOUR_MS).cast("long")
    accepted = _is("kind", "accepted")
    return (
        j.withColumn("hour_ms", hour_ms)
        .groupBy("queue", "hour_ms")
        .agg(
            _count_if(accepted).alias("accepted"),
            _count_if(_is("kind", "delivered")).alias("delivered"),
            _count_if(_is("kind", "expired")).alias("expired_entries"),
            F.coalesce(F.sum(F.when(accepted, F.col("size"))), F.lit(0)).cast("long").alias("accepted_bytes"),
        )
        .select(F.timestamp_millis("hour_ms").alias("hour"), "hour_ms", "queue", "accepted", "delivered",
                "expired_entries", "accepted_bytes")
        .orderBy("hour_ms", "queue")
    )


# -- the run --------------------------------------------------------------------------------


def _row_dict(row: Any) -> dict[str, Any]:
    out: dict[str, Any] = row.asDict(recursive=True)
    return out


def run_pipeline(
    spark: SparkSession,
    journal: str | Path,
    out: str | Path,
    *,
    progress: Progress | None = None,
) -> PipelineResult:
    """Compute every report of ``journal`` into ``out`` (one Parquet directory each, replaced)."""
    from pyspark import StorageLevel

    say = progress or (lambda _text: None)
    journal, out = str(journal), str(out)
    if _is_local(journal) and _is_local(out):
        j_path, o_path = _local(journal).resolve(), _local(out).resolve()
        if o_path == j_path or j_path in o_path.parents:
            raise MalformedJournal(f"--out {out} is inside --journal {journal}: write the reports elsewhere")
    started = time.perf_counter()
    result = PipelineResult(journal=journal, out=out)
    j = read_journal(spark, journal).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        with _spark_errors(f"reading {journal}"):
            t0 = time.perf_counter()
            say(f"reading {journal}")
            result.journal_rows = j.count()
            result.seconds["read"] = time.perf_counter() - t0
            say(f"  {result.journal_rows:,} journal entries ({result.seconds['read']:.1f} s)")
        devices, duplicates, gaps = audit(j)
        frames: dict[str, DataFrame] = {
            "journal_totals": journal_totals(j),
            "latency": latency(j),
            "latency_histogram": latency_histogram(j),
            "expiry_daily": expiry_daily(j),
            "expiry_where": expiry_where(j),
            "audit_devices": devices,
            "audit_duplicates": duplicates,
            "audit_gaps": gaps,
            "throughput_hourly": throughput_hourly(j),
        }
        for index, (name, frame) in enumerate(frames.items(), 1):
            t0 = time.perf_counter()
            say(f"[{index}/{len(frames)}] {name}: {REPORTS[name]}")
            target = f"{out.rstrip('/')}/{name}"
            with _spark_errors(f"computing {name}"):
                frame.coalesce(1).write.mode("overwrite").parquet(target)
                written = spark.read.parquet(target)
                result.counts[name] = written.count()
                ordered = written.orderBy(*ORDER_BY[name])
                result.rows[name] = [_row_dict(r) for r in ordered.limit(COLLECT_LIMIT).collect()]
            result.seconds[name] = time.perf_counter() - t0
            say(f"      {result.counts[name]:,} row(s) -> {target} ({result.seconds[name]:.1f} s)")
    finally:
        j.unpersist()
        spark.catalog.clearCache()
    result.total_seconds = time.perf_counter() - started
    if _is_local(out):
        meta = {
            "journal": journal, "journal_rows": result.journal_rows, "reports": result.counts,
            "seconds": {k: round(v, 3) for k, v in result.seconds.items()},
            "finished": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        (_local(out) / "_edgeq_reports.json").write_text(json.dumps(meta, indent=2) + "\n", "utf-8")
    return result


# -- spark-submit / python -m ------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """The ``job.py`` command line parser."""
    parser = argparse.ArgumentParser(
        prog="edgeq.sync.pipeline.job",
        description="edgeq's journal analytics on Spark: latency, expiry reconciliation, audit, throughput.",
    )
    parser.add_argument("--journal", required=True, help="the directory (or URI) edgeq export wrote")
    parser.add_argument("--out", required=True, help="where to write the reports (each a Parquet directory)")
    parser.add_argument("--master", default=None,
                        help="Spark master (default: spark-submit's, else local[*])")
    parser.add_argument("--html", action="store_true", help="also write OUT/report.html (local --out only)")
    parser.add_argument("--quiet", action="store_true", help="print no progress, only the summary")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """``spark-submit job.py ...`` / ``python -m edgeq.sync.pipeline.job ...``: exit 0, or 1 with one line."""
    from edgeq.sync.pipeline.report import summary_text, write_html

    args = build_parser().parse_args(argv)

    def say(text: str) -> None:
        """Print a progress line on stderr, unless ``--quiet``."""
        if not args.quiet:
            print(text, file=sys.stderr, flush=True)

    try:
        check_journal(args.journal)
        say("starting Spark" + (f" ({args.master})" if args.master else ""))
        spark = spark_session(args.master)
        try:
            result = run_pipeline(spark, args.journal, args.out, progress=say)
        finally:
            spark.stop()
        print(summary_text(result))
        if args.html:
            page = write_html(result, Path(args.out) / "report.html")
            say(f"wrote {page}")
    except PipelineError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # spark-submit sync/pipeline/job.py, python -m edgeq.sync.pipeline.job
    sys.exit(main())

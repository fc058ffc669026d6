"""The Spark session the job runs in, and what Spark's failures mean for the user: sorted by what
they are (type, error condition, Java cause chain), never by words in their message."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
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

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "JOB_CONF",
    "LOCAL_CONF",
    "PARTITIONS_PER_CORE",
    "QUICK_JIT",
    "QUICK_JIT_ROWS",
    "condition_of",
    "first_line",
    "job_settings",
    "jvm_conf",
    "shuffle_partitions",
    "spark_errors",
    "spark_session",
]

#: Settings for a local master (one machine, a few cores): adaptive execution (it merges
#: small shuffle partitions), no progress bar. The number of shuffle partitions is set
#: per run from the cores there are (:func:`job_settings`), on any master.
LOCAL_CONF: dict[str, str] = {
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.adaptive.coalescePartitions.enabled": "true",
    "spark.ui.showConsoleProgress": "false",
}

#: JVM options for a local run over a small journal: the quick compiler (C1) only, whose code cache
#: made room for it (why: docs/pipeline.md, "Performance").
QUICK_JIT = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=256m"
#: Below this many journal rows a local run starts its JVM with :data:`QUICK_JIT`.
QUICK_JIT_ROWS = 4_000_000

#: Spark error conditions that mean the input files cannot be read as a journal.
_UNREADABLE = (
    "FAILED_READ_FILE", "CANNOT_READ_FILE_FOOTER", "CANNOT_MERGE_SCHEMAS", "UNSUPPORTED_FILE_FORMAT",
)
#: Java exception types (in a cause chain) that mean the same.
_UNREADABLE_JAVA = (
    "org.apache.parquet.io.ParquetDecodingException",
    "org.apache.parquet.schema.InvalidSchemaException",
    "org.apache.spark.sql.execution.datasources.SchemaColumnConvertNotSupportedException",
)
_MISSING = ("PATH_NOT_FOUND",)
_MISSING_JAVA = ("java.io.FileNotFoundException",)


def jvm_conf(master: str | None, journal_rows: int | None,
             conf: dict[str, str] | None = None) -> dict[str, str]:
    """``conf`` plus :data:`QUICK_JIT` for a local run under :data:`QUICK_JIT_ROWS` rows.

    >>> jvm_conf("local[2]", 5_000)["spark.driver.extraJavaOptions"]
    '-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=256m'
    >>> jvm_conf("local[2]", 10_000_000), jvm_conf("spark://host:7077", 5_000)
    ({}, {})
    """
    merged = dict(conf or {})
    if (master is None or not master.startswith("local") or journal_rows is None
            or journal_rows >= QUICK_JIT_ROWS):
        return merged
    key = "spark.driver.extraJavaOptions"
    merged[key] = f"{QUICK_JIT} {merged[key]}" if merged.get(key) else QUICK_JIT
    return merged


def spark_session(
    master: str | None = None, *, app_name: str = "edgeq-pipeline", conf: dict[str, str] | None = None,
    quiet: bool = True, journal_rows: int | None = None,
) -> SparkSession:
    """A SparkSession for the job: UTC, :data:`LOCAL_CONF` on a local master (``conf`` wins),
    ``master`` None: spark-submit's; ``journal_rows`` picks the JVM's options (:func:`jvm_conf`)."""
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
            for key, value in LOCAL_CONF.items():
                builder = builder.config(key, value)
    for key, value in jvm_conf(master, journal_rows, conf).items():
        builder = builder.config(key, value)
    try:
        spark = builder.getOrCreate()
    except Exception as exc:  # pyspark raises PySparkRuntimeError, py4j errors, or RuntimeError
        raise SparkFailed(
            f"Spark could not start: {first_line(exc)}; check java -version and JAVA_HOME") from exc
    if quiet:
        spark.sparkContext.setLogLevel("ERROR")
    return spark


#: Settings the job applies to the session while it runs (and then restores): what suits its
#: shape whatever the master. An aggregate that keeps a hash map per group (the exact
#: percentiles) would otherwise sort its whole input past 128 groups per task; the state's
#: datasets split by day would otherwise be sorted by day before they are written.
JOB_CONF: dict[str, str] = {
    "spark.sql.objectHashAggregate.sortBased.fallbackThreshold": "65536",
    "spark.sql.maxConcurrentOutputFileWriters": "64",
}


#: Shuffle partitions per core (``spark.default.parallelism``: the cores of a local master,
#: all executors' on a cluster), unless the session sets ``spark.sql.shuffle.partitions``.
PARTITIONS_PER_CORE = 2


def shuffle_partitions(spark: SparkSession) -> int | None:
    """:data:`PARTITIONS_PER_CORE` per core (Spark's 200 are tiny tasks on a few cores), or None
    if the session was started with its own ``spark.sql.shuffle.partitions``, which is kept."""
    context = spark.sparkContext
    if context.getConf().contains("spark.sql.shuffle.partitions"):
        return None
    return max(2, PARTITIONS_PER_CORE * context.defaultParallelism)


@contextmanager
def job_settings(spark: SparkSession) -> Iterator[None]:
    """Apply :data:`JOB_CONF` (and :func:`shuffle_partitions`) to ``spark`` for the duration of a run."""
    settings = dict(JOB_CONF)
    partitions = shuffle_partitions(spark)
    if partitions is not None:
        settings["spark.sql.shuffle.partitions"] = str(partitions)
    saved = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, before in saved.items():
            if before is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, before)


def _java_home() -> bool:
    home = os.environ.get("JAVA_HOME")
    return bool(home) and Path(home or "", "bin", "java").exists()


def first_line(exc: BaseException) -> str:
    """The first informative line of an exception's text (Spark's carry a JVM stack trace).

    >>> first_line(ValueError("bad thing\\n\\tat org.apache.Foo"))
    'bad thing'
    """
    text = str(exc).strip() or type(exc).__name__
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("JVM stacktrace", "at ", "Traceback")):
            return line[:500]
    return text.splitlines()[0][:500]


def _java_chain(exc: BaseException) -> list[Any]:
    """The Java exceptions behind a py4j error, outermost first (empty for a Python one)."""
    java = getattr(exc, "java_exception", None)
    chain: list[Any] = []
    while java is not None and len(chain) < 20:
        chain.append(java)
        java = java.getCause()
    return chain


def condition_of(exc: BaseException) -> tuple[str | None, list[str]]:
    """Spark's error condition of ``exc`` (None if none) and the Java exception types behind it."""
    condition: str | None = None
    getter = getattr(exc, "getCondition", None)
    if callable(getter):
        condition = getter()
    types: list[str] = []
    for java in _java_chain(exc):
        types.append(str(java.getClass().getName()))
        if condition is None:
            try:
                condition = java.getCondition()  # SparkThrowable
            except Exception:  # not a SparkThrowable: py4j raises when the method is missing
                condition = None
    return (str(condition) if condition else None), types


def _from_spark(exc: BaseException) -> bool:
    """Whether ``exc`` is Spark's (pyspark's exceptions, or a Java one through py4j)."""
    try:
        from py4j.protocol import Py4JError  # type: ignore[import-untyped]  # py4j ships no types
        from pyspark.errors import PySparkException
    except ImportError:
        return False
    return isinstance(exc, (PySparkException, Py4JError))


def _deepest_line(exc: BaseException) -> str:
    chain = _java_chain(exc)
    if chain:
        message = chain[-1].getMessage()
        if message:
            return f"{chain[-1].getClass().getName()}: {str(message).splitlines()[0][:400]}"
    return first_line(exc)


@contextmanager
def spark_errors(what: str) -> Iterator[None]:
    """Turn Spark's exceptions into :class:`PipelineError` subclasses with a hint, by what they are."""
    try:
        yield
    except PipelineError:
        raise
    except Exception as exc:
        if not _from_spark(exc):
            raise  # a bug of ours, not something Spark reported: let it show as it is
        condition, types = condition_of(exc)
        cond = condition or ""
        if cond.startswith(_MISSING) or any(t in _MISSING_JAVA for t in types):
            raise JournalNotFound(
                f"{what}: {first_line(exc)}; run edgeq export first, or check --journal") from exc
        if cond.startswith(_UNREADABLE) or any(t in _UNREADABLE_JAVA for t in types):
            raise MalformedJournal(
                f"{what}: the journal cannot be read ({_deepest_line(exc)}); re-export it with edgeq export "
                "into a new directory"
            ) from exc
        label = f" [{condition}]" if condition else ""
        raise SparkFailed(f"{what} failed{label}: {_deepest_line(exc)}") from exc

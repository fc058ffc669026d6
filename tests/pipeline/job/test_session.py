"""What Spark's failures mean for the user, sorted by what they are (Python type, Spark's error
condition, the Java exceptions behind them), never by words in their message."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from edgeq.sync.pipeline.errors import JournalNotFound, MalformedJournal, SparkFailed
from edgeq.sync.pipeline.job.inputs import spark_schema
from edgeq.sync.pipeline.job.session import (
    PARTITIONS_PER_CORE,
    condition_of,
    job_settings,
    shuffle_partitions,
    spark_errors,
)
from tests.pipeline.conftest import NO_EXECUTOR_PYTHON


def _parquet(folder: Path) -> Path:
    folder.mkdir(parents=True)
    path = folder / "part-000000000001-000000000001.parquet"
    pq.write_table(pa.table({"id": [1], "uid": ["DEV1.1"]}), path)
    return path


def test_an_unreadable_file_is_a_malformed_journal(spark: SparkSession, tmp_path: Path) -> None:
    path = _parquet(tmp_path / "date=2025-11-21")
    path.write_bytes(b"this is not a parquet file at all")
    with pytest.raises(MalformedJournal, match="cannot be read") as caught, \
            spark_errors("reading the journal"):
        spark.read.schema(spark_schema()).parquet(str(path)).count()
    condition, _ = condition_of(caught.value.__cause__)  # type: ignore[arg-type]
    assert condition is not None and condition.startswith("FAILED_READ_FILE")


def test_a_missing_path_is_a_journal_not_found(spark: SparkSession, tmp_path: Path) -> None:
    with pytest.raises(JournalNotFound, match="run edgeq export first"), spark_errors("reading the journal"):
        spark.read.parquet(str(tmp_path / "nowhere")).count()


def test_an_executor_without_python_is_a_spark_failure_whatever_the_message_says(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The issue's case: executors had no working Python while a Parquet file was read, and the
    old sorter, finding "parquet" in the message, said the journal could not be read."""
    path = _parquet(tmp_path / "date=2025-11-21")
    lower = F.udf(lambda uid: uid.lower(), "string", useArrow=False)  # Python work, on the executors
    frame = spark.read.parquet(str(path)).select(lower("uid"))
    with pytest.raises(SparkFailed, match="failed") as caught, spark_errors("computing a report"):
        frame.write.parquet(str(tmp_path / "report"))  # Spark's message: "... while calling o123.parquet"
    cause = str(caught.value.__cause__)
    assert ".parquet" in cause.splitlines()[0] and NO_EXECUTOR_PYTHON in cause
    assert not isinstance(caught.value, MalformedJournal)


def test_an_error_that_is_not_sparks_is_left_alone() -> None:
    with pytest.raises(ZeroDivisionError), spark_errors("computing a report"):
        1 / 0  # noqa: B018


def test_a_run_keeps_the_shuffle_partitions_the_session_was_started_with(spark: SparkSession) -> None:
    """The tests' session is started with its own spark.sql.shuffle.partitions (as a cluster
    operator's --conf would be): a run keeps it."""
    assert shuffle_partitions(spark) is None
    with job_settings(spark):
        assert spark.conf.get("spark.sql.shuffle.partitions") == "2"


def _run_script(tmp_path: Path, text: str) -> str:
    """Run ``text`` as a Python script in a process (and a JVM) of its own; its stdout."""
    script = tmp_path / "script.py"
    script.write_text(text)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_a_run_takes_its_shuffle_partitions_from_the_cores(tmp_path: Path) -> None:
    """A session started without it (a fresh one, in a process of its own: one JVM a process)
    gets PARTITIONS_PER_CORE per core while a run lasts, and its own setting back after."""
    stdout = _run_script(
        tmp_path,
        "from edgeq.sync.pipeline.job.session import job_settings, shuffle_partitions, spark_session\n"
        "spark = spark_session('local[3]', conf={'spark.ui.enabled': 'false'})\n"
        "before = spark.conf.get('spark.sql.shuffle.partitions')\n"
        "with job_settings(spark):\n"
        "    during = spark.conf.get('spark.sql.shuffle.partitions')\n"
        "print(shuffle_partitions(spark), before, during, spark.conf.get('spark.sql.shuffle.partitions'))\n"
        "spark.stop()\n",
    )
    assert stdout.split() == [str(3 * PARTITIONS_PER_CORE), "200", str(3 * PARTITIONS_PER_CORE), "200"]


def test_a_small_journals_local_run_starts_its_jvm_with_the_quick_compiler_only(tmp_path: Path) -> None:
    """The options jvm_conf chooses reach the JVM that starts (a process of its own: one JVM a
    process), beside the user's own."""
    stdout = _run_script(
        tmp_path,
        "from edgeq.sync.pipeline.job.session import spark_session\n"
        "spark = spark_session('local[1]', journal_rows=5_000, conf={'spark.ui.enabled': 'false',\n"
        "                      'spark.driver.extraJavaOptions': '-Dedgeq.test=yes'})\n"
        "bean = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()\n"
        "print(' '.join(str(a) for a in bean.getInputArguments()))\n"
        "spark.stop()\n",
    )
    arguments = stdout.split()
    assert "-XX:TieredStopAtLevel=1" in arguments and "-Dedgeq.test=yes" in arguments

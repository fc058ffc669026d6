"""The pipeline benchmark's measures beside its timings (benchmarks/pipeline_bench.py):
Spark's own cost (``--floor``: each small query it times really ran, over the whole
journal) and the executors' task time (``--tasks``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from benchmarks.pipeline_bench import FLOOR_KEYS, generate, spark_floor


def test_the_floor_times_each_distinct_query_and_each_wrote_its_groups(
    spark: SparkSession, tmp_path: Path
) -> None:
    journal = tmp_path / "journal"
    generate(journal, 600, devices=5, days=1)
    table = pq.read_table(journal).to_pylist()
    out = tmp_path / "floor"
    got = spark_floor(spark, journal, out, queries=8)
    assert len(got["seconds"]) == 8 and all(s > 0 for s in got["seconds"])
    # Each query grouped the whole journal by its key, in turn: as many groups as distinct values.
    expected = [len(Counter(row[FLOOR_KEYS[i % len(FLOOR_KEYS)]] for row in table)) for i in range(8)]
    assert got["groups"] == expected
    assert sorted(p.name for p in out.iterdir()) == [f"q{i:02d}" for i in range(8)]


def test_tasks_sums_the_executors_work_of_each_run_from_its_event_log(tmp_path: Path) -> None:
    """``--tasks``: a real run in a JVM of its own, its event log read back: the executors'
    task time is there, and no more than its cores could do in the run's wall time."""
    written = generate(tmp_path / "journal-600-0", 600, devices=5, days=1)  # the journal --rows 600 reads
    scratch = tmp_path / "tmp"  # the child's temporary directories (its event log's)
    scratch.mkdir()
    child = subprocess.run(
        [sys.executable, "-m", "benchmarks.pipeline_bench", "--rows", "600", "--grow", "0", "--tasks",
         "--quiet",
         "--dir", str(tmp_path), "--driver-memory", "1g"],
        capture_output=True, text=True, cwd=Path(__file__).parents[2], timeout=600,
        env={**os.environ, "TMPDIR": str(scratch)})
    assert child.returncode == 0, child.stderr[-2000:]
    lines = child.stdout.splitlines()
    row = json.loads("\n".join(lines[lines.index("{"):]))["results"][0]
    assert row["rows"] == written and row["cores"] >= 1
    assert row["task_cpu_s"] > 0 and 0 < row["task_s"] <= row["seconds"] * row["cores"] + 0.1
    assert (f"tasks {row['task_s']:.1f} s (CPU {row['task_cpu_s']:.1f} s) on {row['cores']} cores"
            in child.stdout)
    assert not list(scratch.glob("edgeq-bench-events-*"))  # the log is removed

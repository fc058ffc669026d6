"""The pipeline benchmark's measure of Spark's own cost (benchmarks/pipeline_bench.py,
``--floor``): each small query it times really ran, over the whole journal."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from benchmarks.pipeline_bench import FLOOR_KEYS, generate, spark_floor


def test_the_floor_times_each_distinct_query_and_each_wrote_its_groups(spark: SparkSession, tmp_path: Path) -> None:
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

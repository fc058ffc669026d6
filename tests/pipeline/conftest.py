"""Fixtures for the pipeline tests: one local Spark session for the whole run (starting
Spark takes seconds), and one home server's journal produced by real queue managers."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from edgeq.store.journal import JournalEntry
from tests.pipeline.scenario import Scenario, Truth

#: The Python Spark's executors would start for Python work (a UDF, a DataFrame made from a
#: Python list): none, so any such work fails the test that does it. The job runs no Python
#: on executors, so that it runs on a cluster whose executors have no Python packages.
NO_EXECUTOR_PYTHON = "/nonexistent/executors-run-no-python"


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    from edgeq.sync.pipeline.job.runner import spark_session

    saved = os.environ.get("PYSPARK_PYTHON")
    os.environ["PYSPARK_PYTHON"] = NO_EXECUTOR_PYTHON  # read once, when the context starts
    try:
        session = spark_session(
            "local[2]",
            app_name="edgeq-tests",
            conf={
                "spark.ui.enabled": "false",
                "spark.sql.shuffle.partitions": "2",
                "spark.default.parallelism": "2",
                "spark.driver.memory": "1g",
                "spark.ui.showConsoleProgress": "false",
            },
        )
    finally:
        if saved is None:
            del os.environ["PYSPARK_PYTHON"]
        else:
            os.environ["PYSPARK_PYTHON"] = saved
    yield session
    session.stop()


@dataclass
class HomeJournal:
    db: Path
    entries: list[JournalEntry]
    truth: Truth


@pytest.fixture(scope="session")
def home_journal(tmp_path_factory: pytest.TempPathFactory) -> HomeJournal:
    """A home server's store after ~4 hours (across midnight UTC) of three devices syncing."""
    root = tmp_path_factory.mktemp("home")
    scenario = Scenario(root)
    try:
        truth = scenario.run()
        entries = scenario.home.journal_since(0, 1_000_000)
    finally:
        scenario.close()
    return HomeJournal(root / "home.db", entries, truth)

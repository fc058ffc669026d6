"""The job on a Spark cluster: its bundle loads on a driver that has nothing but pyspark, and a
standalone master and worker (on loopback, from the installed pyspark) running it by
spark-submit, with executors that have no Python at all, write the same reports as a local run."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pyspark
import pytest
from pyspark.sql import SparkSession

from edgeq.sync.pipeline.export.exporter import export_journal
from edgeq.sync.pipeline.job.bundle import build
from edgeq.sync.pipeline.job.runner import ORDER_BY, REPORTS, run_pipeline
from tests.pipeline.conftest import NO_EXECUTOR_PYTHON, HomeJournal
from tests.sync.conftest import free_port

SITE = Path(pyspark.__file__).resolve().parent.parent
SPARK_HOME = Path(pyspark.__file__).resolve().parent


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A driver Python with only pyspark (and py4j, which it needs): ``python -S`` (no
    site-packages) with a PYTHONPATH of links to those two packages; and its environment."""
    root = tmp_path_factory.mktemp("bare")
    only = root / "only-pyspark"
    only.mkdir()
    for package in ("pyspark", "py4j"):
        (only / package).symlink_to(SITE / package)
    python = root / "driver-python"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    python.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PYSPARK", "SPARK"))}
    env |= {"PYTHONPATH": str(only), "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1"}
    return python, env


def _bare_import(python: Path, env: dict[str, str], archive: Path) -> subprocess.CompletedProcess[str]:
    code = ("import sys, importlib.util\n"
            "import edgeq.sync.pipeline.job.runner, edgeq.sync.pipeline.report.summary\n"
            "print(sorted(m for m in sys.modules if m.startswith('edgeq')))\n"
            "print([m for m in ('cbor2', 'pyarrow', 'cryptography') if importlib.util.find_spec(m)])\n")
    return subprocess.run([str(python), "-c", code],
                          env={**env, "PYTHONPATH": f"{archive}:{env['PYTHONPATH']}"},
                          capture_output=True, text=True, timeout=120, cwd=archive.parent)


def test_the_bundle_loads_with_nothing_but_pyspark(bare: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    python, env = bare
    archive, entry = build(tmp_path / "build")
    done = _bare_import(python, env, archive)
    assert done.returncode == 0, done.stderr
    loaded, present = (eval(line) for line in done.stdout.splitlines())  # two printed lists
    assert present == []  # the driver has none of edgeq's dependencies
    outside = [m for m in loaded if not m.startswith("edgeq.sync.pipeline")]
    assert outside == ["edgeq", "edgeq.errors", "edgeq.sync"]  # two stubs and the error classes
    assert "edgeq.sync.pipeline.job.runner" in entry.read_text()
    # The control: edgeq's own package, zipped whole as the docs used to say, does not load there.
    whole = tmp_path / "whole.zip"
    root = Path(__file__).resolve().parents[3]
    with zipfile.ZipFile(whole, "w") as zf:
        for folder, package in (("edgeq", "edgeq"), ("sync", "edgeq/sync"), ("rules", "edgeq/rules")):
            for path in (root / folder).rglob("*.py"):
                zf.write(path, f"{package}/{path.relative_to(root / folder)}")
    failed = _bare_import(python, env, whole)
    assert failed.returncode != 0
    assert re.search(r"ModuleNotFoundError: No module named '(cbor2|cryptography|click|sqlite_utils)'",
                     failed.stderr), failed.stderr


class Cluster:
    """A standalone master and one worker, started from the installed pyspark on loopback."""

    def __init__(self, root: Path, env: dict[str, str]) -> None:
        self.port, self.ui = free_port(), free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen[bytes]] = []
        spark_class = str(SPARK_HOME / "bin" / "spark-class")
        self._start([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                     "--port", str(self.port), "--webui-port", str(self.ui)], root / "master.log", env)
        self._start([spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                     "--webui-port", str(free_port()), "--cores", "2", "--memory", "2g",
                     "--work-dir", str(root / "work"), self.url], root / "worker.log", env)

    def _start(self, argv: list[str], log: Path, env: dict[str, str]) -> None:
        with log.open("wb") as out:  # each in its own process group: stopping it stops its executors too
            self.procs.append(subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env,
                                               start_new_session=True))

    def wait_for_worker(self, timeout_s: float = 180.0) -> None:
        """Until the master's status page counts a live worker (bounded)."""
        import time

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if any(p.poll() is not None for p in self.procs):
                raise RuntimeError("the master or the worker exited")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.ui}/json/", timeout=5) as answer:
                    if json.load(answer).get("aliveworkers", 0) >= 1:
                        return
            except OSError:
                pass
            time.sleep(0.5)  # polling the master's own status: the condition is the worker's registration
        raise TimeoutError("no worker registered with the master")

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(10)


@pytest.fixture(scope="module")
def cluster(bare: tuple[Path, dict[str, str]], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("cluster")
    (root / "work").mkdir()
    started = Cluster(root, bare[1])
    try:
        started.wait_for_worker()
        yield started
    finally:
        started.stop()


def _table(path: Path, name: str) -> list[dict[str, Any]]:
    rows = pq.read_table(path / name).to_pylist()
    return sorted(rows, key=lambda r: tuple(str(r[k]) for k in ORDER_BY[name]))


@pytest.mark.slow
def test_spark_submit_on_a_standalone_cluster_writes_what_a_local_run_writes(
    spark: SparkSession, cluster: Cluster, bare: tuple[Path, dict[str, str]], home_journal: HomeJournal,
    tmp_path: Path,
) -> None:
    python, env = bare
    journal = tmp_path / "journal"
    export_journal(home_journal.db, journal, batch_rows=300)
    archive, entry = build(tmp_path / "build")
    command = [
        str(SPARK_HOME / "bin" / "spark-submit"), "--master", cluster.url, "--deploy-mode", "client",
        "--conf", f"spark.pyspark.driver.python={python}",
        "--conf", f"spark.pyspark.python={NO_EXECUTOR_PYTHON}",  # executors have no Python at all
        "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.executor.memory=1g",
        "--conf", "spark.sql.shuffle.partitions=4", "--conf", "spark.ui.enabled=false",
        "--py-files", str(archive), str(entry), "--journal", str(journal), "--out", str(tmp_path / "cluster"),
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "Exactly-once audit" in done.stdout  # the summary, printed by the bundled report writer
    local = run_pipeline(spark, journal, tmp_path / "local")
    for name in REPORTS:
        assert _table(tmp_path / "cluster", name) == _table(tmp_path / "local", name), name
    meta = json.loads((tmp_path / "cluster" / "_edgeq_reports.json").read_text())
    assert (meta["totals"] == json.loads(json.dumps(local.totals))
            and meta["journal_rows"] == local.journal_rows)

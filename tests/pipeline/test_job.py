"""The Spark job over a real home server's exported journal: every figure against plain Python."""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from edgeq.sync.pipeline.errors import JournalNotFound, MalformedJournal
from edgeq.sync.pipeline.export import export_journal
from edgeq.sync.pipeline.job import ORDER_BY, REPORTS, PipelineResult, run_pipeline
from edgeq.sync.pipeline.report import html_page, summary_text
from pyspark.sql import SparkSession

from edgeq import MessageUID

from . import expected
from .conftest import HomeJournal


@pytest.fixture(scope="module")
def run(spark: SparkSession, home_journal: HomeJournal, tmp_path_factory: pytest.TempPathFactory) -> PipelineResult:
    root = tmp_path_factory.mktemp("pipeline")
    export_journal(home_journal.db, root / "journal", batch_rows=200)  # several batches, two dates
    lines: list[str] = []
    result = run_pipeline(spark, root / "journal", root / "reports", progress=lines.append)
    assert any(line.startswith("[9/9] throughput_hourly") for line in lines)
    return result


def _same(got: Any, want: Any) -> bool:
    if isinstance(want, float) or isinstance(got, float):
        return math.isclose(float(got), float(want), rel_tol=1e-9, abs_tol=1e-9)
    return bool(got == want)


def _check(name: str, got: list[dict[str, Any]], want: list[dict[str, Any]]) -> None:
    key = ORDER_BY[name]
    got = sorted(got, key=lambda r: tuple(str(r[k]) for k in key))
    want = sorted(want, key=lambda r: tuple(str(r[k]) for k in key))
    assert len(got) == len(want), f"{name}: {len(got)} rows, expected {len(want)}"
    for g, w in zip(got, want, strict=True):
        bad = {k: (g[k], v) for k, v in w.items() if not _same(g[k], v)}
        assert not bad, f"{name} row {w}: (got, expected) {bad}"


@pytest.mark.parametrize("name", list(REPORTS))
def test_every_report_matches_plain_python(run: PipelineResult, home_journal: HomeJournal, name: str) -> None:
    want = expected.all_reports(home_journal.entries)[name]
    assert run.counts[name] == len(want)
    _check(name, run.rows[name], want)
    # what was written is what was read back: one Parquet dataset per report
    table = pq.read_table(Path(run.out) / name)
    assert table.num_rows == len(want)


def test_latency_is_corrected_by_each_devices_clock_offset(run: PipelineResult, home_journal: HomeJournal) -> None:
    """Ground truth from the test's own clock: server-clock creation to confirm."""
    truth: dict[tuple[str, str], list[int]] = defaultdict(list)
    for device, queue, latency in home_journal.truth.latencies:
        truth[(device, queue)].append(latency)
    rows = {(r["device"], r["queue"]): r for r in run.rows["latency"]}
    assert set(rows) == set(truth)
    for key, values in truth.items():
        row = rows[key]
        assert row["messages"] == len(values)
        assert row["max_ms"] == max(values) and row["min_ms"] == min(values)
        assert row["p50_ms"] == pytest.approx(expected.percentile(values, 0.5))
        assert row["p99_ms"] == pytest.approx(expected.percentile(values, 0.99))
        assert row["uncorrected"] == (len(values) if key[0] in home_journal.truth.uncorrected_devices else 0)
    assert min(min(v) for v in truth.values()) >= 0  # DEV1 is 1.5 s ahead: uncorrected it would not be


def test_a_message_expired_on_both_sides_is_counted_once(run: PipelineResult, home_journal: HomeJournal) -> None:
    truth = home_journal.truth.expired
    both = sum(1 for sides in truth.values() if sides == {"server", "device"})
    assert both >= 4  # the network failure past expiry, and the push that expired in transit
    assert sum(r["both"] for r in run.rows["expiry_daily"]) == both
    assert sum(r["expired"] for r in run.rows["expiry_daily"]) == len(truth)
    assert sum(r["entries"] for r in run.rows["expiry_daily"]) == len(truth) + both
    assert len({r["date"] for r in run.rows["expiry_daily"]}) == 2  # across midnight UTC


def test_the_audit_finds_the_late_duplicate_and_the_non_assured_push(
    run: PipelineResult, home_journal: HomeJournal
) -> None:
    truth = home_journal.truth
    assert {r["uid"] for r in run.rows["audit_duplicates"]} == truth.duplicates != set()
    assert {r["uid"] for r in run.rows["audit_gaps"]} == truth.gaps != set()
    devices = {r["origin"]: r for r in run.rows["audit_devices"]}
    # One row per device store (origin = name:incarnation); HOME's own messages are not a device's.
    assert sorted(MessageUID(o, 1).qmgr for o in devices) == ["DEV1", "DEV2", "DEV3"]
    assert sum(r["duplicates"] for r in devices.values()) == len(truth.duplicates)
    assert sum(r["gaps"] for r in devices.values()) == len(truth.gaps)


def test_summary_and_html_page(run: PipelineResult) -> None:
    text = summary_text(run)
    assert "Delivery latency" in text and "ATTENTION: 1 uid(s) accepted more than once, 1 gap(s)" in text
    page = html_page(run)
    assert page.startswith("<!doctype html>") and page.count("<svg") == 3
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")  # self-contained


def test_missing_and_malformed_input_give_clear_errors(spark: SparkSession, tmp_path: Path) -> None:
    with pytest.raises(JournalNotFound, match="edgeq export"):
        run_pipeline(spark, tmp_path / "nowhere", tmp_path / "out")
    (tmp_path / "empty").mkdir()
    with pytest.raises(JournalNotFound, match="no journal files"):
        run_pipeline(spark, tmp_path / "empty", tmp_path / "out")
    bad = tmp_path / "bad" / "date=2025-11-21"
    bad.mkdir(parents=True)
    import pyarrow as pa

    pq.write_table(pa.table({"id": [1], "uid": ["DEV1.1"]}), bad / "part-000000000001-000000000001.parquet")
    with pytest.raises(MalformedJournal, match="missing column"):
        run_pipeline(spark, tmp_path / "bad", tmp_path / "out")
    (bad / "part-000000000001-000000000001.parquet").write_bytes(b"not parquet")
    with pytest.raises(MalformedJournal, match="not a readable Parquet file"):
        run_pipeline(spark, tmp_path / "bad", tmp_path / "out")


def test_cli_pipeline_run_prints_the_summary_and_writes_the_page(
    spark: SparkSession, home_journal: HomeJournal, tmp_path: Path
) -> None:
    from click.testing import CliRunner

    from edgeq.cli import cli

    runner = CliRunner()
    assert runner.invoke(cli, ["export", "--db", str(home_journal.db), "--out", str(tmp_path / "j")]).exit_code == 0
    done = runner.invoke(cli, ["pipeline", "run", "--journal", str(tmp_path / "j"), "--out", str(tmp_path / "r"),
                               "--master", "local[2]", "--html"])
    assert done.exit_code == 0, done.output
    assert "Exactly-once audit" in done.output and (tmp_path / "r" / "report.html").exists()
    assert not spark.sparkContext._jsc.sc().isStopped()  # the session it found is not stopped

"""The Spark job over a real home server's exported journal, and over a generated one: every
report and every headline figure against plain Python (tests/pipeline/expected.py)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from benchmarks.pipeline_bench import generate
from edgeq import MessageUID
from edgeq.sync.pipeline.errors import JournalNotFound, MalformedJournal
from edgeq.sync.pipeline.export.exporter import export_journal
from edgeq.sync.pipeline.job.inputs import JournalConflict
from edgeq.sync.pipeline.job.runner import COLUMNS, REPORTS, PipelineResult, run_pipeline
from edgeq.sync.pipeline.report.results import SCHEMA_VERSION, TOTALS
from edgeq.sync.pipeline.report.summary import summary_text
from tests.pipeline import expected
from tests.pipeline.compare import check, check_totals, entries_of
from tests.pipeline.conftest import HomeJournal


@pytest.fixture(scope="module")
def run(
    spark: SparkSession, home_journal: HomeJournal, tmp_path_factory: pytest.TempPathFactory
) -> PipelineResult:
    root = tmp_path_factory.mktemp("pipeline")
    export_journal(home_journal.db, root / "journal", batch_rows=200)  # several batches, two dates
    lines: list[str] = []
    result = run_pipeline(spark, root / "journal", root / "reports", progress=lines.append)
    assert any(line.startswith(f"[{len(REPORTS)}/{len(REPORTS)}] device_clock_hourly") for line in lines)
    return result


@pytest.mark.parametrize("name", list(REPORTS))
def test_every_report_matches_plain_python(run: PipelineResult, home_journal: HomeJournal, name: str) -> None:
    want = expected.all_reports(home_journal.entries)[name]
    assert run.counts[name] == len(want)
    check(name, run.rows[name], want)
    # What was written is the report, with exactly its documented columns.
    table = pq.read_table(Path(run.out) / name)
    assert table.num_rows == len(want) and tuple(table.column_names) == COLUMNS[name]


def test_the_totals_match_plain_python(run: PipelineResult, home_journal: HomeJournal) -> None:
    check_totals(run.totals, expected.totals(home_journal.entries))
    assert set(run.totals) == set(TOTALS)  # every documented figure (this journal has them all)
    assert run.schema_version == SCHEMA_VERSION and run.journal_rows == len(home_journal.entries)
    assert run.audit_scope["mode"] == "full" and run.audit_scope["unauditable"] == 0


def test_latency_is_corrected_by_each_devices_clock_offset(
    run: PipelineResult, home_journal: HomeJournal
) -> None:
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


def test_a_message_expired_on_both_sides_is_counted_once(
    run: PipelineResult, home_journal: HomeJournal
) -> None:
    truth = home_journal.truth.expired
    both = sum(1 for sides in truth.values() if sides == {"server", "device"})
    assert both >= 4  # the network failure past expiry, and the push that expired in transit
    daily = run.rows["expiry_daily"]
    assert sum(r["both"] for r in daily) == run.totals["expired_both"] == both
    # Every uid that expired somewhere is counted once: as an expired message, or apart when
    # only its device copy expired after the server accepted it.
    apart = run.totals["delivered_then_device_expired"] + run.totals["accepted_then_device_expired"]
    assert sum(r["expired"] for r in daily) == run.totals["expired"] == len(truth) - apart
    assert sum(r["entries"] for r in daily) == len(truth) + both
    assert len({r["date"] for r in daily}) == 2  # across midnight UTC


def test_a_device_copy_expired_after_acceptance_is_not_an_expired_message(
    run: PipelineResult, home_journal: HomeJournal
) -> None:
    """The confirm reply was lost, the server delivered the message (or still holds it), and the
    device's copy expired: neither lost nor expired traffic, and not a device-only expiry."""
    truth = home_journal.truth
    device_only = {u for u, sides in truth.expired.items() if sides == {"device"}}
    after_accept = device_only & truth.accepted  # a pulled message is the server's: never accepted
    assert (truth.delivered_then_device_expired <= after_accept
            and truth.accepted_then_device_expired <= after_accept)
    assert run.totals["delivered_then_device_expired"] >= len(truth.delivered_then_device_expired) == 2
    assert run.totals["accepted_then_device_expired"] >= len(truth.accepted_then_device_expired) == 2
    assert (run.totals["delivered_then_device_expired"] + run.totals["accepted_then_device_expired"]
            == len(after_accept))
    assert run.totals["expired_device_only"] == len(device_only - truth.accepted)
    devices = {r["device"]: r for r in run.rows["device_health"]}
    assert devices["DEV2"]["delivered_then_device_expired"] >= 2


def test_the_audit_finds_the_late_duplicate_and_the_non_assured_push(
    run: PipelineResult, home_journal: HomeJournal
) -> None:
    truth = home_journal.truth
    assert {r["uid"] for r in run.rows["audit_duplicates"]} == truth.duplicates != set()
    assert {r["uid"] for r in run.rows["audit_gaps"]} == truth.gaps != set()
    devices = {r["origin"]: r for r in run.rows["audit_devices"]}
    # One row per device store (origin = name:incarnation); HOME's own messages are not a device's.
    assert sorted(MessageUID(o, 1).qmgr for o in devices) == ["DEV1", "DEV2", "DEV3"]
    assert sum(r["duplicates"] for r in devices.values()) == run.totals["duplicates"] == len(truth.duplicates)
    assert sum(r["gaps"] for r in devices.values()) == run.totals["gaps"] == len(truth.gaps)
    assert "ATTENTION: 1 uid(s) accepted more than once, 1 gap(s)" in summary_text(run)


def test_the_audit_counts_messages_waiting_in_a_dead_letter_queue_in_its_own_column(
    run: PipelineResult, home_journal: HomeJournal
) -> None:
    """Issue 28: three messages refused to DEV3's dead-letter queue, one deleted there: two wait.
    None is a gap, and the audit does not say OK while they wait."""
    waiting = home_journal.truth.dead_letter_waiting
    devices = {MessageUID(r["origin"], 1).qmgr: r for r in run.rows["audit_devices"]}
    assert {name: r["dead_lettered"] for name, r in devices.items()} == {"DEV1": 0, "DEV2": 0, "DEV3": 2}
    assert run.totals["dead_lettered"] == len(waiting) == 2
    assert not {r["uid"] for r in run.rows["audit_gaps"]} & waiting
    assert "2 message(s) wait in their device's dead-letter queue" in summary_text(run)
    kinds = {(r["kind"], r["side"]): r["entries"] for r in run.rows["journal_totals"]}
    assert (kinds[("dead-lettered", "device")], kinds[("discarded", "device")]) == (3, 1)


def test_every_figure_comes_from_the_full_data_not_the_collected_rows(
    spark: SparkSession, tmp_path: Path
) -> None:
    """More devices (and rows of every report) than the result keeps: the counts and the totals
    are still those of all the data."""
    journal = tmp_path / "journal"
    generate(journal, 4_000, devices=60, days=2, file_rows=1_500)
    entries = entries_of(journal)
    result = run_pipeline(spark, journal, tmp_path / "reports", collect_limit=5)
    want = expected.all_reports(entries)
    assert len(want["audit_devices"]) == 60
    for name in REPORTS:
        assert result.counts[name] == len(want[name])
        assert len(result.rows[name]) == min(5, len(want[name]))
    check_totals(result.totals, expected.totals(entries))
    assert result.totals["devices"] == 60 and result.totals["accepted"] > 5 * 60
    full = run_pipeline(spark, journal, tmp_path / "again", full=True)
    for name in REPORTS:
        check(name, full.rows[name], want[name])


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
    with pytest.raises(MalformedJournal, match="inside --journal"):
        run_pipeline(spark, tmp_path / "bad", tmp_path / "bad" / "reports")


def test_rows_lacking_a_required_column_are_refused_and_the_previous_run_is_kept(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A part file whose schema allows nulls (not edgeq export's) holding a row without a uid:
    the rebuild it causes is refused, saying so, and the state and reports already there stay."""
    import pyarrow as pa

    journal, out = tmp_path / "journal", tmp_path / "reports"
    written = generate(journal, 1_200, devices=6, days=2, file_rows=400)
    assert run_pipeline(spark, journal, out).journal_rows == written
    kept = {p.relative_to(out): p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    part = sorted(journal.glob("date=*/part-*.parquet"))[1]
    table = pq.read_table(part)
    at = table.schema.get_field_index("uid")
    uids = table.column("uid").to_pylist()
    nullable = table.schema.set(at, pa.field("uid", pa.string(), nullable=True))
    pq.write_table(table.set_column(at, nullable.field(at), pa.array([None, *uids[1:]], pa.string())), part)
    with pytest.raises(MalformedJournal, match=r"1 journal row.* lack a column .*re-export"):
        run_pipeline(spark, journal, out)
    assert {p.relative_to(out): p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()} == kept
    with pytest.raises(MalformedJournal, match="lack a column"):  # a first run into a new directory
        run_pipeline(spark, journal, tmp_path / "new")
    assert not [p for p in (tmp_path / "new").rglob("*") if p.is_file()]  # no state, no report


def test_several_journals_that_cannot_go_together_are_refused_naming_them(
    spark: SparkSession, home_journal: HomeJournal, tmp_path: Path
) -> None:
    """Each journal of a run is one server's (docs/pipeline.md, "Several journals")."""
    one, copy, nameless = tmp_path / "one", tmp_path / "copy", tmp_path / "nameless"
    export_journal(home_journal.db, one)
    export_journal(home_journal.db, copy)  # a second export of the same store
    generate(nameless, 200, devices=2, days=1)
    (nameless / "_edgeq_export.json").unlink()  # part files, no manifest naming a server
    out = tmp_path / "out"
    cases = {
        "is given twice": [one, tmp_path / "." / "one"],
        f"--out {one}/reports is inside --journal {one}": [nameless, one],
        f"{one} and {copy} both hold HOME's journal": [one, copy],
        f"{nameless} does not say which server's journal it is": [one, nameless],
    }
    for message, journals in cases.items():
        target = one / "reports" if "--out" in message else out
        with pytest.raises(JournalConflict, match=message):
            run_pipeline(spark, journals, target)
    with pytest.raises(JournalNotFound, match=f"{tmp_path / 'nowhere'} does not exist"):
        run_pipeline(spark, [one, tmp_path / "nowhere"], out)
    assert not out.exists()
    # One journal needs no server name: the single-journal call is as before.
    assert run_pipeline(spark, [nameless], out).audit_scope["journals"][0]["server"] is None


def test_cli_pipeline_run_prints_the_summary_and_writes_the_page(
    spark: SparkSession, home_journal: HomeJournal, tmp_path: Path
) -> None:
    from click.testing import CliRunner

    from edgeq.cli import cli

    runner = CliRunner()
    assert runner.invoke(
        cli, ["export", "--db", str(home_journal.db), "--out", str(tmp_path / "j")]).exit_code == 0
    args = ["pipeline", "run", "--journal", str(tmp_path / "j"), "--out", str(tmp_path / "r"), "--master",
            "local[2]"]
    done = runner.invoke(cli, [*args, "--html"])
    assert done.exit_code == 0, done.output
    assert "Exactly-once audit" in done.output and (tmp_path / "r" / "report.html").exists()
    assert not spark.sparkContext._jsc.sc().isStopped()  # the session it found is not stopped
    again = runner.invoke(cli, [*args, "--full"])
    assert again.exit_code == 0, again.output

"""Incremental runs: a run over a journal that grew reads only the new part files, merges them
into the state kept in OUT/_state/, and gives exactly what a full run over everything gives,
report by report, figure by figure."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from benchmarks.pipeline_bench import generate, last_batch, move_parts
from edgeq.store.journal import JournalEntry
from edgeq.sync.pipeline.job.runner import ORDER_BY, REPORTS, PipelineResult, run_pipeline
from tests.pipeline import expected
from tests.pipeline.compare import check, check_totals, entries_of
from tests.pipeline.served import Served, serve_rounds


def _rows(result: PipelineResult, name: str) -> list[dict[str, Any]]:
    return sorted(result.rows[name], key=lambda r: tuple(str(r[k]) for k in ORDER_BY[name]))


def assert_identical(got: PipelineResult, want: PipelineResult) -> None:
    """Every report's rows and every total exactly equal (not within rounding)."""
    for name in REPORTS:
        assert got.counts[name] == want.counts[name], name
        assert _rows(got, name) == _rows(want, name), name
    assert got.totals == want.totals


@pytest.fixture(scope="module")
def grown(tmp_path_factory: pytest.TempPathFactory) -> tuple[Served, Path, Path]:
    """A real server's journal exported by cron twice into one directory: after round 4 (A),
    and at the end (A+B); a copy of the directory as it was after the first export."""
    root = tmp_path_factory.mktemp("grown")
    journal, first = root / "journal", root / "first"
    served = serve_rounds(root, 6, gap_round=5, export_after={3: journal})
    shutil.copytree(journal, first)
    from edgeq.sync.pipeline.export.exporter import export_journal

    export_journal(served.db, journal, batch_rows=40)
    return served, first, journal


def test_full_over_a_then_incremental_over_b_equals_full_over_both(
    spark: SparkSession, grown: tuple[Served, Path, Path], tmp_path: Path
) -> None:
    served, first, journal = grown
    out = tmp_path / "reports"
    before = run_pipeline(spark, first, out)
    assert before.audit_scope["mode"] == "full"
    parts_a = {p.relative_to(first) for p in first.glob("date=*/*.parquet")}
    parts_b = {p.relative_to(journal) for p in journal.glob("date=*/*.parquet")} - parts_a
    new_rows = len(served.entries) - before.journal_rows
    assert parts_b and new_rows > 0
    # The same output directory, now over the grown export: only its new part files are read.
    after = run_pipeline(spark, journal, out)
    assert after.audit_scope["mode"] == "incremental"
    assert after.audit_scope["new_parts"] == len(parts_b) and after.audit_scope["new_rows"] == new_rows
    assert after.audit_scope["parts"] == len(parts_a) + len(parts_b)
    full = run_pipeline(spark, journal, tmp_path / "full")
    assert full.audit_scope["mode"] == "full"
    assert_identical(after, full)
    for name in REPORTS:
        check(name, after.rows[name], expected.all_reports(served.entries)[name])
    check_totals(after.totals, expected.totals(served.entries))
    # Nothing new: nothing read, the same reports.
    again = run_pipeline(spark, journal, out)
    assert again.audit_scope["new_parts"] == 0 and again.audit_scope["mode"] == "incremental"
    assert_identical(again, full)


def held_back_journal(tmp_path: Path, rows: int = 4_500, devices: int = 40, days: int = 3,
                      file_rows: int = 1_500) -> tuple[Path, list[Path], Path]:
    """The benchmark's generator: a journal of chunks of ``file_rows`` rows (ids in order), its
    last chunk's part files moved to ``held`` (the export before the last chunk was exported):
    (journal, those part files, held)."""
    journal, held = tmp_path / "journal", tmp_path / "held"
    generate(journal, rows, devices=devices, days=days, file_rows=file_rows)
    later = last_batch(journal)
    move_parts(later, journal, held)
    return journal, later, held


def release(later: list[Path], held: Path) -> None:
    """Export the held-back chunk: its part files back into the journal."""
    journal = later[0].parent.parent  # part files are journal/date=.../part-....parquet
    move_parts([held / p.relative_to(journal) for p in later], held, journal)


def test_a_generated_journal_grown_by_a_run_of_new_days(spark: SparkSession, tmp_path: Path) -> None:
    """The benchmark's generator: three chunks of rows (ids in order), the last one new."""
    journal, later, held = held_back_journal(tmp_path)
    out = tmp_path / "reports"
    run_pipeline(spark, journal, out)
    release(later, held)
    after = run_pipeline(spark, journal, out)
    assert after.audit_scope["mode"] == "incremental" and after.audit_scope["new_parts"] == len(later)
    full = run_pipeline(spark, journal, tmp_path / "full", full=True)
    assert_identical(after, full)
    check_totals(full.totals, expected.totals(entries_of(journal)))


def test_runs_spread_over_partitions_give_what_runs_in_one_give(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A small run is done in one partition (no shuffles), a large one spread over the cores:
    the same journal both ways, full and then incremental, gives the same reports."""
    from edgeq.sync.pipeline.job import merge

    journal, later, held = held_back_journal(tmp_path)
    with monkeypatch.context() as patch:
        patch.setattr(merge, "SMALL_BYTES", -1)  # nothing is small: every step spread
        first = run_pipeline(spark, journal, tmp_path / "spread")
        release(later, held)
        spread = run_pipeline(spark, journal, tmp_path / "spread")
    assert first.audit_scope["mode"] == "full" and spread.audit_scope["mode"] == "incremental"
    assert merge.one_partition(spark.range(10))[1]  # and now, as by default, a small frame is in one
    assert_identical(spread, run_pipeline(spark, journal, tmp_path / "one", full=True))


def _write_part(journal: Path, entries: list[JournalEntry]) -> None:
    """``entries`` (ids in order) as one batch of part files, written by ``edgeq export``'s own writer."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from edgeq.sync.pipeline.export.exporter import _write_batch, arrow_schema

    journal.mkdir(parents=True, exist_ok=True)
    _write_batch(pa, pq, arrow_schema(), journal, entries, entries[0].id, entries[-1].id)


def test_the_first_server_rows_arriving_in_an_incremental_run_give_what_a_full_run_gives(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A journal whose first export held only device-reported expiries (no server-side row,
    so no audit window yet); the next export brings the server's rows, and with them the
    window: the incremental run must judge every uid as a full run over both does."""
    import dataclasses
    import json

    from edgeq.sync.pipeline.export.exporter import MANIFEST

    source = tmp_path / "generated"
    generate(source, 3_000, devices=20, days=2, file_rows=3_000)
    entries = sorted(entries_of(source), key=lambda e: e.id)
    device = [e for e in entries if e.side == "device"]
    server = [e for e in entries if e.side != "device"]
    assert device and server
    renumbered = [dataclasses.replace(e, id=i) for i, e in enumerate(device + server, start=1)]
    journal, out = tmp_path / "journal", tmp_path / "reports"
    manifest = {"format": 1, "server": "BENCH", "synthetic": True}
    _write_part(journal, renumbered[: len(device)])
    (journal / MANIFEST).write_text(json.dumps(manifest | {"watermark": len(device), "rows": len(device)}))
    first = run_pipeline(spark, journal, out)
    assert first.audit_scope["mode"] == "full" and first.audit_scope["from_ms"] is None
    _write_part(journal, renumbered[len(device):])
    (journal / MANIFEST).write_text(json.dumps(manifest | {"watermark": len(entries), "rows": len(entries)}))
    after = run_pipeline(spark, journal, out)
    assert after.audit_scope["mode"] == "incremental"
    full = run_pipeline(spark, journal, tmp_path / "full", full=True)
    assert after.audit_scope["from_ms"] == full.audit_scope["from_ms"] is not None
    assert_identical(after, full)
    check_totals(after.totals, expected.totals(renumbered))


def test_narrow_buckets_give_what_day_buckets_give_and_an_incremental_run_keeps_them(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A state kept in 3-hour buckets (uids created in one bucket are delivered or expire in
    the next), full and then incremental with no width asked for (the state's is kept),
    gives exactly what a full run in day buckets (the default) gives."""
    from edgeq.sync.pipeline.job.files import LocalFiles
    from edgeq.sync.pipeline.job.state import load_state

    journal, later, held = held_back_journal(tmp_path)
    out = tmp_path / "narrow"
    first = run_pipeline(spark, journal, out, bucket_ms=10_800_000)
    state, _ = load_state(LocalFiles(), str(out))
    assert first.audit_scope["mode"] == "full" and state is not None and state.bucket_ms == 10_800_000
    assert len(state.bucketed["uids"]) > 3  # more buckets than days
    release(later, held)
    after = run_pipeline(spark, journal, out)
    assert after.audit_scope["mode"] == "incremental"
    state, _ = load_state(LocalFiles(), str(out))
    assert state is not None and state.bucket_ms == 10_800_000
    days = run_pipeline(spark, journal, tmp_path / "days", full=True)
    state, _ = load_state(LocalFiles(), str(tmp_path / "days"))
    assert state is not None and state.bucket_ms == 86_400_000
    assert_identical(after, days)
    check_totals(days.totals, expected.totals(entries_of(journal)))

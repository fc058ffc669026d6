"""The audit over a window of the journal (``edgeq export --since``): a message seen without its
acceptance is a gap only if its acceptance would be in the data; one that reached the server
before the data starts is counted as unauditable, never as a gap. With the state of a run over
the earlier window, the later window is audited whole."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from edgeq.sync.pipeline.export.exporter import Since, export_journal
from edgeq.sync.pipeline.job.runner import REPORTS, PipelineResult, run_pipeline
from tests.pipeline import expected
from tests.pipeline.compare import check, check_totals
from tests.pipeline.served import Served, serve_rounds


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Served:
    """Six rounds; after the third, cron's export of the journal so far (the first window)."""
    root = tmp_path_factory.mktemp("served")
    return serve_rounds(root, 6, gap_round=4, export_after={2: root / "first"})


@pytest.fixture(scope="module")
def windows(served: Served) -> tuple[Path, Path, int]:
    """The journal in two windows: the first (cron's export after round 3), and the rest
    exported later with --since into its own directory. (first, second, boundary id)."""
    root = served.db.parent
    boundary = served.round_ends[2]
    export_journal(served.db, root / "second", since=Since(min_id=boundary + 1), batch_rows=40)
    return root / "first", root / "second", boundary


def _late_deliveries(served: Served, boundary: int) -> set[str]:
    """Ground truth from the whole journal: uids delivered after the boundary, accepted before it."""
    accepted_before = {e.uid for e in served.entries if e.kind == "accepted" and e.id <= boundary}
    return {e.uid for e in served.entries if e.kind == "delivered" and e.id > boundary} & accepted_before


def test_a_window_reports_no_false_gap_and_says_what_it_could_not_audit(
    spark: SparkSession, served: Served, windows: tuple[Path, Path, int], tmp_path: Path
) -> None:
    _, second, boundary = windows
    late = _late_deliveries(served, boundary)
    assert len(late) == 10  # round 2's orders, consumed in round 3
    result: PipelineResult = run_pipeline(spark, second, tmp_path / "reports")
    assert {r["uid"] for r in result.rows["audit_gaps"]} == served.gaps  # the real one, found
    assert result.totals["gaps"] == len(served.gaps) == 1
    assert result.totals["unauditable"] == result.audit_scope["unauditable"] == len(late)
    assert sum(r["unauditable"] for r in result.rows["audit_devices"]) == len(late)
    assert (f"{len(late):,} device message(s)" in result.audit_scope["text"]
            and "unauditable" in result.audit_scope["text"])
    assert result.audit_scope["from_id"] == boundary + 1
    window = [e for e in served.entries if e.id > boundary]
    for name in REPORTS:
        check(name, result.rows[name], expected.all_reports(window)[name])
    check_totals(result.totals, expected.totals(window))


def test_the_state_of_the_first_window_makes_the_second_whole(
    spark: SparkSession, served: Served, windows: tuple[Path, Path, int], tmp_path: Path
) -> None:
    first, second, _ = windows
    out = tmp_path / "reports"
    assert run_pipeline(spark, first, out).audit_scope["mode"] == "full"
    result = run_pipeline(spark, second, out)  # another directory, same server, ids above the state's
    assert result.audit_scope["mode"] == "incremental" and result.audit_scope["unauditable"] == 0
    assert {r["uid"] for r in result.rows["audit_gaps"]} == served.gaps
    for name in REPORTS:
        check(name, result.rows[name], expected.all_reports(served.entries)[name])
    check_totals(result.totals, expected.totals(served.entries))

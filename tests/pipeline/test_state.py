"""The state an incremental run keeps: a run that dies leaves the previous state whole (the
next run merges from it, and removes the dead run's files); a state that does not fit the
journal any more is rebuilt, saying why."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
from edgeq.sync.pipeline.files import LocalFiles
from edgeq.sync.pipeline.job import run_pipeline
from edgeq.sync.pipeline.state import STATE_DIR, StateWriter, load_state
from pyspark.sql import SparkSession

from benchmarks.pipeline_bench import generate

from .test_update import assert_identical


def _split(tmp_path: Path) -> tuple[Path, list[Path], Path]:
    """A generated journal with its last chunk's part files held back: (journal, held, holding dir)."""
    journal = tmp_path / "journal"
    generate(journal, 3_000, devices=20, days=2, file_rows=1_000)
    parts = sorted(journal.glob("date=*/*.parquet"))
    last = max(int(p.stem.split("-")[1]) for p in parts)
    later = [p for p in parts if int(p.stem.split("-")[1]) == last]
    held = tmp_path / "held"
    for p in later:
        (held / p.parent.name).mkdir(parents=True, exist_ok=True)
        p.rename(held / p.parent.name / p.name)
    return journal, later, held


def _release(later: list[Path], held: Path) -> None:
    for p in later:
        (held / p.parent.name / p.name).rename(p)


def test_a_run_that_dies_leaves_the_previous_state_whole(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal, later, held = _split(tmp_path)
    out = tmp_path / "reports"
    run_pipeline(spark, journal, out)
    state, _ = load_state(LocalFiles(), str(out))
    assert state is not None and state.runs == 1
    _release(later, held)

    def dies(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("the driver died here")

    with monkeypatch.context() as patch:  # every dataset written, the manifest not yet
        patch.setattr(StateWriter, "commit", dies)
        with pytest.raises(RuntimeError, match="died"):
            run_pipeline(spark, journal, out)
    same, _ = load_state(LocalFiles(), str(out))
    assert same is not None and same.generation == state.generation and same.parts == state.parts
    after = run_pipeline(spark, journal, out)
    assert after.audit_scope["mode"] == "incremental" and after.audit_scope["new_parts"] == len(later)
    assert_identical(after, run_pipeline(spark, journal, tmp_path / "full"))
    generations = [p.name for p in (out / STATE_DIR).iterdir() if p.name.startswith("g")]
    manifests = [p.name for p in (out / STATE_DIR).iterdir() if p.name.startswith("state-")]
    assert len(manifests) == 1 and len(generations) <= 2  # the dead run's directory is gone


def test_a_state_that_does_not_fit_the_journal_is_rebuilt(spark: SparkSession, tmp_path: Path) -> None:
    journal, later, held = _split(tmp_path)
    out = tmp_path / "reports"
    run_pipeline(spark, journal, out)
    _release(later, held)
    # A part file read before now differs (re-exported): its rows may differ too.
    part = sorted(journal.glob("date=*/*.parquet"))[0]
    pq.write_table(pq.read_table(part), part, compression="gzip")
    rebuilt = run_pipeline(spark, journal, out)
    assert rebuilt.audit_scope["mode"] == "full" and "changed since it was read" in rebuilt.audit_scope["reason"]
    assert_identical(rebuilt, run_pipeline(spark, journal, tmp_path / "full"))
    forced = run_pipeline(spark, journal, out, full=True)
    assert forced.audit_scope["mode"] == "full" and "--full" in forced.audit_scope["reason"]

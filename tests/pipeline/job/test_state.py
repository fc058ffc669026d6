"""The state an incremental run keeps: a run that dies leaves the previous state whole (the
next run merges from it, and removes the dead run's files); a state that does not fit the
journals any more is rebuilt, saying why; with several journals (one per server), each
one's new parts are read, and a journal added or left out means a rebuild."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from edgeq.sync.pipeline.export.layout import Part
from edgeq.sync.pipeline.job.files import LocalFiles
from edgeq.sync.pipeline.job.inputs import Journal
from edgeq.sync.pipeline.job.runner import run_pipeline
from edgeq.sync.pipeline.job.state import (
    DEFAULT_BUCKET_MS,
    STATE_DIR,
    JournalRecord,
    State,
    StateWriter,
    load_state,
    plan_run,
    read_dataset,
)
from tests.pipeline.job.test_update import assert_identical, held_back_journal, release


def _split(tmp_path: Path) -> tuple[Path, list[Path], Path]:
    """A generated journal with its last chunk's part files held back: (journal, held, holding dir)."""
    return held_back_journal(tmp_path, 3_000, devices=20, days=2, file_rows=1_000)


def test_a_run_that_dies_leaves_the_previous_state_whole(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal, later, held = _split(tmp_path)
    out = tmp_path / "reports"
    run_pipeline(spark, journal, out)
    state, _ = load_state(LocalFiles(), str(out))
    assert state is not None and state.runs == 1
    release(later, held)

    def dies(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("the driver died here")

    with monkeypatch.context() as patch:  # every dataset written, the manifest not yet
        patch.setattr(StateWriter, "commit", dies)
        with pytest.raises(RuntimeError, match="died"):
            run_pipeline(spark, journal, out)
    same, _ = load_state(LocalFiles(), str(out))
    assert same is not None and same.generation == state.generation and same.journals == state.journals
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
    release(later, held)
    # A part file read before now differs (re-exported): its rows may differ too.
    part = sorted(journal.glob("date=*/*.parquet"))[0]
    pq.write_table(pq.read_table(part), part, compression="gzip")
    rebuilt = run_pipeline(spark, journal, out)
    assert (rebuilt.audit_scope["mode"] == "full"
            and "changed since it was read" in rebuilt.audit_scope["reason"])
    assert_identical(rebuilt, run_pipeline(spark, journal, tmp_path / "full"))
    forced = run_pipeline(spark, journal, out, full=True)
    assert forced.audit_scope["mode"] == "full" and "--full" in forced.audit_scope["reason"]


def _journal(server: str, *ranges: tuple[int, int], size: int = 100) -> Journal:
    parts = [Part(a, b, f"date=2025-11-21/part-{a:012d}-{b:012d}.parquet", size) for a, b in ranges]
    return Journal(f"journals/{server}", parts, server, max(b for _, b in ranges))


def _state(*journals: Journal) -> State:
    """The state of a run that read these journals."""
    return State(journals={j.key: JournalRecord(j.path, {p.name: [p.first, p.last, p.size] for p in j.parts})
                           for j in journals}, bucket_ms=1)


def test_several_journals_each_read_from_where_the_state_left_it() -> None:
    a, b = _journal("HOMEA", (1, 10)), _journal("HOMEB", (1, 5))
    grown_a, grown_b = _journal("HOMEA", (1, 10), (11, 20)), _journal("HOMEB", (1, 5), (6, 8), (9, 12))
    plan = plan_run([grown_b, grown_a], _state(a, b), "", 1)  # the order given does not matter
    assert plan.incremental and plan.new_parts == 3
    assert ({k: [(p.first, p.last) for p in v] for k, v in plan.new.items()}
            == {"HOMEA": [(11, 20)], "HOMEB": [(6, 8), (9, 12)]})
    # ids are per server: HOMEB's new part starts below HOMEA's last id, and that is fine
    assert plan_run([a, grown_b], _state(a, b), "", 1).incremental


def test_a_journal_added_left_out_changed_or_behind_rebuilds_saying_which() -> None:
    a, b, c = _journal("HOMEA", (1, 10)), _journal("HOMEB", (1, 5)), _journal("HOMEC", (1, 3))
    reasons = {
        "added": plan_run([a, b, c], _state(a, b), "", 1),
        "left out": plan_run([a], _state(a, b), "", 1),
        "changed": plan_run([a, _journal("HOMEB", (1, 5), size=99)], _state(a, b), "", 1),
        "behind": plan_run([a, _journal("HOMEB", (1, 5), (4, 9))], _state(a, b), "", 1),
    }
    assert not any(plan.incremental for plan in reasons.values())
    assert reasons["added"].reason == "journal(s) added since the last run: HOMEC"
    assert reasons["left out"].reason == "journal(s) no longer given: HOMEB"
    assert reasons["changed"].reason.startswith(
        "HOMEB: date=2025-11-21/part-000000000001-000000000005.parquet changed")
    assert reasons["behind"].reason.startswith(
        "HOMEB: date=2025-11-21/part-000000000004-000000000009.parquet holds "
        "journal ids the state has passed (up to 5)")
    # A full plan reads every part of every journal into a fresh state.
    assert (reasons["added"].new_parts == 3
            and set(reasons["added"].state.journals) == {"HOMEA", "HOMEB", "HOMEC"})
    # One journal for another: said as before.
    assert plan_run([b], _state(a), "", 1).reason == "the state is of server HOMEA's journal, this is HOMEB's"


def test_the_state_manifest_keeps_each_journal(tmp_path: Path) -> None:
    state = _state(_journal("HOMEA", (1, 10)), _journal("HOMEB", (1, 5), (6, 7)))
    state.journals["HOMEB"].window_ms = 1_763_683_200_000
    (tmp_path / STATE_DIR).mkdir()
    (tmp_path / STATE_DIR / "state-000001.json").write_text(state.to_json())
    back, why = load_state(LocalFiles(), str(tmp_path))
    assert back == state and why == ""
    assert back.part_count == 3 and back.journals["HOMEB"].max_id == 7
    # A state of the earlier format (one journal, no windows) is rebuilt, saying so.
    (tmp_path / STATE_DIR / "state-000002.json").write_text('{"format": 1, "server": "HOME", "parts": {}}')
    assert (load_state(LocalFiles(), str(tmp_path))
            == (None, "the state state-000002.json is of another format or damaged"))


def test_a_new_state_is_kept_in_day_buckets_and_a_later_run_keeps_the_states_width() -> None:
    a = _journal("HOMEA", (1, 10))
    assert plan_run([a], None, "").state.bucket_ms == DEFAULT_BUCKET_MS == 86_400_000
    kept = _state(a)
    kept.bucket_ms = 10_800_000  # made by a run that asked for 3-hour buckets
    grown = _journal("HOMEA", (1, 10), (11, 20))
    plan = plan_run([grown], kept, "")  # no width asked for: the state's
    assert plan.incremental and plan.state.bucket_ms == 10_800_000
    assert plan_run([grown], kept, "", 10_800_000).incremental
    # A width asked for that the state was not kept in: a rebuild, in that width.
    asked = plan_run([grown], kept, "", DEFAULT_BUCKET_MS)
    assert not asked.incremental and asked.reason == "the state was kept in other buckets"
    assert asked.state.bucket_ms == DEFAULT_BUCKET_MS


def test_bad_run_arguments_are_refused_before_spark_does_anything(
    spark: SparkSession, tmp_path: Path
) -> None:
    from edgeq.sync.pipeline.errors import PipelineError

    for bad in ({"bucket_ms": 0}, {"bucket_ms": 1.5}, {"bucket_ms": True}, {"collect_limit": -1}):
        with pytest.raises(PipelineError, match="must be an int of at least"):
            run_pipeline(spark, tmp_path / "journal", tmp_path / "out", **bad)  # type: ignore[arg-type]
    assert not (tmp_path / "out").exists()


def test_a_run_is_sized_by_the_rows_it_will_read_before_spark_starts(tmp_path: Path) -> None:
    """rows_to_read chooses the JVM (session.jvm_conf): an incremental run reads the new parts only."""
    from edgeq.sync.pipeline.job.runner import rows_to_read

    read = _journal("HOMEA", (1, 3_000_000), (3_000_001, 5_000_000))
    grown = _journal("HOMEA", (1, 3_000_000), (3_000_001, 5_000_000), (5_000_001, 5_050_000))
    out = tmp_path / "reports"
    assert rows_to_read([grown], str(out)) == 5_050_000  # no state yet: a full run
    (out / STATE_DIR).mkdir(parents=True)
    state = _state(read)
    state.bucket_ms = DEFAULT_BUCKET_MS
    (out / STATE_DIR / "state-000001.json").write_text(state.to_json())
    assert rows_to_read([grown], str(out)) == 50_000
    assert rows_to_read([grown], str(out), full=True) == 5_050_000
    assert rows_to_read([read], str(out)) == 0  # nothing new
    # A state that does not fit (another server's): rebuilt, so every row is read.
    assert rows_to_read([_journal("HOMEB", (1, 10))], str(out)) == 10
    assert rows_to_read([grown], "hdfs://head/reports") == 5_050_000  # not local: not looked at


def test_a_bundle_keeps_each_datasets_columns_and_types_and_leaves_no_view(
    spark: SparkSession, tmp_path: Path
) -> None:
    out = str(tmp_path / "out")
    writer, state = StateWriter(spark, LocalFiles(), out, None), State()
    # Two datasets sharing a column, each with columns the other lacks (an array among them),
    # and a column that needs quoting in SQL. (Made in SQL: the test session's
    # executors have no Python, as on a cluster without it.)
    first = spark.sql(
        "SELECT * FROM VALUES ('a', 1L, array(3L, 1L)), ('b', NULL, array()) AS t(device, n, `odd``name`)")
    second = spark.sql("SELECT * FROM VALUES ('c', 'x''y') AS t(device, label)")
    views_before = {t.name for t in spark.catalog.listTables()}
    writer.write_bundle(state, "rows", {"first": first, "second": second})
    assert {t.name for t in spark.catalog.listTables()} == views_before
    for name, frame in (("first", first), ("second", second)):
        back = read_dataset(spark, state, name)
        assert back is not None, name
        assert [(f.name, f.dataType.simpleString()) for f in back.schema] == [
            (f.name, f.dataType.simpleString()) for f in frame.schema], name
        assert sorted(back.collect()) == sorted(frame.collect()), name
    # A dataset's name is a directory's and a SQL literal: an identifier. A column with one name
    # and two types cannot share a bundle. Both are refused before anything is written.
    with pytest.raises(ValueError, match="must be an identifier"):
        writer.write_bundle(state, "again", {"first": first, "second's": second})
    clash = spark.sql("SELECT * FROM VALUES ('d', '7') AS t(device, n)")
    with pytest.raises(ValueError, match="column n of clash is StringType"):
        writer.write_bundle(state, "again", {"first": first, "clash": clash})
    assert not (tmp_path / "out" / STATE_DIR / f"g{writer.generation:06d}" / "again").exists()


def _dictionary_encoded(directory: Path) -> list[str]:
    """The columns of the Parquet files under ``directory`` that have a dictionary page."""
    found = []
    for path in sorted(directory.rglob("*.parquet")):
        meta = pq.ParquetFile(path).metadata
        for group in range(meta.num_row_groups):
            for i in range(meta.num_columns):
                column = meta.row_group(group).column(i)
                if column.has_dictionary_page or any("DICTIONARY" in e for e in column.encodings):
                    found.append(f"{path.relative_to(directory)}:{column.path_in_schema}")
    return found


def test_the_state_is_written_without_dictionary_encoding(spark: SparkSession, tmp_path: Path) -> None:
    # Its columns are mostly per-uid ids and times, nearly all distinct: a dictionary is built,
    # overflows and is re-encoded plainly: a quarter of the uid status stage's task time.
    out = tmp_path / "out"
    writer, state = StateWriter(spark, LocalFiles(), str(out), None), State()
    # Repeated values, which Parquet would otherwise keep in a dictionary.
    frame = spark.sql("SELECT id % 2 AS bucket, id AS n, concat('DEV', id % 3) AS origin FROM range(2000)")
    writer.write_bundle(state, "uids", {"uids": frame}, buckets={0, 1})
    writer.write_bundle(state, "rows", {"kinds": frame.drop("bucket")})
    writer.write_bucketed(state, "expired", frame, {0, 1})
    assert len(list(out.rglob("*.parquet"))) >= 6
    assert _dictionary_encoded(out) == []
    back = read_dataset(spark, state, "uids", {0, 1})
    assert back is not None and sorted(r["n"] for r in back.collect()) == list(range(2000))

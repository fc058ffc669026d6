"""``edgeq export``: incremental, never duplicating a row, and clear about bad input."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow.dataset as ds
import pytest
from click.testing import CliRunner

from edgeq import ManualClock, QueueManager
from edgeq.cli import cli
from edgeq.store.journal import JOURNAL_COLUMNS
from edgeq.sync.pipeline.errors import JournalNotFound, MalformedJournal
from edgeq.sync.pipeline.export.exporter import MANIFEST, Since, export_journal, parse_since, part_name
from tests.pipeline.conftest import HomeJournal
from tests.pipeline.homes import accept, home_server, read_ids
from tests.pipeline.reports import documented_schema


@pytest.fixture
def home(tmp_path: Path) -> Iterator[tuple[QueueManager, ManualClock]]:
    qm, clock = home_server(tmp_path)
    yield qm, clock
    qm.close()


def test_the_export_matches_the_journal_row_for_row(home_journal: HomeJournal, tmp_path: Path) -> None:
    out = tmp_path / "journal"
    result = export_journal(home_journal.db, out, batch_rows=500)
    assert result.rows == len(home_journal.entries) and result.server == "HOME"
    table = ds.dataset(out, format="parquet", partitioning="hive").to_table()
    rows = sorted(table.to_pylist(), key=lambda r: r["id"])
    assert [tuple(r[c] for c in JOURNAL_COLUMNS) for r in rows] == [
        tuple(getattr(e, c) for c in JOURNAL_COLUMNS) for e in home_journal.entries
    ]
    assert {str(r["date"]) for r in rows} == {"2025-11-21", "2025-11-22"}  # partitioned by at_ms's UTC date


def test_re_runs_export_only_what_is_new(home: tuple[QueueManager, ManualClock], tmp_path: Path) -> None:
    qm, clock = home
    out = tmp_path / "journal"
    accept(qm, clock, 30, 0)  # 5 hours: crosses midnight
    first = export_journal(qm.path, out, batch_rows=7)
    assert first.rows == 30 and first.watermark == 30
    assert export_journal(qm.path, out).rows == 0  # nothing new
    accept(qm, clock, 12, 30)
    second = export_journal(qm.path, out, batch_rows=100)
    assert (second.rows, second.first_id, second.last_id) == (12, 31, 42)
    assert read_ids(out) == list(range(1, 43))  # every entry exactly once


def test_an_interrupted_export_is_cleaned_up_not_duplicated(
    home: tuple[QueueManager, ManualClock], tmp_path: Path
) -> None:
    qm, clock = home
    out = tmp_path / "journal"
    accept(qm, clock, 5, 0)
    export_journal(qm.path, out)
    accept(qm, clock, 5, 5)
    # a crash after a batch's files were renamed but before the watermark moved
    day = next(out.glob("date=*"))
    (day / part_name(6, 10)).write_bytes(next(day.glob("part-*.parquet")).read_bytes())
    (day / ".tmp-part-000000000006-000000000010.parquet").write_bytes(b"half")
    lines: list[str] = []
    assert export_journal(qm.path, out, progress=lines.append).rows == 5
    assert any("interrupted" in line for line in lines)
    assert read_ids(out) == list(range(1, 11))


def test_since_an_id_or_a_date(home: tuple[QueueManager, ManualClock], tmp_path: Path) -> None:
    qm, clock = home
    accept(qm, clock, 30, 0)  # START_MS is 22:00 UTC: entries 13.. are on the next day
    by_id = export_journal(qm.path, tmp_path / "a", since=parse_since("25"))
    assert read_ids(tmp_path / "a") == list(range(25, 31)) and by_id.watermark == 30
    by_date = export_journal(qm.path, tmp_path / "b", since=parse_since("2025-11-22"))
    assert read_ids(tmp_path / "b") == list(range(13, 31)) and by_date.skipped == 12
    assert parse_since(None) == Since()
    with pytest.raises(MalformedJournal, match="neither a journal id nor a date"):
        parse_since("yesterday")


def test_bad_inputs_are_refused_with_what_to_do(
    home: tuple[QueueManager, ManualClock], tmp_path: Path
) -> None:
    qm, clock = home
    with pytest.raises(JournalNotFound, match="does not exist"):
        export_journal(tmp_path / "missing.db", tmp_path / "out")
    (tmp_path / "text.db").write_text("hello")
    with pytest.raises(MalformedJournal, match="not an edgeq store"):
        export_journal(tmp_path / "text.db", tmp_path / "out")
    accept(qm, clock, 2, 0)
    export_journal(qm.path, tmp_path / "out")
    other = QueueManager(tmp_path / "other.db", name="OTHER", journal="server")
    other.close()
    with pytest.raises(MalformedJournal, match="its own directory"):
        export_journal(tmp_path / "other.db", tmp_path / "out")
    (tmp_path / "out" / MANIFEST).write_text("{")
    with pytest.raises(MalformedJournal, match="damaged"):
        export_journal(qm.path, tmp_path / "out")


def test_cli_export_and_its_errors(home: tuple[QueueManager, ManualClock], tmp_path: Path) -> None:
    qm, clock = home
    accept(qm, clock, 3, 0)
    runner = CliRunner()
    ok = runner.invoke(cli, ["export", "--db", str(qm.path), "--out", str(tmp_path / "j"), "--quiet"])
    assert ok.exit_code == 0, ok.output
    assert "Exported 3 journal entries" in ok.output
    again = runner.invoke(cli, ["export", "--db", str(qm.path), "--out", str(tmp_path / "j")])
    assert again.exit_code == 0 and "Nothing new" in again.output
    missing = runner.invoke(cli, ["export", "--db", str(tmp_path / "nope.db"), "--out", str(tmp_path / "j")])
    assert missing.exit_code == 1
    assert missing.output.strip().count("\n") == 0 and missing.output.startswith("Error: ")
    no_journal = runner.invoke(cli, ["pipeline", "run", "--journal", str(tmp_path / "none"), "--out",
                                     str(tmp_path / "r")])
    assert (no_journal.exit_code == 1 and no_journal.output.startswith("Error: ")
            and "edgeq export" in no_journal.output)


def test_part_files_are_clustered_by_origin_so_a_device_filter_skips_row_groups(
    home_journal: HomeJournal, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows sorted by origin within each part file, in small row groups: a reader looking
    for one device reads only the groups whose origin statistics can hold it."""
    import pyarrow.parquet as pq

    from edgeq.sync.pipeline.export import exporter as export

    monkeypatch.setattr(export, "ROW_GROUP_ROWS", 40)
    out = tmp_path / "journal"
    export_journal(home_journal.db, out, batch_rows=400)
    device = next(e.origin for e in home_journal.entries if e.device == "DEV2")
    groups = wanted = 0
    for part in out.glob("date=*/part-*.parquet"):
        origins = pq.read_table(part, columns=["origin", "id"]).to_pylist()
        assert origins == sorted(origins, key=lambda r: (r["origin"], r["id"]))
        meta = pq.ParquetFile(part).metadata
        column = meta.schema.names.index("origin")
        for g in range(meta.num_row_groups):
            stats = meta.row_group(g).column(column).statistics
            groups += 1
            wanted += stats.min <= device <= stats.max
    assert groups > 10 and wanted < groups / 2  # most row groups are skipped for one device
    table = ds.dataset(out, format="parquet", partitioning="hive").to_table(
        filter=ds.field("origin") == device)
    assert (sorted(table.column("id").to_pylist())
            == [e.id for e in home_journal.entries if e.origin == device])


def test_the_documented_schema_is_the_part_files(
    home: tuple[QueueManager, ManualClock], tmp_path: Path
) -> None:
    import pyarrow.parquet as pq

    qm, clock = home
    accept(qm, clock, 3, 0)
    export_journal(qm.path, tmp_path / "j")
    schema = pq.read_schema(next((tmp_path / "j").glob("date=*/part-*.parquet")))
    documented = documented_schema()["journal"]
    assert [(f.name, str(f.type)) for f in schema] == [(name, kind) for name, kind, _ in documented]
    assert ({f.name for f in schema if not f.nullable}
            == {name for name, _, null in documented if null == "never"})

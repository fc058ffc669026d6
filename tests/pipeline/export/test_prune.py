"""Journal retention (``edgeq export --prune-after``): only exported, old entries are removed,
in bounded transactions, and a crash anywhere loses nothing."""

from __future__ import annotations

import json
import math
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgeq import ManualClock, QueueManager
from edgeq.cli import cli
from edgeq.sync.pipeline.errors import JournalNotFound, MalformedJournal
from edgeq.sync.pipeline.export.exporter import MANIFEST, export_journal, parse_since
from edgeq.sync.pipeline.export.prune import prune_journal
from tests.pipeline.homes import accept, home_server, read_ids, store_rows
from tests.pipeline.scenario import START_MS

HOUR, DAY = 3_600_000, 86_400_000
#: A "now" far past every entry: with a bound of 0 every exported entry is old enough.
LATER = START_MS + 365 * DAY


@pytest.fixture
def home(tmp_path: Path) -> Iterator[tuple[QueueManager, ManualClock]]:
    qm, clock = home_server(tmp_path)
    yield qm, clock
    qm.close()


def test_only_exported_entries_older_than_the_bound_are_removed(
    home: tuple[QueueManager, ManualClock], tmp_path: Path
) -> None:
    qm, clock = home
    out = tmp_path / "journal"
    accept(qm, clock, 30, 0)  # ids 1..30, ten minutes apart
    export_journal(qm.path, out, batch_rows=8)
    now = clock()
    # Not exported yet: five entries dated back in the past (as a device's expiry report,
    # rebased to the server's clock, can be) and five of now.
    clock.set(START_MS)
    accept(qm, clock, 5, 30)
    clock.set(now)
    accept(qm, clock, 5, 35)
    before = store_rows(qm.path)
    cutoff = now - 2 * HOUR
    want = {i for i, at in before.items() if i <= 30 and at < cutoff}
    assert 0 < len(want) < 30 and any(i > 30 and at < cutoff for i, at in before.items())

    lines: list[str] = []
    result = prune_journal(qm.path, out, older_than_ms=2 * HOUR, now_ms=now, batch_rows=7,
                           progress=lines.append)
    after = store_rows(qm.path)
    assert set(before) - set(after) == want  # exactly the exported, old entries
    assert want <= set(read_ids(out))  # each of them is in the export
    assert (result.removed, result.first_id, result.last_id) == (len(want), min(want), max(want))
    assert (result.kept_recent, result.kept_skipped, result.kept_unexported) == (30 - len(want), 0, 10)
    # bounded transactions: at most 7 entries each
    done = [int(m.group(1).replace(",", "")) for line in lines if (m := re.search(r"pruned ([\d,]+) ", line))]
    assert result.batches == math.ceil(len(want) / 7) == len(done)
    assert all(0 < b - a <= 7 for a, b in zip([0, *done], done, strict=False))
    again = prune_journal(qm.path, out, older_than_ms=2 * HOUR, now_ms=now)
    assert again.removed == 0 and store_rows(qm.path) == after
    accept(qm, clock, 1, 40)  # the server goes on with its store
    assert max(store_rows(qm.path)) == 41


@pytest.mark.parametrize(("since", "left_out"), [("2025-11-22", 12), ("25", 24)])
def test_entries_left_out_by_since_are_never_pruned(
    home: tuple[QueueManager, ManualClock], tmp_path: Path, since: str, left_out: int
) -> None:
    qm, clock = home
    accept(qm, clock, 30, 0)  # START_MS is 22:00 UTC: entries 13.. are on the next day
    export_journal(qm.path, tmp_path / "j", since=parse_since(since), batch_rows=10)
    result = prune_journal(qm.path, tmp_path / "j", older_than_ms=0, now_ms=LATER)
    assert sorted(store_rows(qm.path)) == list(range(1, left_out + 1))  # what the export does not hold
    assert (result.removed, result.kept_skipped) == (30 - left_out, left_out)
    accept(qm, clock, 4, 30)  # later runs export (and prune) everything new as usual
    export_journal(qm.path, tmp_path / "j")
    prune_journal(qm.path, tmp_path / "j", older_than_ms=0, now_ms=LATER)
    assert sorted(store_rows(qm.path)) == list(range(1, left_out + 1))


@pytest.mark.parametrize(("since", "pruned"), [(None, 20), ("2025-11-22", 0)])
def test_a_manifest_from_before_skips_were_recorded_is_checked_against_the_files(
    home: tuple[QueueManager, ManualClock], tmp_path: Path, since: str | None, pruned: int
) -> None:
    """An export made by an older edgeq has no ``skipped`` list: the part files' row count
    must match the store's, or nothing up to its watermark is removed."""
    qm, clock = home
    accept(qm, clock, 20, 0)
    export_journal(qm.path, tmp_path / "j", since=parse_since(since))
    manifest = json.loads((tmp_path / "j" / MANIFEST).read_text())
    del manifest["skipped"]
    (tmp_path / "j" / MANIFEST).write_text(json.dumps(manifest))
    assert prune_journal(qm.path, tmp_path / "j", older_than_ms=0, now_ms=LATER).removed == pruned


def test_a_pruned_store_exports_on(home: tuple[QueueManager, ManualClock], tmp_path: Path) -> None:
    qm, clock = home
    accept(qm, clock, 10, 0)
    export_journal(qm.path, tmp_path / "j")
    assert prune_journal(qm.path, tmp_path / "j", older_than_ms=0, now_ms=LATER).removed == 10
    assert store_rows(qm.path) == {}
    # the journal is empty, yet the store is not taken for a replaced one (ids go on from 11)
    assert export_journal(qm.path, tmp_path / "j").rows == 0
    accept(qm, clock, 3, 10)
    assert export_journal(qm.path, tmp_path / "j").rows == 3
    assert read_ids(tmp_path / "j") == list(range(1, 14))
    lines: list[str] = []
    assert export_journal(qm.path, tmp_path / "fresh", progress=lines.append).rows == 3
    assert any("ids up to 10 were pruned" in line for line in lines)  # a new directory is told


def test_pruning_is_refused_without_the_stores_export(
    home: tuple[QueueManager, ManualClock], tmp_path: Path
) -> None:
    qm, clock = home
    accept(qm, clock, 3, 0)
    with pytest.raises(JournalNotFound, match="run edgeq export"):
        prune_journal(qm.path, tmp_path / "never", older_than_ms=0)
    other = QueueManager(tmp_path / "other.db", name="OTHER", journal="server", clock=clock)
    other.define_queue("Q")
    accept(other, clock, 1, 0)
    other.close()
    export_journal(tmp_path / "other.db", tmp_path / "other")
    with pytest.raises(MalformedJournal, match="its own export directory"):
        prune_journal(qm.path, tmp_path / "other", older_than_ms=0)
    with pytest.raises(MalformedJournal, match="negative"):
        prune_journal(qm.path, tmp_path / "other", older_than_ms=-1)
    assert sorted(store_rows(qm.path)) == [1, 2, 3]


_CHILD = textwrap.dedent("""
    import sys
    from pathlib import Path
    from edgeq.sync.pipeline.export.exporter import export_journal
    from edgeq.sync.pipeline.export.prune import prune_journal

    db, out, point, now = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])

    def hook(line):
        if line.strip().startswith(point):
            print(line.strip(), flush=True)
            sys.stdin.readline()  # what came before is committed: wait here to be killed

    export_journal(db, out, batch_rows=6, progress=hook)
    prune_journal(db, out, older_than_ms=0, now_ms=now, batch_rows=4, progress=hook)
    print("done", flush=True)
""")


@pytest.mark.parametrize("point", ["12/30", "pruning", "pruned 4 "])
def test_a_crash_during_export_or_prune_loses_nothing(
    home: tuple[QueueManager, ManualClock], tmp_path: Path, point: str
) -> None:
    """SIGKILL the exporting process mid-export, between the export and the prune, and
    after the prune's first batch: every entry is in the store or in the export."""
    qm, clock = home
    accept(qm, clock, 30, 0)
    everything = set(store_rows(qm.path))
    out = tmp_path / "journal"
    with subprocess.Popen([sys.executable, "-c", _CHILD, str(qm.path), str(out), point, str(LATER)],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as child:
        assert child.stdout is not None
        assert child.stdout.readline().startswith(point.strip())
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)
    exported, held = read_ids(out), set(store_rows(qm.path))
    assert len(exported) == len(set(exported))  # nothing twice
    assert set(exported) | held == everything  # nothing lost
    if point != "12/30":
        assert set(exported) == everything
    if point == "pruned 4 ":
        assert everything - held == {1, 2, 3, 4}
    # the next run finishes the work
    export_journal(qm.path, out)
    prune_journal(qm.path, out, older_than_ms=0, now_ms=LATER)
    assert read_ids(out) == sorted(everything) and store_rows(qm.path) == {}


def test_cli_export_prune_after(tmp_path: Path) -> None:
    now = int(time.time() * 1000)
    qm, clock = home_server(tmp_path, start_ms=now - 40 * DAY)
    try:
        accept(qm, clock, 4, 0)  # forty days ago
        clock.set(now - HOUR)
        accept(qm, clock, 3, 4)  # an hour ago
    finally:
        qm.close()
    runner = CliRunner()
    args = ["export", "--db", str(tmp_path / "home.db"), "--out", str(tmp_path / "j")]
    done = runner.invoke(cli, [*args, "--prune-after", "30d", "--quiet"])
    assert done.exit_code == 0, done.output
    assert "Exported 7 journal entries" in done.output
    assert "Pruned 4 journal entries (ids 1..4, exported, before " in done.output
    assert "kept 3 newer, 0 left out by --since, 0 not exported yet" in done.output
    assert sorted(store_rows(tmp_path / "home.db")) == [5, 6, 7]
    bad = runner.invoke(cli, [*args, "--prune-after", "soon"])
    assert bad.exit_code == 2 and "not a duration" in bad.output


def test_a_restored_store_that_grew_again_is_neither_exported_nor_pruned(tmp_path: Path) -> None:
    """Restored from a backup taken at entry 5, then grown past the watermark again: its
    entries 6..10 are not the exported ones, and must not be removed as if they were."""
    import shutil

    qm, clock = home_server(tmp_path)
    accept(qm, clock, 5, 0)
    qm.close()  # (a closed store is one file: a plain copy is a backup)
    shutil.copy(tmp_path / "home.db", tmp_path / "backup.db")
    qm = QueueManager(tmp_path / "home.db", clock=clock)
    accept(qm, clock, 5, 5)
    export_journal(qm.path, tmp_path / "j")  # ids 1..10
    qm.close()
    shutil.copy(tmp_path / "backup.db", tmp_path / "home.db")
    qm = QueueManager(tmp_path / "home.db", clock=clock)
    try:
        accept(qm, clock, 7, 100)  # ids 6..12: other messages
        before = store_rows(qm.path)
        with pytest.raises(MalformedJournal, match="replaced or restored"):
            export_journal(qm.path, tmp_path / "j")
        with pytest.raises(MalformedJournal, match="replaced or restored"):
            prune_journal(qm.path, tmp_path / "j", older_than_ms=0, now_ms=LATER)
        assert store_rows(qm.path) == before
    finally:
        qm.close()

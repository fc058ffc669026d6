"""One Spark run over several home servers' exported journals (docs/scaling.md): the fleet of
tests/sync/test_scaling.py (two servers, two device groups pushing over loopback, a device
whose message both servers accepted), its two exports read in one run. Its figures add up:
to the sum of each server's own run and to plain Python's count over the two stores; the
uid both servers accepted is a duplicate of the fleet; each journal keeps its own audit
window; a run over two grown journals is incremental and equals a full one."""

from __future__ import annotations

import shutil
import sqlite3
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from click.testing import CliRunner
from pyspark.sql import SparkSession

from edgeq.cli import cli
from edgeq.store.journal import JournalEntry
from edgeq.sync.pipeline.export.exporter import Since, export_journal
from edgeq.sync.pipeline.job.runner import REPORTS, main, run_pipeline
from tests.pipeline import expected
from tests.pipeline.compare import check, check_totals
from tests.pipeline.job.test_update import assert_identical
from tests.sync.test_scaling import MOVER, fleet

#: the job orders rows by (server, journal id): each journal's ids moved above the ones before it
ID_BITS = 40


@dataclass
class Built:
    """The fleet's stores and exports."""

    dbs: dict[str, Path]
    journals: dict[str, Path]  # exported after both rounds
    first: dict[str, Path]  # copies of the exports after the first round
    window_b: Path  # HOMEB's journal after the first round, exported with --since
    boundary_b: int  # HOMEB's last journal id of the first round
    entries: dict[str, list[JournalEntry]]
    moved: set[str]
    sent: set[str]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    root = tmp_path_factory.mktemp("fleet")
    with fleet(root) as f:
        f.round()
        f.export(root / "journals")
        shutil.copytree(root / "journals", root / "first")
        boundary_b = f.homes["HOMEB"].journal_since(limit=1_000_000)[-1].id
        f.round()
        journals = f.export(root / "journals")  # cron's second export: only what is new
        export_journal(root / "HOMEB.db", root / "window" / "HOMEB", since=Since(min_id=boundary_b + 1))
        entries = {name: home.journal_since(limit=1_000_000) for name, home in f.homes.items()}
        moved, sent = set(f.moved), set().union(*f.sent.values())
    return Built({n: root / f"{n}.db" for n in journals}, journals, {n: root / "first" / n for n in journals},
                 root / "window" / "HOMEB", boundary_b, entries, moved, sent)


def as_one(entries: dict[str, list[JournalEntry]]) -> list[JournalEntry]:
    """The servers' journals as one, ordered as docs/pipeline.md says the job orders them: by
    server name, then journal id."""
    return [replace(e, id=(rank << ID_BITS) + e.id) for rank, name in enumerate(sorted(entries))
            for e in entries[name]]


def store_counts(db: Path) -> tuple[Counter[str], set[str], set[str]]:
    """Plain sqlite3 over a server's store: journal rows per kind, accepted uids, delivered uids."""
    with sqlite3.connect(db) as conn:
        kinds = Counter(dict(conn.execute("SELECT kind, COUNT(*) FROM journal GROUP BY kind")))
        accepted = {u for (u,) in conn.execute("SELECT uid FROM journal WHERE kind = 'accepted'")}
        delivered = {u for (u,) in conn.execute("SELECT uid FROM journal WHERE kind = 'delivered'")}
    return kinds, accepted, delivered


def test_one_run_over_both_servers_journals_adds_up(
    spark: SparkSession, built: Built, tmp_path: Path
) -> None:
    single = {name: run_pipeline(spark, path, tmp_path / name) for name, path in built.journals.items()}
    both = run_pipeline(spark, [built.journals["HOMEA"], built.journals["HOMEB"]], tmp_path / "fleet")

    # Every report and figure is plain Python's over the two journals taken as one.
    union = as_one(built.entries)
    want = expected.all_reports(union)
    for name in REPORTS:
        check(name, both.rows[name], want[name])
    check_totals(both.totals, expected.totals(union))

    # Row counts add up to each server's own run's, and to the two stores' own count.
    stores = {name: store_counts(db) for name, db in built.dbs.items()}
    for kind in ("accepted", "delivered", "expired"):
        assert both.totals[f"{kind}_entries"] == sum(r.totals[f"{kind}_entries"] for r in single.values()) \
            == sum(kinds[kind] for kinds, _, _ in stores.values()) > 0
    for figure in ("journal_rows", "expired", "expired_server_only", "expired_device_only", "gaps",
                   "unauditable"):
        assert both.totals[figure] == sum(r.totals[figure] for r in single.values()), figure
    # Messages (distinct uids) add up too, but for the one both servers accepted: the fleet
    # counts it once, and as a duplicate, which neither server alone can see.
    (a_accepted, b_accepted) = (stores[n][1] for n in ("HOMEA", "HOMEB"))
    assert a_accepted & b_accepted == built.moved and len(built.moved) == 1
    assert both.totals["accepted"] == len(a_accepted | b_accepted) == len(built.sent) \
        == sum(r.totals["accepted"] for r in single.values()) - 1
    delivered_twice = stores["HOMEA"][2] & stores["HOMEB"][2]
    assert (both.totals["delivered"]
            == sum(r.totals["delivered"] for r in single.values()) - len(delivered_twice))
    assert [r.totals["duplicates"] for r in single.values()] == [0, 0] and both.totals["duplicates"] == 1
    (dup,) = both.rows["audit_duplicates"]
    assert {dup["uid"]} == built.moved and dup["times"] == 2 and dup["origin"].startswith(f"{MOVER}:")
    assert both.totals["gaps"] == both.totals["unauditable"] == 0 and both.rows["audit_gaps"] == []
    health = {r["device"]: r for r in both.rows["device_health"]}
    assert health[MOVER]["duplicates"] == 1 and health[MOVER]["accepted"] == 2
    assert both.totals["devices"] == sum(r.totals["devices"] for r in single.values()) - 1  # the mover, once

    scope = both.audit_scope
    assert [(j["server"], j["parts"]) for j in scope["journals"]] == [
        (n, len(list(p.glob("date=*/*.parquet")))) for n, p in sorted(built.journals.items())]
    assert scope["from_id"] is None and "2 journals" in scope["text"]


def test_each_journal_keeps_its_own_audit_window(spark: SparkSession, built: Built, tmp_path: Path) -> None:
    """HOMEB's journal exported from its second round on (--since): deliveries of messages it
    accepted before are unauditable, as in HOMEB's own run, though HOMEA's journal starts
    earlier than they arrived (a window of the whole fleet would call them gaps)."""
    window = [e for e in built.entries["HOMEB"] if e.id > built.boundary_b]
    union = built.entries["HOMEA"] + window
    seen_as = {e.uid for e in union if e.kind in ("accepted", "expired")}
    late = {e.uid for e in window if e.kind == "delivered"} - seen_as
    b_start = min(e.at_ms for e in window if e.side == "server")
    a_start = min(e.at_ms for e in built.entries["HOMEA"] if e.side == "server")
    arrivals = [e.arrived_ms for e in window if e.uid in late]
    assert late and all(a_start <= a < b_start for a in arrivals if a is not None)

    alone = run_pipeline(spark, built.window_b, tmp_path / "b")
    both = run_pipeline(spark, [built.journals["HOMEA"], built.window_b], tmp_path / "fleet")
    assert alone.totals["unauditable"] == both.totals["unauditable"] == len(late)
    assert alone.totals["gaps"] == both.totals["gaps"] == 0 and both.rows["audit_gaps"] == []


def test_two_grown_journals_are_read_incrementally(spark: SparkSession, built: Built, tmp_path: Path) -> None:
    out = tmp_path / "reports"
    before = run_pipeline(spark, [built.first["HOMEA"], built.first["HOMEB"]], out)
    assert before.audit_scope["mode"] == "full"
    grown = {n: len({p.relative_to(built.journals[n]) for p in built.journals[n].glob("date=*/*.parquet")}
                     - {p.relative_to(built.first[n]) for p in built.first[n].glob("date=*/*.parquet")})
             for n in built.journals}
    # Both journals grew (cron exported each again): only their new part files are read.
    after = run_pipeline(spark, [built.journals["HOMEB"], built.journals["HOMEA"]], out)
    assert after.audit_scope["mode"] == "incremental", after.audit_scope["reason"]
    assert {j["server"]: j["new_parts"] for j in after.audit_scope["journals"]} == grown
    assert after.audit_scope["new_parts"] == sum(grown.values()) and min(grown.values()) > 0
    assert after.audit_scope["new_rows"] == sum(map(len, built.entries.values())) - before.journal_rows > 0
    full = run_pipeline(spark, [built.journals["HOMEA"], built.journals["HOMEB"]], tmp_path / "full")
    assert full.audit_scope["mode"] == "full"
    assert_identical(after, full)
    check_totals(after.totals, expected.totals(as_one(built.entries)))
    # A journal left out: the state no longer fits, and the run says why.
    alone = run_pipeline(spark, built.journals["HOMEA"], out)
    assert alone.audit_scope["mode"] == "full" and "HOMEB" in alone.audit_scope["reason"]
    assert_identical(alone, run_pipeline(spark, built.journals["HOMEA"], tmp_path / "a"))


def test_cli_runs_over_several_journals_and_refuses_bad_combinations(
    spark: SparkSession, built: Built, tmp_path: Path
) -> None:
    runner = CliRunner()
    a, b = str(built.journals["HOMEA"]), str(built.journals["HOMEB"])
    args = ["pipeline", "run", "--master", "local[2]", "--quiet"]
    done = runner.invoke(cli, [*args, "--journal", a, "--journal", b, "--out", str(tmp_path / "r")])
    assert done.exit_code == 0, done.output
    assert "Exactly-once audit" in done.output and "HOMEA" in done.output and "HOMEB" in done.output
    assert not spark.sparkContext._jsc.sc().isStopped()

    copy = tmp_path / "copy-of-a"
    shutil.copytree(a, copy)
    bad = {
        "given twice": ["--journal", a, "--journal", b, "--journal", f"{a}/../{Path(a).name}/"],
        "inside --journal": ["--journal", a, "--journal", b, "--out", f"{b}/reports"],
        "HOMEA's journal": ["--journal", a, "--journal", str(copy)],
    }
    for message, argv in bad.items():
        if "--out" not in argv:
            argv = [*argv, "--out", str(tmp_path / "x")]
        refused = runner.invoke(cli, [*args, *argv])
        assert refused.exit_code == 2 and message in refused.output, (argv, refused.output)
        assert main([*argv, "--quiet"]) == 2  # python -m edgeq.sync.pipeline.job.runner alike
    assert not (tmp_path / "x").exists()
    missing = runner.invoke(cli, [*args, "--journal", a, "--journal", str(tmp_path / "nowhere"), "--out",
                                  str(tmp_path / "x")])
    assert missing.exit_code == 1 and f"{tmp_path / 'nowhere'} does not exist" in missing.output

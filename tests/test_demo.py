"""The guided demo: every expiry check point fires, and the store is left as described."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgeq import QueueManager
from edgeq.cli import cli
from edgeq.cli.demo import DEMO_QM, DemoPathInUse, prepare_path, run_demo

EXPECTED = [
    ("ORDERS", "add", "order-X"),
    ("ORDERS", "get", "order-C"),
    ("ORDERS", "depth", "order-A"),
    ("ALERTS", "delete", "alert-1"),
    ("ALERTS", "delete", "alert-2"),
    ("ORDERS", "activate", "order-F"),
    ("ORDERS", "sweep", "reading-1"),
    ("ORDERS", "sweep", "reading-2"),
]


#: ORDERS' counters at the end: 7 stored puts (order-X never was), order-B got and
#: order-G confirmed, 6 expirations on ORDERS (ALERTS' 2 went with the queue), each copied.
EXPECTED_STATS = {
    "added": 7, "got": 2, "expired": 6, "dead_lettered": 6, "expired.add": 1, "expired.get": 1,
    "expired.depth": 1, "expired.activate": 1, "expired.sweep": 2,
}


def demo_output(path: Path) -> tuple[str, list[tuple[str, str, str]]]:
    lines: list[str] = []
    result = run_demo(path, lines.append)
    assert result.path == path
    assert result.stats == EXPECTED_STATS
    return "\n".join(lines), [(q, str(w), d) for q, w, d in result.expirations]


def test_every_check_point_fires_and_is_shown(tmp_path: Path) -> None:
    out, expirations = demo_output(tmp_path / "demo.db")
    assert expirations == EXPECTED
    for queue, where, data in EXPECTED:
        assert f"rule> {queue}: '{data}' EXPIRED at check point '{where}'" in out
    for n, where in enumerate(("add", "get", "depth", "delete", "activate"), start=1):
        assert f"Expiry check {n} of 5, '{where}'" in out
    steps = re.findall(r"^\[(\d+)\] ", out, flags=re.MULTILINE)
    assert steps == [str(n) for n in range(1, 12)]
    assert "The rules saw 8 expirations: add 1, get 1, depth 1, delete 2, activate 1, sweep 2." in out


def test_the_tour_shows_expiry_kinds_cap_priority_and_assured_delivery(tmp_path: Path) -> None:
    out, _ = demo_output(tmp_path / "demo.db")
    browse = [line.split(": ", 1)[1] for line in out.splitlines() if "browse ORDERS: 'order-" in line][:3]
    assert [b.split()[0] for b in browse] == ["'order-C'", "'order-B'", "'order-A'"]  # priority order
    assert "Int64 absolute 2025-11-21T09:00:20Z, 20s left" in browse[0]
    assert "Int32(300000) relative, 5m left" in browse[1]
    assert "the queue's expiry, 1m left" in browse[2]
    assert out.count("Int64 absolute 2025-11-21T09:00:30Z, 30s left") == 2  # the cap
    assert "'order-B' priority 5, Int32(300000) relative, 3m 55s left" in out  # override + remaining
    assert "backouts 1" in out  # undo
    assert "rule> ORDERS: 'order-G' removed (confirmed)" in out
    assert "confirm_get() deleted it: depth of ORDERS is 0." in out


def test_rules_are_bound_by_name_and_the_counters_shown(tmp_path: Path) -> None:
    out, _ = demo_output(tmp_path / "demo.db")
    assert "rules=[('dead-letter', {'queue': 'DEAD.LETTER'}), 'counters']" in out
    assert "the stored bindings (dead-letter, counters) came back by themselves" in out
    assert "from queue_stats('ORDERS'):" in out
    for name, value in EXPECTED_STATS.items():
        assert re.search(rf"^      {re.escape(name)} +{value}$", out, flags=re.MULTILINE), name


def test_the_store_is_left_as_described(tmp_path: Path) -> None:
    path = tmp_path / "demo.db"
    out, _ = demo_output(path)
    assert f"edgeq --db {path} browse DEAD.LETTER" in out
    assert f"edgeq --db {path} queue stats ORDERS" in out
    with QueueManager(path) as qm:  # the real clock from here on
        assert qm.name == DEMO_QM
        assert qm.queue_names() == ["DEAD.LETTER", "ORDERS"]
        assert qm.depth("ORDERS") == 0
        assert [(b.name, b.config, b.persisted) for b in qm.queue_bindings("ORDERS")] == [
            ("dead-letter", {"queue": "DEAD.LETTER"}, True), ("counters", {}, True),
        ]
        assert qm.queue_stats("ORDERS") == EXPECTED_STATS
        copies = qm.browse("DEAD.LETTER")
    found = [(m.fields["dlq.queue"], m.fields["dlq.where"], m.data.decode()) for m in copies]
    assert sorted(found) == sorted(EXPECTED)
    assert all(m.expiry is None and m.remaining_expiry_ms is None for m in copies)


def test_the_output_is_the_same_on_every_run(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first, _ = demo_output(tmp_path / "a" / "demo.db")
    second, _ = demo_output(tmp_path / "b" / "demo.db")
    assert first.replace(str(tmp_path / "a"), "X") == second.replace(str(tmp_path / "b"), "X")


def test_prepare_path_never_clobbers(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("keep me")
    with pytest.raises(DemoPathInUse, match="already exists"):
        prepare_path(notes)
    with pytest.raises(DemoPathInUse, match="not an earlier demo"):
        prepare_path(notes, replace=True)
    assert notes.read_text() == "keep me"
    user = tmp_path / "user.db"
    with QueueManager(user, name="DEV1") as qm:
        qm.define_queue("ORDERS")
    with pytest.raises(DemoPathInUse, match="not an earlier demo"):
        prepare_path(user, replace=True)
    with QueueManager(user) as qm:
        assert qm.queue_names() == ["ORDERS"]
    with pytest.raises(DemoPathInUse, match="does not exist"):
        prepare_path(tmp_path / "missing" / "demo.db")
    prepare_path(tmp_path / "new.db")  # fine: nothing there


def test_cli_demo(tmp_path: Path) -> None:
    path = tmp_path / "tour.db"
    user_db = tmp_path / "user.db"
    runner = CliRunner()
    result = runner.invoke(cli, ["--db", str(user_db), "demo", "--db", str(path)])
    assert result.exit_code == 0, result.output
    assert f"Store: {path} (queue manager {DEMO_QM})." in result.stdout
    assert "Expiry check 5 of 5, 'activate'" in result.stdout
    assert not user_db.exists()  # the global --db is never touched
    again = runner.invoke(cli, ["demo", "--db", str(path)])
    assert again.exit_code == 1 and "already exists" in again.stderr and "--replace" in again.stderr
    replaced = runner.invoke(cli, ["demo", "--db", str(path), "--replace"])
    assert replaced.exit_code == 0, replaced.output
    with QueueManager(path) as qm:
        assert qm.depth("DEAD.LETTER") == len(EXPECTED)


def test_cli_demo_refuses_to_replace_a_user_store(tmp_path: Path) -> None:
    user = tmp_path / "user.db"
    with QueueManager(user, name="DEV1") as qm:
        qm.define_queue("MINE")
    before = user.read_bytes()
    result = CliRunner().invoke(cli, ["demo", "--db", str(user), "--replace"])
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: ") and "not an earlier demo's store" in result.stderr
    assert user.read_bytes() == before


def test_cli_demo_default_path_is_a_new_temporary_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    result = CliRunner().invoke(cli, ["demo"])
    assert result.exit_code == 0, result.output
    match = re.search(r"^Store: (.+) \(queue manager", result.stdout, flags=re.MULTILINE)
    assert match is not None
    path = Path(match.group(1))
    assert path.parent.parent == tmp_path and path.parent.name.startswith("edgeq-demo-") and path.exists()

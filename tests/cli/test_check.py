"""``edgeq check [--repair] [--json]`` on damaged copies of real stores: what it prints,
what it changes, and its exit status (0 sound, 1 damaged, 2 not an edgeq store)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from edgeq import ManualClock, QueueManager
from edgeq.cli import cli
from tests import damage
from tests.damage import PAYLOADS, make_store


def run(*argv: str) -> Result:
    result = CliRunner().invoke(cli, list(argv), env={"EDGEQ_DB": None, "EDGEQ_NAME": None})
    # Never a traceback: any exception but click's exit is a failure of the command.
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


@pytest.fixture
def store(db_path: Path, clock: ManualClock) -> Path:
    make_store(db_path, clock)
    return db_path


def flip_payload(path: Path, index: int) -> str:
    """Flip a bit in the middle of ORDERS' message ``index`` in the file; return its uid."""
    conn = damage.raw(path)
    origin, stamp = conn.execute("SELECT origin, stamp FROM messages WHERE data = ?",
                                 (PAYLOADS[index],)).fetchone()
    conn.close()
    damage.flip(path, PAYLOADS[index], at=20, mask=0x08)
    return f"{origin}.{stamp}"


def test_a_sound_store_exits_0(store: Path) -> None:
    result = run("check", "--db", str(store))
    assert result.exit_code == 0, result.output
    assert "40 message(s) checked" in result.output and "The store is sound." in result.output
    grouped = run("--db", str(store), "check", "--json")
    assert grouped.exit_code == 0 and json.loads(grouped.stdout)["clean"] is True


def test_damage_is_reported_with_exit_1_and_nothing_is_written(store: Path) -> None:
    uid = flip_payload(store, 4)
    before = store.read_bytes()
    result = run("check", "--db", str(store))
    assert result.exit_code == 1, result.output
    assert f"ORDERS  {uid}  its checksum does not match" in result.output
    assert "--repair` moves damaged rows to the quarantine" in result.output
    assert store.read_bytes() == before


def test_repair_quarantines_tells_the_rules_and_a_second_check_is_sound(
    store: Path, clock: ManualClock
) -> None:
    uid = flip_payload(store, 9)
    result = run("check", "--db", str(store), "--repair")
    assert result.exit_code == 1, result.output  # damage was found, even though it is repaired
    assert f"quarantined message {uid} on ORDERS" in result.output
    assert "Checked again: sound." in result.output
    assert run("check", "--db", str(store)).exit_code == 0
    with QueueManager(store, clock=clock) as qm:
        assert qm.queue_stats("ORDERS").get("quarantined") == 1  # the persisted counters rule
        assert [q.uid for q in qm.quarantined()] == [uid] and qm.depth("ORDERS") == 29


def test_json_lists_findings_repairs_and_the_check_after(store: Path) -> None:
    uid = flip_payload(store, 2)
    found = json.loads(run("check", "--db", str(store), "--json").stdout)
    assert found["clean"] is False and found["after"] is None and found["repairs"] is None
    assert [(m["uid"], m["queue"], m["fix"]) for m in found["messages"]] == [(uid, "ORDERS", "quarantine")]
    repaired = run("--json", "check", "--db", str(store), "--repair")
    assert repaired.exit_code == 1
    data = json.loads(repaired.stdout)
    assert len(data["repairs"]["quarantined"]) == 1 and data["after"]["clean"] is True


def test_a_damaged_index_is_rebuilt(store: Path) -> None:
    conn = damage.raw(store)
    origin, stamp = conn.execute("SELECT origin, stamp FROM messages WHERE data = ?",
                                 (PAYLOADS[20],)).fetchone()
    conn.close()
    damage.flip(store, origin.encode() + stamp.to_bytes(8, "big"), at=3, mask=0x01, within="messages_uid")
    result = run("check", "--db", str(store))
    assert result.exit_code == 1 and "missing from index messages_uid" in result.output
    repaired = run("check", "--db", str(store), "--repair")
    assert "rebuilt indexes messages_uid" in repaired.output and "Checked again: sound." in repaired.output
    assert "quarantined" not in repaired.output


def test_a_binding_that_stops_the_store_opening_is_set_aside_first(store: Path) -> None:
    damage.execute(store, "UPDATE rule_bindings SET config = 'not json'")
    result = run("check", "--db", str(store), "--repair")
    assert result.exit_code == 1, result.output
    assert "quarantined rule_bindings row 1 (queue ORDERS)" in result.output
    assert "Checked again: sound." in result.output
    opened = run("--db", str(store), "depth", "ORDERS")
    assert opened.exit_code == 0 and "30" in opened.stdout


def test_what_is_not_an_edgeq_store_exits_2_untouched(tmp_path: Path) -> None:
    text, other = damage.not_stores(tmp_path)
    for path, says in ((text, "not a SQLite database"), (other, "another application"),
                       (tmp_path / "missing.db", "does not exist")):
        before = path.read_bytes() if path.exists() else None
        result = run("check", "--db", str(path), "--repair")
        assert result.exit_code == 2 and says in result.output, result.output
        assert (path.read_bytes() if path.exists() else None) == before
    assert run("check").exit_code == 2  # no --db at all


def test_a_file_sqlite_cannot_open_is_damaged_not_a_usage_error(store: Path) -> None:
    damage.garble_schema_page(store)
    for argv in (("check", "--db", str(store)), ("check", "--db", str(store), "--repair")):
        result = run(*argv)
        assert result.exit_code == 1, result.output
        assert "SQLite cannot read the store (database disk image is malformed)" in result.output
        assert "The store cannot be read: restore it from a backup" in result.output

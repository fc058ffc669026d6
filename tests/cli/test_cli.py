"""The ``edgeq`` command line, end to end on a real SQLite file per test."""

from __future__ import annotations

import base64
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from edgeq import Int32, Int64, ManualClock, Message, QueueManager, __version__
from edgeq.cli import cli
from edgeq.cli.format import (
    approx_duration,
    format_duration,
    format_field,
    format_time,
    parse_duration,
    parse_field,
    parse_time,
)

Run = Callable[..., Result]
PAST = 1_600_000_000_000  # 2020-09-13: long gone, for stores built with a ManualClock
FUTURE_ISO = "2099-01-01T00:00:00Z"
FUTURE_MS = 4_070_908_800_000


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "dev.db"


@pytest.fixture
def run(db: Path) -> Run:
    """Invoke the CLI with ``--db`` set to the test's store (and no EDGEQ_* from outside)."""

    def _run(
        *args: str, input: bytes | str | None = None, db_opt: bool = True, env: dict[str, str] | None = None
    ) -> Result:
        argv = (["--db", str(db)] if db_opt else []) + list(args)
        full_env: dict[str, str | None] = {"EDGEQ_DB": None, "EDGEQ_NAME": None, **(env or {})}
        return CliRunner().invoke(cli, argv, input=input, env=full_env, catch_exceptions=False)

    return _run


@pytest.fixture
def store(run: Run) -> Run:
    """A store with queue ORDERS defined."""
    result = run("--name", "DEV1", "queue", "define", "ORDERS")
    assert result.exit_code == 0, result.output
    return run


def fail(result: Result, code: int, *needles: str) -> None:
    """Assert an error: the exit code, the text on stderr, one Error line, no traceback."""
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, result.stderr
    for needle in needles:
        assert needle in errors[0], errors[0]


def ok(result: Result) -> str:
    assert result.exit_code == 0, result.output
    return result.stdout


def put_with_clock(db: Path, queue: str, message: Message, now: int = PAST) -> str:
    """Put through the Python API with a clock in the past (so expiries have passed now)."""
    with QueueManager(db, clock=ManualClock(now)) as qm:
        return str(qm.put(queue, message))


# -- help, version, store handling ---------------------------------------------------------

COMMANDS = [
    [], ["queue"], ["queue", "define"], ["queue", "alter"], ["queue", "list"], ["queue", "show"],
    ["queue", "delete"], ["purge"], ["put"], ["get"], ["consume"], ["browse"], ["depth"], ["sweep"], ["demo"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "edgeq")
def test_every_command_has_help_with_an_example(run: Run, command: list[str]) -> None:
    out = ok(run(*command, "--help", db_opt=False))
    assert "Usage: edgeq" in out
    assert "Example" in out
    assert "edgeq " in out.split("Example", 1)[1]


def test_version(run: Run) -> None:
    assert ok(run("--version", db_opt=False)).strip() == f"edgeq, version {__version__}"


def test_no_db_is_a_clear_error(run: Run) -> None:
    fail(run("queue", "list", db_opt=False), 1, "no store given", "--db", "EDGEQ_DB")


def test_db_and_name_from_the_environment(run: Run, db: Path) -> None:
    env = {"EDGEQ_DB": str(db), "EDGEQ_NAME": "ENV1"}
    ok(run("queue", "define", "Q", db_opt=False, env=env))
    assert "Q" in ok(run("queue", "list", db_opt=False, env={"EDGEQ_DB": str(db)}))
    with QueueManager(db) as qm:
        assert qm.name == "ENV1"


def test_missing_store_is_not_created_by_other_commands(run: Run, db: Path) -> None:
    for args in (["queue", "list"], ["depth", "Q"], ["put", "Q", "x"], ["sweep"]):
        fail(run("--name", "DEV1", *args), 1, "does not exist", "queue define")
    assert not db.exists()


def test_new_store_needs_a_name(run: Run, db: Path) -> None:
    fail(run("queue", "define", "ORDERS"), 1, "new store", "--name")
    assert not db.exists()


def test_define_creates_the_store(run: Run, db: Path) -> None:
    result = run("--name", "DEV1", "queue", "define", "ORDERS")
    assert ok(result) == "Defined queue ORDERS on DEV1.\n"
    assert f"Created store {db} for queue manager DEV1." in result.stderr
    ok(run("queue", "define", "ALERTS"))  # no --name needed any more
    with QueueManager(db) as qm:
        assert (qm.name, qm.queue_names()) == ("DEV1", ["ALERTS", "ORDERS"])


def test_name_mismatch(store: Run) -> None:
    fail(store("--name", "OTHER", "queue", "list"), 1, "belongs to queue manager 'DEV1', not 'OTHER'")
    ok(store("--name", "DEV1", "queue", "list"))


def test_missing_directory(run: Run, tmp_path: Path) -> None:
    db = tmp_path / "nope" / "dev.db"
    result = CliRunner().invoke(cli, ["--db", str(db), "--name", "D", "queue", "define", "Q"])
    fail(result, 1, "directory", "does not exist")


def test_foreign_files_are_refused_and_untouched(run: Run, db: Path) -> None:
    db.write_bytes(b"my precious notes")
    fail(run("queue", "list"), 1, "not a SQLite database")
    fail(run("--name", "D", "queue", "define", "Q"), 1, "not a SQLite database")
    assert db.read_bytes() == b"my precious notes"
    other = db.with_name("other.db")
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE t (x)")
    conn.close()
    before = other.read_bytes()
    fail(run("queue", "list", db_opt=False, env={"EDGEQ_DB": str(other)}), 1, "another application")
    assert other.read_bytes() == before


def test_db_that_is_a_directory(run: Run, tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["--db", str(tmp_path), "queue", "list"])
    assert result.exit_code == 2 and "is a directory" in result.stderr


# -- queue administration --------------------------------------------------------------------


def test_queue_define_with_every_attribute(run: Run, db: Path) -> None:
    ok(run("--name", "DEV1", "queue", "define", "ALERTS", "--expiry-ms", "30s", "--cap-expiry-ms", "5m",
           "--max-depth", "100", "--max-message-bytes", "4096", "--default-priority", "7", "--ordering",
           "fifo", "--depth-threshold", "50"))
    with QueueManager(db) as qm:
        a = qm.queue_attributes("ALERTS")
    assert (a.expiry_ms, a.cap_expiry_ms, a.max_depth, a.max_message_bytes) == (30_000, 300_000, 100, 4096)
    assert (a.default_priority, a.ordering, a.depth_threshold) == (7, "fifo", 50)


def test_queue_define_json(run: Run) -> None:
    data = json.loads(ok(run("--name", "DEV1", "queue", "define", "Q", "--expiry-ms", "1500", "--json")))
    assert data["name"] == "Q" and data["expiry_ms"] == 1500 and data["depth"] == 0


def test_queue_define_twice(store: Run) -> None:
    fail(store("queue", "define", "ORDERS"), 1, "already defined", "edgeq queue alter ORDERS")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--max-depth", "0"], "must be positive"),
        (["--max-depth", "lots"], "not a whole number"),
        (["--expiry-ms", "soon"], "not a duration"),
        (["--expiry-ms", "1.5ms"], "whole number of milliseconds"),
        (["--default-priority", "10"], "0<=x<=9"),
        (["--ordering", "random"], "'random' is not one of"),
    ],
)
def test_queue_define_bad_values_are_usage_errors(store: Run, args: list[str], needle: str) -> None:
    result = store("queue", "define", "Q2", *args)
    assert result.exit_code == 2 and needle in result.stderr, result.stderr
    assert "Traceback" not in result.output


@pytest.mark.parametrize("verb", ["define", "alter", "show", "stats", "delete"])
def test_a_bad_queue_name_is_a_usage_error(store: Run, verb: str) -> None:
    fail(store("queue", verb, "bad name!"), 2, "queue name 'bad name!' is not valid")


def test_purge_of_a_bad_queue_name_is_a_usage_error(store: Run) -> None:
    fail(store("purge", "bad name!"), 2, "queue name 'bad name!' is not valid")


def test_queue_alter_changes_only_what_is_given(store: Run, db: Path) -> None:
    ok(store("queue", "alter", "ORDERS", "--expiry-ms", "1h", "--max-depth", "5"))
    out = ok(store("queue", "alter", "ORDERS", "--max-depth", "none", "--ordering", "fifo"))
    assert out == "Altered queue ORDERS: max_depth none, ordering fifo.\n"
    with QueueManager(db) as qm:
        a = qm.queue_attributes("ORDERS")
    assert (a.expiry_ms, a.max_depth, a.ordering) == (3_600_000, None, "fifo")


def test_queue_alter_output_and_json(store: Run) -> None:
    assert "expiry_ms 90000 (1m 30s)" in ok(store("queue", "alter", "ORDERS", "--expiry-ms", "90s"))
    data = json.loads(ok(store("--json", "queue", "alter", "ORDERS", "--default-priority", "2")))
    assert data["default_priority"] == 2 and data["expiry_ms"] == 90_000


def test_queue_alter_errors(store: Run) -> None:
    result = store("queue", "alter", "ORDERS")
    assert result.exit_code == 2 and "nothing to change" in result.stderr
    fail(store("queue", "alter", "NOPE", "--max-depth", "3"), 1, "no queue 'NOPE'", "edgeq queue define NOPE")


def test_queue_list(run: Run, store: Run) -> None:
    ok(store("queue", "define", "ALERTS", "--expiry-ms", "30s", "--cap-expiry-ms", "1h", "--max-depth", "9"))
    ok(store("put", "ORDERS", "x"))
    lines = ok(store("queue", "list")).splitlines()
    assert lines[0].split() == [
        "QUEUE", "DEPTH", "BYTES", "EXPIRY", "CAP", "MAX-DEPTH", "MAX-BYTES", "PRIO", "ORDERING", "KIND"]
    assert lines[1].split() == ["ALERTS", "0", "0", "30s", "1h", "9", "-", "4", "priority", "local"]
    assert lines[2].split() == ["ORDERS", "1", "1", "-", "-", "-", "-", "4", "priority", "local"]
    data = json.loads(ok(store("queue", "list", "--json")))
    assert [(q["name"], q["depth"], q["bytes"]) for q in data] == [("ALERTS", 0, 0), ("ORDERS", 1, 1)]


def test_queue_list_empty(run: Run, db: Path) -> None:
    QueueManager(db, name="DEV1").close()
    assert ok(run("queue", "list")) == "No queues are defined on DEV1.\n"
    assert json.loads(ok(run("--json", "queue", "list"))) == []


def test_queue_show(store: Run) -> None:
    ok(store("queue", "alter", "ORDERS", "--expiry-ms", "60000"))
    out = ok(store("queue", "show", "ORDERS"))
    assert "queue              ORDERS" in out
    assert "expiry_ms          60000 (1m)" in out
    assert "cap_expiry_ms      none" in out
    assert "depth              0" in out
    data = json.loads(ok(store("queue", "show", "ORDERS", "--json")))
    assert data["expiry_ms"] == 60_000 and data["ordering"] == "priority" and data["depth"] == 0
    fail(store("queue", "show", "NOPE"), 1, "no queue 'NOPE' on queue manager DEV1 (defined: ORDERS)")


def test_queue_delete(store: Run, db: Path) -> None:
    ok(store("put", "ORDERS", "x"))
    fail(store("queue", "delete", "ORDERS"), 1, "still holds 1 unexpired message(s)", "--purge")
    assert (ok(store("queue", "delete", "ORDERS", "--purge"))
            == "Deleted queue ORDERS (purged 1 message(s)).\n")
    ok(store("queue", "define", "EMPTY"))
    assert json.loads(ok(store("queue", "delete", "EMPTY", "--json"))) == {
        "queue": "EMPTY", "deleted": True, "purged": 0,
    }
    with QueueManager(db) as qm:
        assert qm.queue_names() == []
    fail(store("queue", "delete", "ORDERS"), 1, "no queue 'ORDERS'", "(none are defined)")


def test_queue_delete_discards_expired_messages_first(store: Run, db: Path) -> None:
    put_with_clock(db, "ORDERS", Message(b"old").expire_after(1000))
    assert ok(store("queue", "delete", "ORDERS")) == "Deleted queue ORDERS.\n"


def test_purge(store: Run) -> None:
    ok(store("put", "ORDERS", "a"))
    ok(store("put", "ORDERS", "b"))
    assert ok(store("purge", "ORDERS")) == "Purged 2 message(s) from ORDERS.\n"
    assert json.loads(ok(store("purge", "ORDERS", "--json"))) == {"queue": "ORDERS", "purged": 0}
    fail(store("purge", "NOPE"), 1, "no queue 'NOPE'")


# -- put ------------------------------------------------------------------------------------


def browse_one(db: Path, queue: str = "ORDERS") -> Message:
    with QueueManager(db) as qm:
        (message,) = qm.browse(queue)
    return message


def test_put_prints_the_uid(store: Run, db: Path) -> None:
    uid = ok(store("put", "ORDERS", "42 widgets")).strip()
    message = browse_one(db)
    assert str(message.uid) == uid and uid.startswith("DEV1:")
    assert message.data == b"42 widgets" and message.priority == 4 and message.expiry is None


@pytest.mark.parametrize("args", [["put", "ORDERS"], ["put", "ORDERS", "-"]])
def test_put_reads_binary_data_from_stdin(store: Run, db: Path, args: list[str]) -> None:
    ok(store(*args, input=b"\x00\xff\x10binary"))
    assert browse_one(db).data == b"\x00\xff\x10binary"


def test_put_every_option(store: Run, db: Path) -> None:
    ok(store("put", "ORDERS", "héllo", "--priority", "9", "--expire-after", "30s",
             "--field", "site=north", "--field", "n:int32=5", "--field", "big:int64=5", "--field", "k:int=-3",
             "--field", "x:float=1.5", "--field", "on:bool=true", "--field", "raw:bytes=00ff",
             "--field", "url=http://h:80", "--correlation-id", "hex:abcd", "--reply-to", "REPLIES"))
    m = browse_one(db)
    assert m.data == "héllo".encode() and m.priority == 9
    assert m.expiry == Int32(30_000) and isinstance(m.expiry, Int32)
    assert dict(m.fields) == {
        "site": "north", "n": Int32(5), "big": Int64(5), "k": Int64(-3), "x": 1.5, "on": True,
        "raw": b"\x00\xff", "url": "http://h:80",
    }
    assert type(m.fields["n"]) is Int32 and type(m.fields["big"]) is Int64
    assert m.correlation_id == b"\xab\xcd" and m.reply_to == "REPLIES"


def test_put_text_correlation_id_and_absolute_expiry(store: Run, db: Path) -> None:
    ok(store("put", "ORDERS", "x", "--correlation-id", "order-17", "--expire-at",
             "2099-01-01T01:00:00+01:00"))
    m = browse_one(db)
    assert m.correlation_id == b"order-17"
    assert m.expiry == Int64(FUTURE_MS) and isinstance(m.expiry, Int64)


def test_put_expire_at_epoch_ms_and_json(store: Run, db: Path) -> None:
    data = json.loads(ok(store("--json", "put", "ORDERS", "x", "--expire-at", str(FUTURE_MS))))
    assert data["queue"] == "ORDERS" and data["stored"] is True
    assert data["uid"] == str(browse_one(db).uid)
    assert browse_one(db).expiry == Int64(FUTURE_MS)


def test_put_already_expired_fails_and_stores_nothing(store: Run) -> None:
    result = store("put", "ORDERS", "stale", "--expire-at", "2020-01-01T00:00:00Z", "--json")
    assert result.exit_code == 1 and result.stdout == ""
    assert "expiry (2020-01-01T00:00:00Z) has already passed" in result.stderr
    assert "'add' check" in result.stderr and "nothing was stored" in result.stderr
    assert ok(store("depth", "ORDERS")) == "0\n"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--expire-after", "5s", "--expire-at", FUTURE_ISO], "not both"),
        (["--expire-after", "30d"], "out of range"),
        (["--expire-after", "0"], "out of range"),
        (["--expire-after", "5 parsecs"], "not a duration"),
        (["--expire-at", "2099-01-01T00:00:00"], "no timezone"),
        (["--expire-at", "tomorrow"], "not a time"),
        (["--expire-at", "0"], "not after the epoch"),
        (["--priority", "10"], "0<=x<=9"),
        (["--field", "novalue"], "is not NAME=VALUE"),
        (["--field", "=v"], "no field name"),
        (["--field", "n:int32=5000000000"], "out of range"),
        (["--field", "n:int64=five"], "not an integer"),
        (["--field", "x:float=abc"], "not a number"),
        (["--field", "b:bool=maybe"], "not a bool"),
        (["--field", "r:bytes=xyz"], "not hex bytes"),
        (["--field", "a=1", "--field", "a=2"], "given twice"),
        (["--correlation-id", "hex:zz"], "not hex"),
    ],
)
def test_put_bad_options_are_usage_errors(store: Run, args: list[str], needle: str) -> None:
    result = store("put", "ORDERS", "x", *args)
    assert result.exit_code == 2, result.output
    assert needle in result.stderr, result.stderr
    assert "Traceback" not in result.output
    assert ok(store("depth", "ORDERS")) == "0\n"


def test_put_errors_from_the_queue_manager(store: Run) -> None:
    fail(store("put", "NOPE", "x"), 1, "no queue 'NOPE'", "edgeq queue define NOPE")
    # A name that is no queue name is a bad value: a usage error (exit 2), before the store is opened.
    fail(store("put", "ORDERS", "x", "--reply-to", "bad name!"), 2, "queue name 'bad name!' is not valid")
    ok(store("queue", "alter", "ORDERS", "--max-depth", "1", "--max-message-bytes", "10"))
    fail(store("put", "ORDERS", "far too long a message"), 1, "max_message_bytes", "edgeq queue alter ORDERS")
    ok(store("put", "ORDERS", "x"))
    fail(store("put", "ORDERS", "y"), 1, "is full", "edgeq queue alter ORDERS")


# -- get, browse, depth, sweep ------------------------------------------------------------------


def test_get_takes_in_priority_order(store: Run) -> None:
    for data, priority in (("low", "1"), ("high", "8"), ("mid", "5")):
        ok(store("put", "ORDERS", data, "--priority", priority))
    assert "UTF-8 text, 4 bytes: high" in ok(store("get", "ORDERS"))
    out = ok(store("get", "ORDERS", "--count", "5"))
    assert out.index("mid") < out.index("low")
    assert ok(store("get", "ORDERS")) == "No message available on ORDERS.\n"
    assert ok(store("depth", "ORDERS")) == "0\n"


def test_get_human_output(store: Run) -> None:
    uid = ok(store("put", "ORDERS", "hello", "--priority", "7", "--expire-after", "1h", "--field",
                   "n:int32=5",
                   "--field", "note=two words", "--correlation-id", "hex:abcd", "--reply-to", "R")).strip()
    lines = ok(store("get", "ORDERS")).splitlines()
    assert lines[0].startswith(f"{uid}  priority 7  created ")
    assert lines[1].startswith("  expiry   relative Int32(3600000), 1h after creation; ")
    assert lines[1].endswith(" left") and ("59m" in lines[1] or "1h 0m" in lines[1])
    assert "  correlation id (hex) abcd" in lines
    assert "  reply to R" in lines
    assert "  fields   n:int32=5 'note=two words'" in lines
    assert lines[-1] == "  data     UTF-8 text, 5 bytes: hello"


def test_get_shows_binary_and_multiline_data(store: Run) -> None:
    ok(store("put", "ORDERS", input=b"\x00\xff"))
    ok(store("put", "ORDERS", "line one\nline two"))
    out = ok(store("get", "ORDERS", "--count", "2"))
    assert "data     binary (not UTF-8), 2 bytes, as hex: 00ff" in out
    assert "data     UTF-8 text, 17 bytes:\n    line one\n    line two" in out
    assert "expiry   never" in out


def test_get_raw_writes_only_the_data(store: Run) -> None:
    ok(store("put", "ORDERS", input=b"\x00\x01\x02"))
    result = store("get", "ORDERS", "--raw")
    assert result.exit_code == 0 and result.stdout_bytes == b"\x00\x01\x02"
    assert store("get", "ORDERS", "--raw").stdout_bytes == b""
    result = store("--json", "get", "ORDERS", "--raw")
    assert result.exit_code == 2 and "--raw and --json" in result.stderr


def test_get_json(store: Run) -> None:
    ok(store("put", "ORDERS", "text", "--field", "n:int64=7", "--field", "r:bytes=0a0b", "--field",
             "x:float=inf",
             "--field", "on:bool=no", "--expire-at", FUTURE_ISO))
    ok(store("put", "ORDERS", input=b"\xff\xfe"))
    first, second = json.loads(ok(store("get", "ORDERS", "--count", "2", "--json")))
    assert base64.b64decode(first["data"]) == b"text" and first["data_text"] == "text"
    assert first["fields"] == {
        "n": {"type": "int64", "value": 7}, "r": {"type": "bytes", "value": "0a0b"},
        "x": {"type": "float", "value": "inf"}, "on": {"type": "bool", "value": False},
    }
    assert first["expiry"] == {"type": "int64", "at_ms": FUTURE_MS, "at": "2099-01-01T00:00:00Z"}
    assert 0 < first["remaining_expiry_ms"] <= FUTURE_MS
    assert first["priority"] == 4 and first["backout_count"] == 0 and first["uid"].startswith("DEV1:")
    assert base64.b64decode(second["data"]) == b"\xff\xfe" and second["data_text"] is None
    assert second["expiry"] is None and second["remaining_expiry_ms"] is None
    assert json.loads(ok(store("get", "ORDERS", "--json"))) == []


def test_get_with_a_field_filter(store: Run) -> None:
    ok(store("put", "ORDERS", "a", "--field", "site=north"))
    ok(store("put", "ORDERS", "b", "--field", "site=south", "--field", "n:int32=5"))
    assert ("data     UTF-8 text, 1 byte: b"
            in ok(store("get", "ORDERS", "--field", "site=south", "--field", "n:int32=5")))
    assert ok(store("get", "ORDERS", "--field", "site=south")) == "No message available on ORDERS.\n"
    assert ok(store("depth", "ORDERS")) == "1\n"


def test_get_errors(store: Run) -> None:
    fail(store("get", "NOPE"), 1, "no queue 'NOPE'")
    result = store("get", "ORDERS", "--count", "0")
    assert result.exit_code == 2 and "x>=1" in result.stderr


def test_get_never_returns_expired_messages(store: Run, db: Path) -> None:
    put_with_clock(db, "ORDERS", Message(b"old", priority=9).expire_after(1000))
    ok(store("put", "ORDERS", "fresh"))
    assert "fresh" in ok(store("get", "ORDERS", "--count", "2"))
    assert ok(store("depth", "ORDERS")) == "0\n"


def test_browse_does_not_take(store: Run) -> None:
    ok(store("put", "ORDERS", "a", "--priority", "1", "--field", "k=v"))
    ok(store("put", "ORDERS", "b", "--priority", "9"))
    out = ok(store("browse", "ORDERS"))
    assert out.index("1 byte: b") < out.index("1 byte: a")
    assert ok(store("depth", "ORDERS")) == "2\n"
    assert [m["data_text"] for m in json.loads(ok(store("browse", "ORDERS", "--json")))] == ["b", "a"]
    assert ([m["data_text"] for m in json.loads(ok(store("browse", "ORDERS", "--json", "--limit", "1")))]
            == ["b"])
    assert ([m["data_text"] for m in json.loads(ok(store("--json", "browse", "ORDERS", "--field", "k=v")))]
            == ["a"])
    assert ok(store("browse", "ORDERS", "--field", "k=w")) == "No messages to browse on ORDERS.\n"
    fail(store("browse", "NOPE"), 1, "no queue 'NOPE'")


def test_browse_shows_queue_expiry_and_backouts(store: Run, db: Path) -> None:
    ok(store("queue", "alter", "ORDERS", "--expiry-ms", "1h"))
    ok(store("put", "ORDERS", "x"))
    with QueueManager(db) as qm:
        qm.get("ORDERS", confirm_id=5)
        qm.undo("ORDERS", 5)
    out = ok(store("browse", "ORDERS"))
    assert "expiry   the queue's expiry_ms; " in out and "  backouts 1" in out


def test_depth(store: Run, db: Path) -> None:
    assert ok(store("depth", "ORDERS")) == "0\n"
    ok(store("put", "ORDERS", "x"))
    put_with_clock(db, "ORDERS", Message(b"old").expire_after(1000))
    assert json.loads(ok(store("depth", "ORDERS", "--json"))) == {"queue": "ORDERS", "depth": 1}
    fail(store("depth", "NOPE"), 1, "no queue 'NOPE'")


def test_sweep(store: Run, db: Path) -> None:
    ok(store("queue", "define", "ALERTS"))
    ok(store("put", "ORDERS", "live"))
    for queue, count in (("ORDERS", 2), ("ALERTS", 1)):
        for _ in range(count):
            put_with_clock(db, queue, Message(b"old").expire_after(1000))
    assert ok(store("sweep")) == "Discarded 3 expired message(s).\n  ALERTS: 1\n  ORDERS: 2\n"
    assert ok(store("sweep")) == "Discarded 0 expired message(s).\n"
    put_with_clock(db, "ALERTS", Message(b"old").expire_after(1000))
    assert json.loads(ok(store("sweep", "ALERTS", "--json"))) == {"discarded": 1, "queues": {"ALERTS": 1}}
    assert ok(store("depth", "ORDERS")) == "1\n"
    fail(store("sweep", "NOPE"), 1, "no queue 'NOPE'")


# -- the real console script ---------------------------------------------------------------------


def test_console_script_round_trip(tmp_path: Path) -> None:
    script = Path(sys.executable).with_name("edgeq")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "edgeq"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("EDGEQ_")}
    env["EDGEQ_DB"] = str(tmp_path / "dev.db")

    def edgeq(*args: str, data: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([*command, *args], input=data, capture_output=True, env=env, timeout=60,
                              check=False)

    assert edgeq("--name", "DEV1", "queue", "define", "Q").returncode == 0
    put = edgeq("put", "Q", "-", "--field", "n:int32=1", data=b"\x00payload\xff")
    assert put.returncode == 0 and put.stdout.decode().startswith("DEV1:")
    got = edgeq("get", "Q", "--raw")
    assert (got.returncode, got.stdout) == (0, b"\x00payload\xff")
    missing = edgeq("depth", "NOPE")
    assert missing.returncode == 1
    assert missing.stderr.decode().strip().startswith("Error: no queue 'NOPE'")
    assert b"Traceback" not in missing.stderr


# -- parsing and formatting helpers ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "ms"),
    [("0", 0), ("250ms", 250), ("30s", 30_000), ("1.5s", 1500), ("5m", 300_000),
     ("2h", 7_200_000), ("1d", 86_400_000), ("1h30m", 5_400_000), (" 1m 5s ", 65_000)],
)
def test_parse_duration(text: str, ms: int) -> None:
    assert parse_duration(text) == ms


@pytest.mark.parametrize("text", ["", "s", "5x", "1.5.5s", "-5s", "5s-", "0.0001s", "250", "30"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


@pytest.mark.parametrize("ms",
                         [0, 1, 999, 1000, 1001, 60_000, 90_500, 3_600_000, 86_400_000 * 3 + 7, 2**31 - 1])
def test_format_duration_round_trips(ms: int) -> None:
    assert parse_duration(format_duration(ms).replace(" ", "")) == ms


def test_approx_duration() -> None:
    assert [approx_duration(ms) for ms in (5, 1500, 59_999, 60_000, 3_661_000, 90_000_000)] == [
        "5ms", "1.5s", "59.9s", "1m 0s", "1h 1m", "1d 1h",
    ]


def test_parse_and_format_time() -> None:
    expected = int(datetime(2025, 11, 21, 9, tzinfo=UTC).timestamp()) * 1000
    assert parse_time("2025-11-21T09:00:00Z") == expected
    assert parse_time("2025-11-21T09:00:00.001+00:00") == expected + 1
    assert format_time(expected + 1) == "2025-11-21T09:00:00.001Z"
    for bad in ("2025-11-21", "noon", "-5"):
        with pytest.raises(ValueError):
            parse_time(bad)


def test_fields_round_trip_through_their_text_form() -> None:
    values = {"s": "a b", "i": Int32(-1), "l": Int64(2**40), "f": 0.25, "t": True, "b": b"\x01", "a:b": "c"}
    for name, value in values.items():
        text = format_field(name, value).strip("'")
        assert parse_field(text) == (name, value)
        assert type(parse_field(text)[1]) is type(value)


def test_field_name_with_a_colon_that_is_not_a_type() -> None:
    assert parse_field("a:b=c") == ("a:b", "c")
    assert parse_field("k=x=y") == ("k", "x=y")

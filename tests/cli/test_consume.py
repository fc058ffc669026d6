"""edgeq.cli.consume: ``edgeq consume`` printing messages or running a command on each, end to
end on a real store; real subprocesses where signals matter."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from edgeq import Int32, Message, QueueManager
from edgeq.cli.consume import _wait
from tests.cli.stores import clean_env, edgeq, runner, store_with_q
from tests.cli.test_cli import Run, fail, ok

BOUND = 60.0


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return store_with_q(tmp_path)


@pytest.fixture
def run(db: Path) -> Run:
    return runner(db)


def put(db: Path, *messages: Message, queue: str = "Q") -> None:
    with QueueManager(db) as qm:
        qm.put_many(queue, list(messages))


def held(db: Path, queue: str = "Q") -> list[tuple[bytes, int]]:
    """(data, backout count) of the messages ready on a queue, and check none is left locked."""
    with QueueManager(db) as qm:
        ready = qm.browse(queue)
        assert qm.depth(queue) == len(ready), "a message was left locked"
        return [(m.data, m.backout_count) for m in ready]


def until_exists(path: Path) -> None:
    deadline = time.monotonic() + BOUND
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.01)


# -- printing --------------------------------------------------------------------------------------


def test_consume_prints_what_is_there_then_stops(db: Path, run: Run) -> None:
    put(db, Message(b"first"), Message(b"second", fields={"n": Int32(2)}))
    result = run("consume", "Q", "--wait", "0")
    out = ok(result)
    assert out.index("first") < out.index("second") and "n:int32=2" in out
    assert held(db) == []
    assert ok(run("consume", "Q", "--wait", "0")) == ""
    assert "No message came on Q within 0ms." in run("consume", "Q", "--wait", "0").stderr


def test_consume_json_lines_and_max(db: Path, run: Run) -> None:
    put(db, *(Message(b"m%d" % n) for n in range(5)))
    lines = ok(run("consume", "Q", "--json", "--max", "3")).splitlines()
    assert [json.loads(line)["data_text"] for line in lines] == ["m0", "m1", "m2"]
    assert [data for data, _ in held(db)] == [b"m3", b"m4"]


def test_consume_filters_by_field(db: Path, run: Run) -> None:
    put(db, Message(b"a", fields={"site": "north"}), Message(b"b", fields={"site": "south"}))
    out = ok(run("consume", "Q", "--wait", "0", "--field", "site=south", "--json"))
    assert [json.loads(line)["data_text"] for line in out.splitlines()] == ["b"]
    assert held(db) == [(b"a", 0)]


def test_consume_waits_for_a_message_put_by_another_process(db: Path) -> None:
    proc = edgeq(db, "consume", "Q", "--json", "--max", "1", "--wait", "1m")
    try:
        put(db, Message(b"late"))
        out, err = proc.communicate(timeout=BOUND)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert json.loads(out)["data_text"] == "late"
    assert held(db) == []


def test_a_reader_that_hangs_up_takes_nothing_more(db: Path) -> None:
    put(db, *(Message(b"x" * 1000) for _ in range(200)))
    pipeline = f"{sys.executable} -m edgeq.cli --db {db} consume Q --wait 0 --json | head -n 1"
    result = subprocess.run(["/bin/sh", "-c", pipeline], capture_output=True, env=clean_env(), timeout=BOUND)
    assert json.loads(result.stdout)["data_text"] == "x" * 1000
    assert "Traceback" not in result.stderr.decode()
    left = held(db)
    assert 0 < len(left) < 200 and all(count == 0 for _, count in left)  # what was not printed is still there


# -- running a command -------------------------------------------------------------------------------


def test_each_message_goes_to_the_command_with_its_metadata(db: Path, run: Run, tmp_path: Path) -> None:
    put(db, Message(b"payload one", priority=7, correlation_id=b"\x01\x02", reply_to="R",
                    fields={"k": "v"}, expiry=Int32(3_600_000)))
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    command = (f'cat > "{out_dir}/$EDGEQ_UID.data"; '
               f'env | grep ^EDGEQ_ | sort > "{out_dir}/$EDGEQ_UID.env"')
    assert ok(run("consume", "Q", "--wait", "0", "--exec", command)) == ""
    [data_file] = out_dir.glob("*.data")
    assert data_file.read_bytes() == b"payload one"
    env = dict(line.split("=", 1) for line in data_file.with_suffix(".env").read_text().splitlines())
    assert (env["EDGEQ_QUEUE"], env["EDGEQ_UID"], env["EDGEQ_PRIORITY"]) == ("Q", data_file.stem, "7")
    assert ((env["EDGEQ_CORRELATION_ID"], env["EDGEQ_REPLY_TO"], env["EDGEQ_BACKOUT_COUNT"])
            == ("0102", "R", "0"))
    assert json.loads(env["EDGEQ_FIELDS"]) == {"k": {"type": "str", "value": "v"}}
    assert 0 < int(env["EDGEQ_REMAINING_EXPIRY_MS"]) <= 3_600_000 and int(env["EDGEQ_CREATED_MS"]) > 0
    assert held(db) == []


def test_a_failing_command_undoes_and_the_backout_queue_takes_the_poison(db: Path, run: Run) -> None:
    with QueueManager(db) as qm:
        qm.define_queue("BOQ")
        qm.alter_queue("Q", backout_threshold=2, backout_queue="BOQ", redelivery_delay_ms=0)  # at once
    put(db, Message(b"poison"), Message(b"good"))
    command = 'test "$(cat)" != poison'  # fails on the poison only
    result = run("consume", "Q", "--wait", "0", "--exec", command)
    assert result.exit_code == 0
    assert result.stderr.count("exited with status 1") == 2
    assert "undone (backout 1)" in result.stderr and "undone (backout 2)" in result.stderr
    assert held(db) == []
    assert held(db, "BOQ") == [(b"poison", 0)]


def test_bad_values_are_usage_errors(run: Run) -> None:
    for args, needle in [
        (["--wait", "soon"], "not a duration"),
        (["--max", "0"], "0 is not in the range"),
        (["--json", "--exec", "cat"], "choose one"),
        (["--exec", " "], "give a command"),
        (["--field", "nope"], "NAME=VALUE"),
    ]:
        result = run("consume", "Q", *args)
        assert result.exit_code == 2 and needle in result.stderr, (args, result.stderr)
    fail(run("consume", "bad name"), 2, "queue name 'bad name' is not valid")
    fail(run("consume", "NOPE", "--wait", "0"), 1, "no queue 'NOPE'")


def test_wait_values() -> None:
    assert (_wait("30s"), _wait("500ms"), _wait("2m"), _wait("0")) == (30.0, 0.5, 120.0, 0.0)
    assert _wait("forever") == float("inf")


# -- stopping by a signal ------------------------------------------------------------------------------


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_the_command_and_undoes_the_message_in_hand(
    db: Path, tmp_path: Path, signum: int
) -> None:
    put(db, Message(b"in hand"), Message(b"next"))
    started = tmp_path / "started"
    proc = edgeq(db, "consume", "Q", "--exec", f'touch "{started}"; exec sleep 60')
    try:
        until_exists(started)
        proc.send_signal(signum)
        _out, err = proc.communicate(timeout=BOUND)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signum, err
    assert f"Stopped by {signal.Signals(signum).name}" in err.decode()
    assert held(db) == [(b"in hand", 0), (b"next", 0)]  # undone, no backout counted, nothing lost


def test_a_signal_while_waiting_stops_cleanly(db: Path) -> None:
    put(db, Message(b"one"))
    proc = edgeq(db, "consume", "Q", "--json")
    try:
        assert proc.stdout is not None
        assert json.loads(proc.stdout.readline())["data_text"] == "one"  # printed: it waits for the next
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=BOUND)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    put(db, Message(b"after"))
    assert held(db) == [(b"after", 0)]

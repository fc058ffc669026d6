"""edgeq.cli.messages: ``edgeq get --wait`` (the other verbs are covered by tests/cli/test_cli.py),
and that a message leaves the queue only once it is printed."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from edgeq import Message, QueueManager
from tests.cli.stores import clean_env, edgeq, runner, store_with_q
from tests.cli.test_cli import Run, ok

BOUND = 60.0


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return store_with_q(tmp_path)


@pytest.fixture
def run(db: Path) -> Run:
    return runner(db)


def test_get_waits_for_a_put_from_another_process(db: Path) -> None:
    proc = edgeq(db, "get", "Q", "--wait", "1m", "--json")
    try:
        with QueueManager(db) as qm:
            qm.put("Q", Message(b"worth the wait"))
        out, err = proc.communicate(timeout=BOUND)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert [m["data_text"] for m in json.loads(out)] == ["worth the wait"]
    with QueueManager(db) as qm:
        assert qm.depth("Q") == 0


def test_a_wait_that_passes_takes_nothing(run: Run) -> None:
    started = time.monotonic()
    assert ok(run("get", "Q", "--wait", "300ms")) == "No message available on Q.\n"
    assert time.monotonic() - started >= 0.3


def test_get_without_wait_still_takes_at_once(run: Run, db: Path) -> None:
    with QueueManager(db) as qm:
        qm.put_many("Q", [Message(b"a"), Message(b"b")])
    assert ok(run("get", "Q", "--count", "5", "--raw", "--wait", "forever")) == "ab"
    with QueueManager(db) as qm:
        assert qm.depth("Q") == 0


@pytest.mark.parametrize("value", ["soon", "-1s", "1.5ms"])
def test_a_bad_wait_is_a_usage_error(run: Run, value: str) -> None:
    result = run("get", "Q", "--wait", value)
    assert result.exit_code == 2 and "--wait" in result.stderr, result.stderr


def test_a_message_stays_when_stdout_fails(db: Path) -> None:
    """get writes the message, then takes it: a closed stdout leaves it on the queue."""
    with QueueManager(db) as qm:
        qm.put("Q", Message(b"x" * 200_000))  # more than a pipe holds: the write meets the closed end
    reader = f"{sys.executable} -m edgeq.cli --db {db} get Q --raw | head -c 10"
    result = subprocess.run(["/bin/sh", "-c", reader], capture_output=True, env=clean_env(), timeout=BOUND)
    assert result.stdout == b"x" * 10
    with QueueManager(db) as qm:
        [kept] = qm.browse("Q")
        assert (len(kept.data), kept.backout_count) == (200_000, 0)

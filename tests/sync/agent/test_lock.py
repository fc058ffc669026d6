"""``edgeq sync status`` tells the truth about the agent: a pull's last success after
``edgeq sync --once``, and whether a daemon runs (its pid, its last cycle), read by another
process; a daemon sent SIGTERM logs its exit and is shown stopped, with no retry promised.
Real processes throughout: ``edgeq serve``, ``edgeq sync``, ``edgeq sync status``."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from edgeq import Message, QueueManager
from tests.sync.conftest import EDGEQ, edgeq_serve, free_port


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*EDGEQ, *args], capture_output=True, text=True, timeout=60)


def status_json(device: Path) -> dict[str, Any]:
    done = run("sync", "status", "--db", str(device), "--json")
    assert done.stdout, done.stderr
    parsed: dict[str, Any] = json.loads(done.stdout)
    return parsed


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """`edgeq serve` holding one message for DEV1's INBOX; yields its URL and store."""
    home = tmp_path / "home.db"
    with QueueManager(home, name="HOME") as qm:
        qm.define_queue("DEV1.INBOX")
        qm.put("DEV1.INBOX", Message(b"for DEV1"))
    with edgeq_serve(home, 0) as lines:
        listening = re.search(r"Uvicorn running on (http://127\.0\.0\.1:\d+)", lines[-1])
        assert listening is not None, lines[-1]
        yield listening.group(1), home


def test_a_pull_of_sync_once_shows_its_last_success(served: tuple[str, Path], tmp_path: Path) -> None:
    url, _ = served
    device = tmp_path / "device.db"
    with QueueManager(device, name="DEV1") as qm:
        qm.define_home_server_queue("INBOX", server="HOME")
        qm.define_remote_queue("ORDERS", target_qmgr="HOME")

    done = run("sync", "--db", str(device), "--server", url, "--once")

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["pulled"]["received"] == 1
    queues = {q["queue"]: q for q in status_json(device)["queues"]}
    assert queues["INBOX"]["last_success_ms"] is not None
    assert queues["ORDERS"]["last_success_ms"] is not None
    text = run("sync", "status", "--db", str(device)).stdout
    inbox = next(line for line in text.splitlines() if line.startswith("INBOX"))
    assert "never" not in inbox and " ago" in inbox, text
    assert "agent: not running" in text  # --once ran and ended: no daemon runs on this store


def events(stream: Any, until: str) -> list[dict[str, Any]]:
    """The JSON log lines of a daemon's stderr, read up to and including the first of event ``until``."""
    seen: list[dict[str, Any]] = []
    for line in stream:
        if line.startswith("{"):
            seen.append(json.loads(line))
            if seen[-1].get("event") == until:
                return seen
    pytest.fail(f"the daemon ended before it logged {until!r}: {seen}")


def test_status_tells_a_running_daemon_from_one_stopped_by_sigterm(tmp_path: Path) -> None:
    device = tmp_path / "device.db"
    with QueueManager(device, name="DEV1") as qm:
        qm.define_remote_queue("ORDERS", target_qmgr="HOME")
        qm.put("ORDERS", Message(b"waiting"))
    nobody = f"http://127.0.0.1:{free_port()}"  # nothing listens there: the daemon backs off
    daemon = subprocess.Popen([*EDGEQ, "sync", "--db", str(device), "--server", nobody, "--interval", "0.2"],
                              stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert daemon.stderr is not None
    try:
        events(daemon.stderr, "backoff")  # it runs, and has failed a cycle

        running = status_json(device)
        assert running["agent"]["running"] is True and running["agent"]["pid"] == daemon.pid
        assert running["agent"]["started_ms"] is not None
        text = run("sync", "status", "--db", str(device)).stdout
        assert f"agent: running (pid {daemon.pid}" in text, text
    finally:
        daemon.send_signal(signal.SIGTERM)
        rest = daemon.stderr.read()
        daemon.stderr.close()
        assert daemon.wait(30) == 0
    stopped = [json.loads(line) for line in rest.splitlines() if line.startswith("{")]
    assert [e for e in stopped if e.get("event") == "stop" and e.get("reason") == "SIGTERM"
            and e.get("pid") == daemon.pid], rest

    after = status_json(device)
    assert after["agent"]["running"] is False and after["agent"]["pid"] == daemon.pid
    assert after["agent"]["exited_ms"] is not None and after["agent"]["exit_reason"] == "SIGTERM"
    assert after["next_retry_ms"] is None and all(q["next_retry_ms"] is None for q in after["queues"])
    text = run("sync", "status", "--db", str(device)).stdout
    assert "agent: not running" in text and "next try" not in text, text
    assert re.search(r"^ORDERS .* -\s+HOME/ORDERS$", text, re.M), text  # NEXT-RETRY: none while nothing runs

    # A pid alone proves nothing (pids are reused): the record naming a live process's pid,
    # this test's own, still reads as not running.
    with QueueManager(device) as qm:
        record = qm.sync_overview().agent
        qm.exchange.record_sync_state({"": {**record, "pid": os.getpid(), "exited_ms": None}})
    assert status_json(device)["agent"]["running"] is False

"""`edgeq serve` and `edgeq sync` as separate processes, with JSON-line logs."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from edgeq import Message, QueueManager

from .conftest import edgeq_serve, free_port

EDGEQ = [sys.executable, "-m", "edgeq"]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path, list[str]]]:
    """`edgeq serve` in a subprocess; yields its URL, its store and (after exit) its log lines."""
    home = tmp_path / "home.db"
    with QueueManager(home, name="HOME") as qm:
        qm.define_queue("ORDERS")
    port = free_port()
    with edgeq_serve(home, port) as lines:
        yield f"http://127.0.0.1:{port}", home, lines


def test_serve_and_sync_once_move_a_backlog(served: tuple[str, Path, list[str]], tmp_path: Path) -> None:
    url, home, _ = served
    device = tmp_path / "device.db"
    with QueueManager(device, name="DEV1") as qm:
        qm.define_remote_queue("ORDERS", target_qmgr="HOME")
        qm.put_many("ORDERS", [Message(b"m%d" % i) for i in range(1500)])

    done = subprocess.run(
        [*EDGEQ, "sync", "--db", str(device), "--server", url, "--once", "--batch-size", "400", "--progress"],
        capture_output=True, text=True, timeout=60,
    )

    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["pushed"]["transmitted"] == 1500 and summary["pushed"]["error"] is None
    assert "ORDERS: 1,500 sent, 0 left" in done.stderr
    events = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    assert {"hello", "push"} <= {e["event"] for e in events}
    with QueueManager(home) as qm:
        assert qm.depth("ORDERS") == 1500
    with httpx.Client() as client:
        metrics = client.get(url + "/metrics").text
    assert "edgeq_sync_messages_confirmed_total 1500" in metrics
    assert 'edgeq_sync_device_clock_offset_seconds{device="DEV1"}' in metrics


def test_sync_once_fails_with_exit_1_when_the_server_is_down(tmp_path: Path) -> None:
    device = tmp_path / "device.db"
    with QueueManager(device, name="DEV1") as qm:
        qm.define_remote_queue("ORDERS", target_qmgr="HOME")
        qm.put("ORDERS", Message(b"x"))
    done = subprocess.run(
        [*EDGEQ, "sync", "--db", str(device), "--server", f"http://127.0.0.1:{free_port()}", "--once",
         "--timeout", "5"],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 1
    assert "cannot reach" in json.loads(done.stdout)["pushed"]["error"]
    with QueueManager(device) as qm:
        assert qm.depth("ORDERS") == 1


def test_server_logs_are_json_lines(served: tuple[str, Path, list[str]]) -> None:
    url, _, lines = served
    with httpx.Client() as client:
        client.post(url + "/v1/put", content=b"\xff", headers={"content-type": "application/cbor"})
    # the fixture's teardown collects the rest of the log; check what we have so far
    parsed = [json.loads(line) for line in lines if line.strip()]
    assert any(e["event"] == "serve" and e["qmgr"] == "HOME" for e in parsed)
    assert all({"ts", "level", "logger", "event", "msg"} <= e.keys() for e in parsed)

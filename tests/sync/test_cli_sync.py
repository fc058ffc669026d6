"""`edgeq serve` and `edgeq sync` as separate processes, with JSON-line logs."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from edgeq import Message, QueueManager
from tests.sync.conftest import edgeq_serve, free_port

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


def sync_once(device: Path, url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*EDGEQ, "sync", "--db", str(device), "--server", url, "--once", *extra],
                          capture_output=True, text=True, timeout=60)


def logged(stderr: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]


def device_with_metrics(tmp_path: Path) -> Path:
    """A device store with an order on ORDERS and two messages on METRICS, which the
    ``served`` home server does not define."""
    device = tmp_path / "device.db"
    with QueueManager(device, name="DEV1") as qm:
        qm.define_remote_queue("ORDERS", target_qmgr="HOME")
        qm.define_remote_queue("METRICS", target_qmgr="HOME")
        qm.put("ORDERS", Message(b"order"))
        qm.put_many("METRICS", [Message(b"a"), Message(b"b")])
    return device


def test_refused_messages_make_sync_once_exit_1_with_counts_per_queue(
    served: tuple[str, Path, list[str]], tmp_path: Path
) -> None:
    url, _, _ = served
    device = device_with_metrics(tmp_path)

    done = sync_once(device, url)

    assert done.returncode == 1, done.stderr
    summary = json.loads(done.stdout)
    assert (summary["pushed"]["transmitted"], summary["pushed"]["refused"]) == (1, 2)
    metrics = summary["queues"]["METRICS"]
    assert (metrics["direction"], metrics["refused"], metrics["code"]) == ("push", 2, "no-queue")
    assert "edgeq queue define METRICS" in metrics["error"] and "define_queue(" not in metrics["error"]
    assert summary["queues"]["ORDERS"] == {**summary["queues"]["ORDERS"], "moved": 1, "error": None}
    (refused,) = [e for e in logged(done.stderr) if e["event"] == "refused"]
    assert refused["queue"] == "METRICS" and refused["count"] == 2 and refused["code"] == "no-queue"
    assert "on the server" in refused["msg"] and "edgeq queue define METRICS" in refused["msg"]
    assert "define_queue(" not in done.stderr


def test_a_forbidden_queue_does_not_stop_the_pull_of_sync_once(tmp_path: Path) -> None:
    from edgeq.sync.keys import new_key_pair

    home, device = tmp_path / "home.db", tmp_path / "device.db"
    pair = new_key_pair(tmp_path / "dev1.key")
    with QueueManager(home, name="HOME") as qm:
        for queue in ("ORDERS", "AUDIT", "DEV1.INBOX"):
            qm.define_queue(queue)
        qm.register_device("DEV1", pair.public_key, queues=["ORDERS"])
        qm.put("DEV1.INBOX", Message(b"for DEV1"))
    with QueueManager(device, name="DEV1") as qm:
        qm.define_remote_queue("AUDIT", target_qmgr="HOME")  # DEV1 may not push there
        qm.define_home_server_queue("INBOX", server="HOME")
        qm.put("AUDIT", Message(b"audit"))
    port = free_port()
    with edgeq_serve(home, port):
        done = sync_once(device, f"http://127.0.0.1:{port}", "--key", str(pair.private_path))

    assert done.returncode == 1, done.stderr
    summary = json.loads(done.stdout)
    assert summary["pulled"] is not None and summary["pulled"]["received"] == 1
    assert summary["queues"]["AUDIT"]["code"] == "forbidden" and summary["queues"]["INBOX"]["error"] is None
    with QueueManager(device) as qm:
        assert [m.data for m in qm.browse("INBOX")] == [b"for DEV1"] and qm.depth("AUDIT") == 1


def status(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*EDGEQ, *args], capture_output=True, text=True, timeout=60)


def test_sync_status_shows_each_queue_and_exits_1_while_one_fails(
    served: tuple[str, Path, list[str]], tmp_path: Path
) -> None:
    url, home, _ = served
    device = device_with_metrics(tmp_path)
    with QueueManager(device) as qm:
        qm.define_home_server_queue("INBOX", server="HOME")  # the server holds no DEV1.INBOX either
    assert sync_once(device, url).returncode == 1

    text = status("sync", "status", "--db", str(device))
    as_json = status("--db", str(device), "sync", "status", "--json")  # the group's --db works too

    assert text.returncode == 1 and as_json.returncode == 1, text.stderr + as_json.stderr
    header, *rows = text.stdout.splitlines()
    assert header.split()[:4] == ["QUEUE", "DIRECTION", "BACKLOG", "OLDEST"]
    by_queue = {row.split()[0]: row for row in rows
                if row and row.split()[0] in ("ORDERS", "METRICS", "INBOX")}
    assert set(by_queue) == {"ORDERS", "METRICS", "INBOX"}
    assert "no-queue" in by_queue["METRICS"] and "no-queue" in by_queue["INBOX"]
    assert "edgeq queue define METRICS --db" in text.stdout  # the hint, under the table
    queues = {q["queue"]: q for q in json.loads(as_json.stdout)["queues"]}
    metrics = queues["METRICS"]
    assert ((metrics["direction"], metrics["backlog"], metrics["refused"], metrics["refusals"])
            == ("push", 2, 2, 2))
    assert metrics["last_error_code"] == "no-queue" and metrics["failing"] is True
    assert metrics["oldest_age_ms"] is not None and metrics["oldest_age_ms"] >= 0
    assert metrics["next_retry_ms"] is None or metrics["next_retry_ms"] > 0
    assert queues["ORDERS"]["backlog"] == 0 and queues["ORDERS"]["last_success_ms"] is not None
    assert queues["ORDERS"]["failing"] is False
    assert queues["INBOX"]["direction"] == "pull" and queues["INBOX"]["last_error_code"] == "no-queue"

    with QueueManager(home) as qm:
        qm.define_queue("METRICS")
        qm.define_queue("DEV1.INBOX")
    assert sync_once(device, url).returncode == 0
    healthy = status("sync", "status", "--db", str(device), "--json")
    assert healthy.returncode == 0, healthy.stdout
    assert not any(q["failing"] for q in json.loads(healthy.stdout)["queues"])


def test_sync_keeps_its_invocations_and_refuses_bad_ones(tmp_path: Path) -> None:
    device = tmp_path / "device.db"
    with QueueManager(device, name="DEV1") as qm:
        qm.define_remote_queue("ORDERS", target_qmgr="HOME")
    no_server = status("sync", "--db", str(device), "--once")
    assert no_server.returncode == 2 and "--server" in no_server.stderr
    assert status("sync", "status", "--db", str(device), "--bogus").returncode == 2
    assert status("sync", "stats", "--db", str(device)).returncode == 2
    missing = status("sync", "status", "--db", str(tmp_path / "none.db"))
    assert missing.returncode == 1 and "does not exist" in missing.stderr
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate or a key\n")
    for bad, option in (
        (["--server", "ftp://home:8470"], "--server"),  # not http(s)
        # no such key file
        (["--server", "http://127.0.0.1:9", "--key", str(tmp_path / "none.key")], "--key"),
        (["--server", "http://127.0.0.1:9", "--key", str(junk)], "--key"),
        (["--server", "https://home:8470", "--ca-file", str(junk)], "--ca-file"),
    ):
        refused = status("sync", "--db", str(device), "--once", *bad)
        assert refused.returncode == 2 and option in refused.stderr, (bad, refused.stderr)
        assert "Traceback" not in refused.stderr
    bad_host = status("serve", "--db", str(tmp_path / "home.db"), "--host", "not a host!!")
    assert bad_host.returncode == 2 and "--host" in bad_host.stderr and "Traceback" not in bad_host.stderr
    helped = status("sync", "--help")
    assert helped.returncode == 0 and "status" in helped.stdout and "--once" in helped.stdout
    assert "Example" in status("sync", "status", "--help").stdout
    fresh = status("sync", "status", "--db", str(device))
    assert fresh.returncode == 0 and "ORDERS" in fresh.stdout and "never" in fresh.stdout

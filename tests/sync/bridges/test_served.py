"""Bridges run by the daemons and seen by operators: a real `edgeq serve --console` subprocess running
its store's bridge (a real mosquitto), its state in /metrics, `edgeq sync status` and the console in
Chromium; a real `edgeq sync` daemon running a device's bridge, stopped with it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import httpx
from selenium import webdriver
from selenium.webdriver.common.by import By

from edgeq import Message, QueueManager
from edgeq.sync.bridges.book import define_bridge
from edgeq.sync.bridges.status import pid_alive, read_states
from edgeq.sync.server.console.auth import set_password
from tests.sync.bridges.conftest import Broker, Device
from tests.sync.conftest import EDGEQ, edgeq_serve, edgeq_serve_console, free_port
from tests.sync.server.console.test_browser import PASSWORD, _cells, _sign_in, browser  # noqa: F401
from tests.waits import until

TOPIC = "served/<i>x</i>"  # a topic the console must show as text, not as markup


def _sync_status(db: Path) -> tuple[int, dict[str, dict[str, object]]]:
    done = subprocess.run([*EDGEQ, "sync", "status", "--db", str(db), "--json"], capture_output=True,
                          text=True, timeout=30)
    return done.returncode, {b["name"]: b for b in json.loads(done.stdout)["bridges"]}


def _metric(url: str, line: str) -> bool:
    return line in httpx.get(url + "/metrics", timeout=10).text.splitlines()


def test_edgeq_serve_runs_the_stores_bridges_and_operators_see_them(
    tmp_path: Path, broker: Broker, device: Device, browser: webdriver.Chrome  # noqa: F811
) -> None:
    home = tmp_path / "home.db"
    with QueueManager(home, name="HOME") as qm:
        qm.define_queue("OUT")
        define_bridge(qm, "up.1", "mqtt-out", "OUT",
                      {"url": broker.url, "topics": [TOPIC], "retry_max_s": 0.2})
    set_password(home, PASSWORD)
    device.subscribe(TOPIC)
    with edgeq_serve_console(home) as served:
        url = served.url
        with QueueManager(home) as qm:
            qm.put("OUT", Message(b"from home"))
        (got,) = device.wait_for(1)
        assert got.payload == b"from home"
        until(lambda: _metric(url, 'edgeq_bridge_forwarded_messages_total{bridge="up.1"} 1'),
              "forwarded in /metrics")
        assert _metric(url, 'edgeq_bridge_connected{bridge="up.1"} 1')
        assert _metric(url, 'edgeq_bridge_backlog_messages{bridge="up.1"} 0')
        assert _metric(url, 'edgeq_bridge_info{bridge="up.1",kind="mqtt-out",queue="OUT"} 1')
        metrics = httpx.get(url + "/metrics", timeout=10).text
        assert 'edgeq_bridge_last_forward_timestamp_seconds{bridge="up.1"} ' in metrics
        code, bridges = _sync_status(home)
        up = bridges["up.1"]
        assert (code, up["running"], up["connected"], up["forwarded"]) == (0, True, True, 1)

        _sign_in(browser, served.console_url, PASSWORD)
        row = _cells(browser, "bridges", "bridge")["up.1"]
        assert row[:6] == ["up.1", "mqtt-out", "OUT", TOPIC, "yes", "yes"]
        assert row[7] == "1"
        assert not browser.find_elements(By.CSS_SELECTOR, "#bridges i")

        broker.stop()
        try:
            until(lambda: _metric(url, 'edgeq_bridge_connected{bridge="up.1"} 0'), "disconnected in /metrics")
            until(lambda: "cannot reach the broker" in (read_states(home)["up.1"].last_error or ""),
                  "a failed reconnection in the stored status")
            (errors,) = [line for line in httpx.get(url + "/metrics", timeout=10).text.splitlines()
                         if line.startswith('edgeq_bridge_errors_total{bridge="up.1"} ')]
            assert int(errors.split()[-1]) >= 1
            code, bridges = _sync_status(home)
            assert code == 1 and bridges["up.1"]["running"] and not bridges["up.1"]["connected"]
            assert "cannot reach the broker" in str(bridges["up.1"]["last_error"])
            text = subprocess.run([*EDGEQ, "sync", "status", "--db", str(home)], capture_output=True,
                                  text=True, timeout=30).stdout
            assert "bridge up.1: not connected: cannot reach the broker" in text
            browser.refresh()
            assert "cannot reach the broker" in _cells(browser, "bridges", "bridge")["up.1"][10]

            # The bridges' process killed: the server serves on, and starts it again.
            first = read_states(home)["up.1"].pid
            assert first is not None and first not in (served.worker_pid, served.console_pid)
            os.kill(first, signal.SIGKILL)
            until(lambda: read_states(home)["up.1"].pid not in (first, None),
                  "the bridges' process started again")
            assert httpx.get(url + "/healthz", timeout=10).status_code == 200
        finally:
            broker.start()
        until(lambda: _metric(url, 'edgeq_bridge_connected{bridge="up.1"} 1'), "connected again")
        again = read_states(home)["up.1"].pid
    assert served.proc.returncode == 0
    assert not pid_alive(again)  # stopping the server stopped its bridges
    assert any('"bridges-exited"' in line for line in served.lines)
    assert any('"edgeq.bridges"' in line and "running on queue OUT" in line for line in served.lines)


def test_the_sync_daemon_runs_the_devices_bridges_and_stops_them(
    tmp_path: Path, broker: Broker, device: Device, served: tuple[str, Path]
) -> None:
    url, _ = served
    db = tmp_path / "dev.db"
    with QueueManager(db, name="DEV1") as qm:
        qm.define_remote_queue("ORDERS", target_qmgr="HOME")
        define_bridge(qm, "in1", "mqtt-in", "ORDERS", {"url": broker.url, "topics": ["dev1/#"]})
    daemon = subprocess.Popen([*EDGEQ, "sync", "--db", str(db), "--server", url, "--interval", "0.2"],
                              stderr=subprocess.PIPE, text=True)
    try:
        until(lambda: "in1" in read_states(db) and read_states(db)["in1"].connected, "the bridge connected")
        device.publish("dev1/t", b"reading")
        until(lambda: _metric(url, 'edgeq_queue_depth_messages{queue="ORDERS"} 1'), "pushed to the server")
        # The bridge writes its counters a moment after its put (the state's flush): waited for.
        until(lambda: _sync_status(db)[1]["in1"]["forwarded"] == 1, "the forward counted in sync status")
        code, bridges = _sync_status(db)
        assert (code, bridges["in1"]["running"], bridges["in1"]["forwarded"]) == (0, True, 1)
        assert bridges["in1"]["pid"] == daemon.pid
    finally:
        daemon.send_signal(signal.SIGTERM)
        _, err = daemon.communicate(timeout=20)
    assert daemon.returncode == 0, err
    code, bridges = _sync_status(db)
    assert not bridges["in1"]["running"] and not bridges["in1"]["connected"]
    assert "agent stopped" in err


def test_serve_no_bridges_runs_none(tmp_path: Path) -> None:
    home = tmp_path / "home.db"
    with QueueManager(home, name="HOME") as qm:
        qm.define_queue("OUT")
        define_bridge(qm, "up", "mqtt-out", "OUT", {"url": "mqtt://127.0.0.1:1", "topics": ["t"]})
    port = free_port()
    with edgeq_serve(home, port, "--no-bridges") as lines:
        url = f"http://127.0.0.1:{port}"
        assert _metric(url, 'edgeq_bridge_running{bridge="up"} 0')
        assert _metric(url, 'edgeq_bridge_connected{bridge="up"} 0')
        assert "up" not in read_states(home)  # no runner ever wrote its state
    assert not any('"edgeq.bridges"' in line for line in lines)  # the runner's logger

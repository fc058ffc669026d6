"""Bridges defined from the CLI and Python, kept in the store, listed, run and reported by real
``edgeq bridge`` processes; definitions that cannot work refused when made."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from edgeq import QueueManager
from edgeq.sync.bridges.book import bridge_definition, bridge_definitions, define_bridge, delete_bridge
from edgeq.sync.bridges.errors import BridgeConfigError, BridgeNotFound
from edgeq.sync.bridges.registry import installed_bridges
from edgeq.sync.bridges.status import read_states
from tests.sync.bridges.conftest import Broker
from tests.waits import until

EDGEQ = [sys.executable, "-m", "edgeq"]


def edgeq(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*EDGEQ, "--db", str(db), "bridge", *args], capture_output=True, text=True,
                          timeout=30)


def test_the_cli_defines_lists_runs_reports_and_deletes_a_bridge(tmp_path: Path, broker: Broker) -> None:
    db = tmp_path / "dev.db"
    with QueueManager(db, name="DEV1") as qm:
        qm.define_queue("OUT")
    defined = edgeq(db, "define", "up", "--kind", "mqtt-out", "--queue", "OUT", "--broker", broker.url,
                    "--topic", "book/out", "--qos", "2", "--set", "retry_max_s=0.5", "--json")
    assert defined.returncode == 0, defined.stderr
    assert json.loads(defined.stdout)["config"]["retry_max_s"] == 0.5
    listed = edgeq(db, "list")
    assert listed.stdout.split("\n")[1].split() == ["up", "mqtt-out", "OUT", broker.url, "book/out"]
    run = subprocess.Popen([*EDGEQ, "--db", str(db), "bridge", "run"], stderr=subprocess.PIPE)
    try:
        until(lambda: read_states(db).get("up") is not None and read_states(db)["up"].connected,
              "the bridge connected", 15)
        status = edgeq(db, "status")
        assert status.stdout.split("\n")[1].split()[:5] == ["up", "mqtt-out", "OUT", "yes", "yes"]
    finally:
        run.send_signal(signal.SIGTERM)
        assert run.wait(10) == 0
        assert run.stderr is not None
        run.stderr.close()
    after = json.loads(edgeq(db, "status", "--json").stdout)
    assert [(s["name"], s["running"], s["connected"], s["backlog"]) for s in after] == [
        ("up", False, False, 0)]
    assert edgeq(db, "delete", "up").stdout == "Bridge up deleted.\n"
    assert bridge_definitions(db) == []


def test_definitions_that_cannot_work_are_refused_when_made(tmp_path: Path) -> None:
    with QueueManager(tmp_path / "dev.db", name="DEV1") as qm:
        qm.define_queue("Q")
        ok = {"url": "mqtt://127.0.0.1:1883", "topics": ["a/#"]}
        cases = [
            ("nope", "Q", ok, "no bridge kind 'nope' is installed"),
            ("mqtt-in", "MISSING", ok, "no queue 'MISSING'"),
            ("mqtt-in", "Q", {**ok, "url": "http://x"}, "must look like mqtt://"),
            ("mqtt-in", "Q", {**ok, "topics": []}, "needs topics"),
            ("mqtt-in", "Q", {**ok, "qos": 0}, "QoS 1 or 2"),
            ("mqtt-in", "Q", {**ok, "colour": "red"}, "unknown bridge setting"),
            ("mqtt-in", "Q", {**ok, "batch": 0}, "batch must be an int from 1 to 1024, not 0"),
            ("mqtt-in", "Q", {**ok, "batch": True}, "batch must be an int from 1 to 1024"),
            ("mqtt-in", "Q", {**ok, "linger_ms": -1}, "linger_ms must be an int from 0 to 1000, not -1"),
            ("mqtt-in", "Q", {**ok, "linger_ms": 2.5}, "linger_ms must be an int"),
            ("mqtt-out", "Q", ok, "one topic without wildcards"),
            *(("mqtt-out", "Q", {**ok, "topics": ["a/b"], "batch": bad}, "batch .* must be an int from 1 to "
               "10000") for bad in (0, 10_001, True, "256")),
            ("jetstream-out", "Q", {"url": "nats://127.0.0.1:1", "stream": "S", "topics": ["a.b"],
                                    "batch": 0},
             r"batch \(the messages got, published and confirmed together\) must be an int"),
            ("mqtt-in", "Q", {**ok, "url": "mqtt://broker.example", "username": "u", "password_env": "P"},
             "refusing to send credentials in clear"),
            ("mqtt-in", "Q", {**ok, "ca_file": str(tmp_path / "none.pem")}, "is not a readable file"),
        ]
        for kind, queue, config, why in cases:
            with pytest.raises(BridgeConfigError, match=why):
                define_bridge(qm, "b", kind, queue, config)
        assert bridge_definitions(qm.path) == []
        assert {"mqtt-in", "mqtt-out"} <= set(installed_bridges())
        first = define_bridge(qm, "b", "mqtt-in", "Q", ok)
        with pytest.raises(BridgeConfigError, match="already defined"):
            define_bridge(qm, "b", "mqtt-in", "Q", ok)
        second = define_bridge(qm, "b", "mqtt-in", "Q", {**ok, "qos": 1}, replace=True)
        assert second.confirm_id == first.confirm_id and bridge_definition(qm.path, "b").config["qos"] == 1
        delete_bridge(qm.path, "b")
        with pytest.raises(BridgeNotFound, match="no bridge named 'b'"):
            delete_bridge(qm.path, "b")


def test_a_kind_whose_package_is_missing_names_the_extra_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plugin registered like the built-in kinds, whose module needs a NATS package that is not there."""
    (tmp_path / "ghost_bridge.py").write_text("import nats.not_installed_here\n")
    dist = tmp_path / "ghost_bridge-0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: ghost-bridge\nVersion: 0\n")
    (dist / "entry_points.txt").write_text("[edgeq.bridges]\nghost-in = ghost_bridge:GhostBridge\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with QueueManager(tmp_path / "dev.db", name="DEV1") as qm:
        qm.define_queue("Q")
        with pytest.raises(BridgeConfigError, match=r"needs a package that is missing .* 'edgeq\[nats\]'"):
            define_bridge(qm, "g", "ghost-in", "Q", {})

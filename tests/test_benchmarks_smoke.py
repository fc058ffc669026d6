"""The benchmark harness runs end to end in smoke mode and reports sane figures.

Runs ``python -m benchmarks --smoke`` as a subprocess (every case, tiny sizes),
then checks the JSON report: every case is there, every measured figure is a
positive finite number, no library failed, edgeq's multi-process drain
delivered every message exactly once, and edgeq's sync (``edgeq serve`` in a
subprocess, ``SyncAgent.push_once`` in a child) put every message on the
server exactly once. Peers missing from the environment are reported "not
installed" rather than failing the test; so is the sync case's MQTT baseline
("not available") when mosquitto is absent: the test passes ``--no-install``,
so it never apt-get installs anything.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent

CASES = {"import", "put_single", "put_batch", "get_confirm", "drain", "depth", "expiry", "check", "memory", "sync"}
HEADLINE = {
    "import": "import_ms",
    "put_single": "ops_per_s",
    "put_batch": "msgs_per_s",
    "get_confirm": "ops_per_s",
    "drain": "msgs_per_s",
    "depth": "median_ms",
    "expiry": "seconds",
    "check": "msgs_per_s",
    "memory": "peak_rss_mb",
    "sync": "msgs_per_s",
}
MQTT_ROWS = ("mqtt", "mqtt-periodic")
ALWAYS_MEASURED = ("edgeq", "raw-sqlite")  # need nothing beyond edgeq's own install


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    where = tmp_path_factory.mktemp("bench")
    out = where / "smoke.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--smoke", "--no-install", "--out", str(out),
         "--workdir", str(where / "work")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    data: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    assert out.with_suffix(".md").exists()
    assert not (where / "work").exists(), "the scratch directory should be removed"
    return data


def _ok(report: dict[str, Any], case: str, lib: str) -> list[dict[str, Any]]:
    return [r for r in report["results"] if r["case"] == case and r["lib"] == lib and r["status"] == "ok"]


def test_every_case_is_reported(report: dict[str, Any]) -> None:
    assert {r["case"] for r in report["results"]} == CASES
    assert report["meta"]["mode"] == "smoke"


def test_no_library_fails(report: dict[str, Any]) -> None:
    failed = [(r["case"], r["lib"], r["note"]) for r in report["results"] if r["status"] == "error"]
    assert failed == []


def test_edgeq_and_raw_sqlite_measure_every_case(report: dict[str, Any]) -> None:
    for case in CASES - {"sync"}:
        for lib in ALWAYS_MEASURED:
            assert _ok(report, case, lib), f"{case}: no result for {lib}"


def test_figures_are_positive_and_finite(report: dict[str, Any]) -> None:
    for r in report["results"]:
        if r["status"] != "ok":
            continue
        value = r["metrics"][HEADLINE[r["case"]]]
        assert math.isfinite(value) and value > 0, (r["case"], r["lib"], value)
        for name, figure in r["metrics"].items():
            assert math.isfinite(figure) and figure >= 0, (r["case"], r["lib"], name, figure)


def test_get_confirm_covers_every_size(report: dict[str, Any]) -> None:
    sizes = set(report["settings"]["sizes"])
    assert {r["size"] for r in _ok(report, "get_confirm", "edgeq")} == sizes
    assert max(sizes) <= 1_000


def test_edgeq_drain_delivers_each_message_exactly_once(report: dict[str, Any]) -> None:
    (drain,) = _ok(report, "drain", "edgeq")
    m = drain["metrics"]
    assert m["duplicates"] == 0 and m["losses"] == 0 and m["left_on_queue"] == 0
    assert m["received"] == m["messages"] == report["settings"]["drain_messages"]


def test_every_library_ran_at_full_durability(report: dict[str, Any]) -> None:
    for r in report["results"]:
        pragmas = r["info"].get("pragmas")
        if pragmas:
            assert pragmas == {"journal_mode": "WAL", "synchronous": "FULL"}, r["lib"]


def test_peers_are_measured_or_marked_not_installed(report: dict[str, Any]) -> None:
    for r in report["results"]:
        if r["lib"] in ("pq-ack", "pq-queue", "litequeue"):
            assert r["status"] in ("ok", "n/a", "not installed"), r


def test_targets(report: dict[str, Any]) -> None:
    assert len(report["targets"]) == 11
    assert {t["status"] for t in report["targets"]} <= {"PASS", "FAIL", "n/a"}
    names = [t["name"] for t in report["targets"]]
    assert "sync throughput (edgeq, exactly once)" in names
    (floor,) = [t for t in report["targets"] if t["name"].startswith("sync throughput")]
    assert floor["status"] in ("PASS", "FAIL")  # measured, whatever this machine's verdict


def test_edgeq_sync_puts_each_message_on_the_server_exactly_once(report: dict[str, Any]) -> None:
    (sync,) = _ok(report, "sync", "edgeq")
    m = sync["metrics"]
    n = report["settings"]["sync_messages"]
    assert m["messages"] == m["server_depth"] == m["stored"] == n
    assert m["duplicates"] == 0 and m["losses"] == 0 and m["device_left"] == 0
    assert m["batches"] >= n / report["settings"]["sync_batch"]
    assert 0 < m["seconds"] < 60 and m["msgs_per_s"] > 0
    assert "--durability full" in sync["info"]["server"]


def test_mqtt_baseline_is_exactly_once_or_not_available(report: dict[str, Any]) -> None:
    rows = [r for r in report["results"] if r["case"] == "sync" and r["lib"] in MQTT_ROWS]
    assert {r["lib"] for r in rows} == set(MQTT_ROWS)
    for r in rows:
        assert r["status"] in ("ok", "not available", "not installed"), r
        if r["status"] == "ok":
            m = r["metrics"]
            assert m["received"] == m["messages"] == report["settings"]["sync_messages"], r["lib"]
            assert m["duplicates"] == 0 and m["losses"] == 0, r["lib"]
            assert m["snapshot_bytes"] > 0, "mosquitto's persistence wrote nothing"


def test_smoke_run_is_quick(report: dict[str, Any]) -> None:
    # < 30 s on the reference 2-core machine; generous here for loaded CI runners.
    assert report["meta"]["duration_s"] < 90

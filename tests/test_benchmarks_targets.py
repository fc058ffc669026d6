"""The benchmark harness's verdicts and its CPU per operation.

The verdicts are judged on hand-made results (``benchmarks.targets.evaluate`` is a pure
function of them): a figure at or above its floor is met, below it missed, and the ratio is
printed in the report. The CPU per operation is measured by real children of the harness.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from benchmarks.cases import runner_of
from benchmarks.config import FULL, SMOKE
from benchmarks.report import render
from benchmarks.results import Result
from benchmarks.runner import ROOT, Context
from benchmarks.targets import Target, evaluate
from benchmarks.timing import timed_loop

SIZES = FULL.replace(sizes=(1_000, 1_000_000))


def _put(lib: str, rate: float, cpu: float) -> Result:
    return Result("put_single", lib, "ok", None, {"ops_per_s": rate, "cpu_us_per_op": cpu, "ops": 100.0})


def _get(lib: str, size: int, rate: float) -> Result:
    return Result("get_confirm", lib, "ok", size, {"ops_per_s": rate, "ops": 100.0})


def _threads(lib: str, threads: int, rate: float) -> Result:
    return Result("put_threads_slowsync", lib, "ok", threads, {"ops_per_s": rate, "slowsync_us": 3000.0})


def _target(targets: list[Target], name: str) -> Target:
    (found,) = [t for t in targets if t.name == name]
    return found


def test_a_put_at_or_above_its_floor_is_met_and_below_it_missed() -> None:
    targets = evaluate([_put("edgeq", 750, 150), _put("raw-sqlite", 1000, 100), _put("pq-ack", 760, 300)],
                       SIZES)
    raw = _target(targets, "single durable put vs raw sqlite3")
    assert (raw.status, raw.ratio, raw.measured) == ("met", 0.75, "0.75x (750 vs 1,000 msg/s)")
    pq = _target(targets, "single durable put vs persist-queue SQLiteAckQueue")
    assert (pq.status, pq.measured) == ("missed", "0.99x (750 vs 760 msg/s)")
    targets = evaluate([_put("edgeq", 740, 150), _put("raw-sqlite", 1000, 100), _put("pq-ack", 740, 300)],
                       SIZES)
    assert _target(targets, "single durable put vs raw sqlite3").status == "missed"
    assert _target(targets, "single durable put vs persist-queue SQLiteAckQueue").status == "met"


def test_cpu_per_put_is_a_ceiling_of_twice_raw_sqlite3() -> None:
    name = "CPU per single durable put vs raw sqlite3"
    cheap = _target(evaluate([_put("edgeq", 1, 200), _put("raw-sqlite", 1, 100)], SIZES), name)
    assert (cheap.status, cheap.ratio, cheap.measured) == ("met", 2.0, "2.00x (200 vs 100 µs)")
    dear = _target(evaluate([_put("edgeq", 1, 250), _put("raw-sqlite", 1, 100)], SIZES), name)
    assert (dear.status, dear.measured) == ("missed", "2.50x (250 vs 100 µs)")


def test_get_confirm_is_judged_at_the_smallest_and_the_largest_backlog() -> None:
    results = [_get("edgeq", 1_000, 900), _get("raw-sqlite", 1_000, 1000), _get("pq-ack", 1_000, 700),
               _get("edgeq", 1_000_000, 700), _get("raw-sqlite", 1_000_000, 1000),
               _get("pq-ack", 1_000_000, 500)]
    targets = evaluate(results, SIZES)
    got = {(t.name, t.status, t.measured) for t in targets if t.name.startswith("get+confirm @ 1")}
    assert got >= {
        ("get+confirm @ 1k vs raw sqlite3", "met", "0.90x (900 vs 1,000 ops/s)"),
        ("get+confirm @ 1k vs persist-queue SQLiteAckQueue", "met", "1.29x (900 vs 700 ops/s)"),
        ("get+confirm @ 1M vs raw sqlite3", "missed", "0.70x (700 vs 1,000 ops/s)"),
        ("get+confirm @ 1M vs persist-queue SQLiteAckQueue", "met", "1.40x (700 vs 500 ops/s)"),
    }


def test_slow_flush_floors_judge_eight_threads_against_one_and_against_raw_sqlite3() -> None:
    results = [_threads("edgeq", 1, 200), _threads("edgeq", 8, 790), _threads("raw-sqlite", 8, 250)]
    targets = evaluate(results, SIZES)
    scaling = _target(targets, "durable single puts, 8 threads vs 1, flush +3,000 µs (edgeq)")
    assert (scaling.status, scaling.measured) == ("missed", "3.95x (790 vs 200 msg/s)")
    raw = _target(targets, "durable single puts, 8 threads, flush +3,000 µs, vs raw sqlite3")
    assert (raw.status, raw.measured) == ("met", "3.16x (790 vs 250 msg/s)")


def test_the_report_prints_each_verdict_with_its_ratio_and_names_what_it_could_not_judge() -> None:
    results = [_put("edgeq", 800, 150), _put("raw-sqlite", 1000, 100)]
    targets = evaluate(results, SIZES)
    text = render(results, targets, {})
    assert ("| single durable put vs raw sqlite3 | ≥ 0.75x 1 row/txn | 0.80x (800 vs 1,000 msg/s) "
            "| **met** |") in text
    assert ("| CPU per single durable put vs raw sqlite3 | ≤ 2x raw sqlite3's cpu/op (1 row/txn) "
            "| 1.50x (150 vs 100 µs) | **met** |") in text
    assert "\n2 of 2 met.\n" in text
    unjudged = text.split("Not judged (a figure they need was not measured in this run): ")[1].split("\n")[0]
    assert "get+confirm @ 1M vs raw sqlite3" in unjudged and "batch put vs raw sqlite3" in unjudged
    section = text.split("\nTargets:\n")[1].split("\nDurability")[0]
    judged = [line for line in section.splitlines() if line.startswith("| ")][2:]  # after the header
    assert len(judged) == 2 and all(line.endswith(("| **met** |", "| **missed** |")) for line in judged)
    (row,) = [line for line in text.splitlines() if line.startswith("| single durable put | edgeq |")]
    assert row.endswith("; cpu/op 150 µs |")


def test_a_timed_loop_reports_the_process_cpu_per_call() -> None:
    def spin() -> None:  # 1 ms of this process's CPU per call
        t = time.process_time()
        while time.process_time() - t < 0.001:
            pass

    m = timed_loop(spin, 20, 30.0)
    assert m["ops"] == 20
    assert 1_000 <= m["cpu_us_per_op"] <= m["seconds"] / m["ops"] * 1e6 * 1.05


def test_the_hot_path_cases_report_cpu_per_operation_for_every_library(tmp_path: Path) -> None:
    settings = SMOKE.replace(sizes=(200,), put_ops=50, get_ops=50, thread_ops=40, thread_counts=(1, 4),
                             batch_size=500)
    ctx = Context(settings=settings, libs=["edgeq", "raw-sqlite"], workdir=tmp_path, log=lambda _: None)
    cases = ("put_single", "put_batch", "get_confirm", "put_threads")
    rows = [r for case in cases for r in runner_of(case)(ctx)]
    assert {(r.case, r.lib) for r in rows} == {(c, lib) for c in cases for lib in ("edgeq", "raw-sqlite")}
    for r in rows:
        assert r.status == "ok", (r.case, r.lib, r.note)
        m = r.metrics
        ops = m["batch_size"] * m["batches"] if r.case == "put_batch" else m["ops"]
        wall_us = ops / m.get("msgs_per_s", m.get("ops_per_s", 0)) * 1e6
        # some CPU per operation, and no more than every core of the machine for the whole time
        assert 0 < m["cpu_us_per_op"] * ops <= wall_us * (os.cpu_count() or 1) * 1.05, (r.case, r.lib, m)


def test_the_slow_flush_case_preloads_the_shim_from_a_relative_workdir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the children run in the repository: a relative path would lead them astray
    settings = SMOKE.replace(thread_ops=16, slowsync_us=2_000)
    ctx = Context(settings=settings, libs=["edgeq", "raw-sqlite"], workdir=Path("work"), log=lambda _: None)
    rows = runner_of("put_threads_slowsync")(ctx)
    assert {(r.lib, r.size) for r in rows} == {(lib, n) for lib in ("edgeq", "raw-sqlite") for n in (1, 8)}
    for r in rows:
        assert r.status == "ok", (r.lib, r.size, r.note)
        assert Path(r.info["ld_preload"]).is_absolute()
        threads = r.size or 0
        assert r.metrics["ops"] == 16 // threads * threads  # each on a fresh queue of its own
        # every flush in the child, its probe's included, waited the shim's 2 ms
        assert r.metrics["fsync_p50_us"] >= 2_000 and r.metrics["slowsync_us"] == 2_000
    assert (tmp_path / "work").is_dir() and not (ROOT / "work").exists()

"""``edgeq check`` on the largest backlog: what a full integrity check of a store costs.

edgeq: ``StoreCheck.run()`` (what ``edgeq check --db PATH`` and ``QueueManager.check()``
run: SQLite's ``PRAGMA integrity_check`` in a thread beside one streaming pass that
verifies every message's checksum and counts every queue), timed in the child; then,
for where the time goes, ``PRAGMA integrity_check`` alone, and the command line itself
(``python -m edgeq check``, a fresh interpreter, wall time). raw sqlite3 (the floor):
``PRAGMA integrity_check`` on its own queue of the same size.

The check only reads, so it runs on the backlog template itself (no 400 MB copy per
round); a store that is not found sound, or not of the expected size, is an error.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.cases.common import run_for_libs
from benchmarks.results import Result
from benchmarks.runner import Context, child_env

__all__ = ["LIBS", "child_check", "run"]

LIBS = ["edgeq", "raw-sqlite"]


def child_check(spec: dict[str, Any]) -> dict[str, Any]:
    """Check the store once (and, for edgeq, its parts and the command line)."""
    expected = int(spec["expected"])
    if spec["lib"] == "raw-sqlite":
        return _raw(Path(spec["dir"]) / "raw.db", expected)
    from edgeq import __version__
    from edgeq.check.checker import StoreCheck
    from edgeq.store.connection import ConnectionFactory

    path = Path(spec["dir"]) / "edgeq.db"
    db = ConnectionFactory(path)
    try:
        start = time.perf_counter()
        report = StoreCheck(db).run()
        seconds = time.perf_counter() - start
        if not report.clean or report.checked != expected:
            raise RuntimeError(f"the check found {report.to_json()} on a sound store of {expected} messages")
        start = time.perf_counter()
        with db.read() as conn:
            conn.execute("PRAGMA integrity_check").fetchall()
        sqlite_s = time.perf_counter() - start
    finally:
        db.close()
    start = time.perf_counter()
    cli = subprocess.run([sys.executable, "-m", "edgeq", "check", "--db", str(path)], env=child_env(),
                         capture_output=True, text=True, check=False)
    cli_s = time.perf_counter() - start
    if cli.returncode != 0:
        raise RuntimeError(f"edgeq check exited {cli.returncode}: {cli.stdout[-500:]} {cli.stderr[-500:]}")
    return {
        "metrics": {"seconds": seconds, "msgs_per_s": expected / seconds, "messages": float(expected),
                    "sqlite_check_s": sqlite_s, "cli_s": cli_s},
        "info": {"version": __version__},
    }


def _raw(path: Path, expected: int) -> dict[str, Any]:
    conn = sqlite3.connect(path)
    try:
        (count,) = conn.execute("SELECT count(*) FROM q").fetchone()
        start = time.perf_counter()
        lines = conn.execute("PRAGMA integrity_check").fetchall()
        seconds = time.perf_counter() - start
    finally:
        conn.close()
    if lines != [("ok",)] or count != expected:
        raise RuntimeError(f"integrity_check said {lines[:3]} on {count} rows (expected {expected})")
    return {"metrics": {"seconds": seconds, "msgs_per_s": expected / seconds, "messages": float(expected)},
            "info": {"version": sqlite3.sqlite_version}}


def run(ctx: Context) -> list[Result]:
    """One child per library on the largest backlog (the template: the check only reads)."""
    s = ctx.settings
    count = s.large + s.get_ops

    def prepare(lib: str) -> tuple[str, dict[str, Any], Path | None]:
        return "check", {"lib": lib, "dir": str(ctx.template(lib, count)), "expected": count}, None

    return run_for_libs(ctx, "check", [lib for lib in LIBS if lib in ctx.libs], prepare, size=count)

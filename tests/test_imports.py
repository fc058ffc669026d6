"""What a fresh process imports (issue 31): ``import edgeq`` and the command line load only what they use.

Behaviour, not timings: the figures are benchmarks/cases/cli_start.py's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import edgeq
from edgeq import QueueManager, __version__

#: Third-party and slow standard modules that only some commands or calls need.
HEAVY = ("sqlite_utils", "importlib.metadata", "cryptography", "httpx", "cbor2", "zstandard", "click")


def _heavy(modules: set[str], heavy: tuple[str, ...] = HEAVY) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(f"{h}.") for h in heavy))


def _added_by(code: str) -> set[str]:
    """The modules ``code`` adds to ``sys.modules`` in a fresh interpreter."""
    probe = (f"import json, sys\nbefore = set(sys.modules)\n{code}\n"
             "print(json.dumps(sorted(set(sys.modules) - before)))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                          timeout=60)
    return set(json.loads(done.stdout.splitlines()[-1]))


def _edgeq(*args: str, cwd: Path, env: dict[str, str] | None = None) -> tuple[str, set[str]]:
    """Run the real ``edgeq`` console script; return its stdout and every module its process imported."""
    script = Path(sys.executable).with_name("edgeq")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "edgeq"]
    env = {k: v for k, v in (env or os.environ).items() if not k.startswith("EDGEQ_")} | {
        "PYTHONPROFILEIMPORTTIME": "1"}  # -X importtime: one stderr line per module imported
    done = subprocess.run([*command, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line.split("|") for line in done.stderr.splitlines() if line.startswith("import time:")]
    return done.stdout, {parts[2].strip() for parts in lines if len(parts) == 3}


def test_import_edgeq_loads_no_heavy_module_and_no_part() -> None:
    added = _added_by("import edgeq")
    assert _heavy(added) == []
    assert sorted(m for m in added if m.startswith("edgeq.")) == []


def test_the_package_names_load_on_first_use() -> None:
    added = _added_by("import edgeq\nassert edgeq.QueueManager.__module__ == 'edgeq.manager'")
    assert "edgeq.manager" in added
    assert edgeq.QueueManager is QueueManager
    star: dict[str, object] = {}
    exec("from edgeq import *", star)
    assert sorted(set(star) & set(edgeq.__all__)) == sorted(edgeq.__all__)
    assert set(edgeq.__all__) <= set(dir(edgeq))
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        edgeq.Nope  # noqa: B018


def test_edgeq_version_loads_no_store_and_no_command(tmp_path: Path) -> None:
    out, imported = _edgeq("--version", cwd=tmp_path)
    assert out == f"edgeq, version {__version__}\n"
    assert "edgeq.cli" in imported  # the probe sees edgeq's own imports
    assert sorted(m for m in imported if m.startswith(("edgeq.store", "edgeq.manager", "edgeq.parts"))) == []
    assert sorted(m for m in imported if m.startswith("edgeq.cli.") and m not in (
        "edgeq.cli.base", "edgeq.cli.options", "edgeq.cli.params", "edgeq.cli.format")) == []
    assert _heavy(imported, HEAVY[:-1]) == []


def test_a_put_into_a_current_store_skips_sqlite_utils_and_stores_the_message(tmp_path: Path) -> None:
    db = tmp_path / "dev.db"
    _, creating = _edgeq("--db", str(db), "--name", "DEV1", "queue", "define", "Q", cwd=tmp_path)
    assert "sqlite_utils" in creating  # a new store's schema is made through sqlite-utils
    out, imported = _edgeq("--db", str(db), "put", "Q", "text", cwd=tmp_path)
    needed = ("cbor2", "click")  # the store encodes rows and fields with cbor2; the CLI is click
    assert _heavy(imported, tuple(h for h in HEAVY if h not in needed)) == []
    # the put's own command module and what it uses, no other command's
    assert sorted(m for m in imported if m.startswith("edgeq.cli.")) == [
        "edgeq.cli.base", "edgeq.cli.consume", "edgeq.cli.format", "edgeq.cli.messages", "edgeq.cli.options",
        "edgeq.cli.params", "edgeq.cli.views"]
    assert sorted(m for m in imported if m.startswith(("edgeq.sync", "edgeq.check", "edgeq.admin"))) == []
    with QueueManager(db) as qm:
        [message] = qm.browse("Q")
    assert (str(message.uid), message.data) == (out.strip(), b"text")

"""A store this user may read but not write (issue 29): the commands that only read it work, and
a write says the store is read-only and why. ``edgeq`` runs as a real process, as a user
chmod binds: ``nobody`` (through setpriv) when the tests run as root, whom chmod does not stop."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from edgeq import Int64, ManualClock, Message, QueueManager
from tests.cli.stores import clean_env

BOUND = 60.0


def as_reader(*args: str) -> subprocess.CompletedProcess[str]:
    """``edgeq ARGS`` run by a user the store's permissions apply to."""
    argv = [sys.executable, "-m", "edgeq.cli", *args]
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.fail("running as root needs setpriv (util-linux) to run edgeq as nobody, whom chmod binds")
        argv = [setpriv, "--reuid=nobody", "--regid=nogroup", "--clear-groups", *argv]
    return subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          env={**clean_env(), "PYTHONDONTWRITEBYTECODE": "1"}, timeout=BOUND)


@pytest.fixture
def folder() -> Iterator[Path]:
    """A directory every user may enter (pytest's tmp_path is root's alone), removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="edgeq-ro-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


# 2020-09-13, the clock the store is written by: its "stale" message has expired since
PAST = 1_600_000_000_000


def make_store(path: Path) -> Path:
    """Two live messages on ORDERS (which counts with a rule) and one expired: a reader may
    not discard it, so it leaves it out."""
    with QueueManager(path, name="DEV1", clock=ManualClock(PAST)) as qm:
        qm.define_queue("ORDERS", rules=["counters"])
        qm.define_remote_queue("OUT", target_qmgr="HOME")
        qm.put("ORDERS", Message(b"first"))
        qm.put("ORDERS", Message(b"stale", expiry=Int64(PAST + 1000)))
        qm.put("ORDERS", Message(b"second"))
    return path


@pytest.fixture(params=["read-only file", "read-only directory"])
def store(request: pytest.FixtureRequest, folder: Path) -> Path:
    """A store with two messages on ORDERS, this user may read but not write: a 0444 file in a
    directory the user may write, or in one only the owner (root) may write."""
    if request.param == "read-only file":
        inner = folder / "mine"
        inner.mkdir()
        if os.geteuid() == 0:
            os.chown(inner, 65534, 65534)  # nobody's directory: SQLite may make its -wal and -shm there
        path = make_store(inner / "dev.db")
    else:
        path = make_store(folder / "dev.db")
        folder.chmod(0o555)
    path.chmod(0o444)
    return path


def test_commands_that_only_read_work_on_a_read_only_store(store: Path) -> None:
    depth = as_reader("--db", str(store), "depth", "ORDERS")
    assert (depth.returncode, depth.stdout) == (0, "2\n"), depth.stderr
    browse = as_reader("--db", str(store), "browse", "ORDERS")
    assert browse.returncode == 0 and "first" in browse.stdout and "second" in browse.stdout, browse.stderr
    assert "stale" not in browse.stdout
    listed = as_reader("--db", str(store), "--json", "queue", "list")
    assert listed.returncode == 0, listed.stderr
    assert {q["name"]: q["depth"] for q in json.loads(listed.stdout)} == {"ORDERS": 2, "OUT": 0}
    status = as_reader("sync", "status", "--db", str(store))
    assert status.returncode == 0 and "OUT" in status.stdout, status.stderr


def test_a_write_to_a_read_only_store_says_so_and_why(store: Path) -> None:
    result = as_reader("--db", str(store), "put", "ORDERS", "third")
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert f"{store} is read-only" in result.stderr, result.stderr
    assert "not writable" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    with QueueManager(store) if os.access(store.parent, os.W_OK) else _copy(store) as qm:
        assert qm.depth("ORDERS") == 2  # the live two (this open discarded the stale one)


def _copy(store: Path) -> QueueManager:
    """A writable copy of the store (as root the original is writable anyway; this keeps it untouched)."""
    copy = Path(tempfile.mkdtemp()) / "copy.db"
    shutil.copy(store, copy)
    return QueueManager(copy)

"""What the command-line tests of edgeq.cli.consume and edgeq.cli.messages share: a store
with queue Q, the CLI invoked on it in-process, and ``edgeq`` as a real process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner, Result

from edgeq import QueueManager
from edgeq.cli import cli
from tests.cli.test_cli import Run


def store_with_q(tmp_path: Path) -> Path:
    """A new store (queue manager DEV1) with the FIFO queue Q."""
    with QueueManager(tmp_path / "dev.db", name="DEV1") as qm:
        qm.define_queue("Q", ordering="fifo")
    return tmp_path / "dev.db"


def runner(db: Path) -> Run:
    """The CLI on ``db``, in-process (no EDGEQ_* from outside)."""

    def _run(*args: str) -> Result:
        return CliRunner().invoke(cli, ["--db", str(db), *args], env={"EDGEQ_DB": None, "EDGEQ_NAME": None},
                                  catch_exceptions=False)

    return _run


def clean_env() -> dict[str, str]:
    """This process's environment without EDGEQ_* variables, for a real ``edgeq`` process."""
    return {k: v for k, v in os.environ.items() if not k.startswith("EDGEQ_")}


def edgeq(db: Path, *args: str) -> subprocess.Popen[bytes]:
    """``edgeq --db DB ARGS`` as a real process (signals reach it as they would from a shell)."""
    return subprocess.Popen([sys.executable, "-m", "edgeq.cli", "--db", str(db), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=clean_env())

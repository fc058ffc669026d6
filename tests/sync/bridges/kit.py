"""Helpers of the bridges' tests: running a store's bridges in this process until the block ends, or
in an ``edgeq bridge run`` process."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from edgeq import QueueManager
from edgeq.sync.bridges.base import CRASH_AT_ENV
from edgeq.sync.bridges.runner import BridgeRunner, BridgeThread
from tests.waits import until

EDGEQ = [sys.executable, "-m", "edgeq"]


@contextmanager
def running(
    qm: QueueManager, names: Sequence[str] | None = None, *, connect: bool = True
) -> Iterator[BridgeRunner]:
    """The bridges of ``qm`` running in threads (connected first, unless ``connect`` is False)."""
    runner = BridgeRunner(qm, names, flush_s=0.05)
    thread = BridgeThread(runner)
    thread.start()
    try:
        if connect:
            until(lambda: all(b.board.state().connected for b in runner.bridges), "the bridges connected", 10)
        yield runner
    finally:
        assert thread.stop(10), "the bridges did not stop"


def bridge_run(db: Path, name: str, log: Path, crash_at: str | None = None,
               log_level: str = "warning") -> subprocess.Popen[bytes]:
    """A real ``edgeq bridge run NAME`` (stderr to ``log``), killing itself (SIGKILL) at step ``crash_at``."""
    env = {k: v for k, v in os.environ.items() if k != CRASH_AT_ENV}
    if crash_at is not None:
        env[CRASH_AT_ENV] = crash_at
    with log.open("ab") as err:
        return subprocess.Popen([*EDGEQ, "--db", str(db), "bridge", "run", name, "--log-level", log_level],
                                env=env, stdout=subprocess.DEVNULL, stderr=err)

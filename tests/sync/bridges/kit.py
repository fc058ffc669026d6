"""Helpers of the bridges' tests: running a store's bridges in this process until the block ends."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from edgeq import QueueManager
from edgeq.sync.bridges.runner import BridgeRunner, BridgeThread
from tests.waits import until


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

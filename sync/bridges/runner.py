"""Running a store's bridges: each in its own thread until stopped (one that fails is started again after
a back-off), their states written to the store when they change (at most every ``flush_s``)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from edgeq.sync.bridges.base import Bridge
from edgeq.sync.bridges.book import bridge_definitions
from edgeq.sync.bridges.errors import BridgeError, BridgeNotFound
from edgeq.sync.bridges.registry import load_bridge_class
from edgeq.sync.bridges.status import StatusBoard, write_states

if TYPE_CHECKING:
    from edgeq.manager import QueueManager

__all__ = ["BridgeRunner", "BridgeThread", "start_bridges"]

log = logging.getLogger("edgeq.bridges")

#: The first and the longest wait before a bridge that failed is started again (seconds).
RESTART_S = (0.5, 60.0)


class BridgeRunner:
    """The bridges of ``qm`` named in ``names`` (all if None), built from their stored definitions."""

    def __init__(
        self, qm: QueueManager, names: Sequence[str] | None = None, *, flush_s: float = 0.25
    ) -> None:
        defined = bridge_definitions(qm.path)
        chosen = [d for d in defined if names is None or d.name in names]
        missing = sorted(set(names or ()) - {d.name for d in defined})
        if missing or not chosen:
            known = ", ".join(d.name for d in defined) or "none"
            raise BridgeNotFound(f"no bridge named {', '.join(missing) or 'any'} is defined in {qm.path} "
                                 f"(defined: {known}): define one with `edgeq bridge define`")
        self.qm, self.flush_s = qm, flush_s
        self.bridges: list[Bridge] = []
        #: the boards of bridges that cannot run (their kind is not installed), each with its error
        self.broken: list[StatusBoard] = []
        for d in chosen:
            board = StatusBoard(d.name, qm.now_ms)
            try:
                self.bridges.append(load_bridge_class(d.kind)(d, qm, board))
            except BridgeError as exc:
                board.error(f"cannot run: {exc}")
                self.broken.append(board)

    def run(self, stop: threading.Event) -> None:
        """Run every bridge until ``stop`` is set, then wait for each to finish its step."""
        threads = [threading.Thread(target=self._guarded, args=(b, stop), name=f"bridge-{b.definition.name}",
                                    daemon=True) for b in self.bridges]
        for thread in threads:
            thread.start()
        for b in self.bridges:
            log.info("bridge %s (%s) running on queue %s", b.definition.name, b.definition.kind,
                     b.definition.queue)
        boards = [b.board for b in self.bridges] + self.broken
        write_states(self.qm.path, boards, self.qm.now_ms())
        try:
            while not stop.wait(self.flush_s):
                if any(board.changed.is_set() for board in boards):
                    for board in boards:
                        board.changed.clear()
                    write_states(self.qm.path, boards, self.qm.now_ms())
        finally:
            for thread in threads:
                thread.join()
            write_states(self.qm.path, boards, self.qm.now_ms())

    @staticmethod
    def _guarded(bridge: Bridge, stop: threading.Event) -> None:
        """Run ``bridge`` until ``stop``: one that fails says why and is started again after a wait
        doubling from ``RESTART_S[0]`` up to ``RESTART_S[1]`` (the shortest again once it ran that long)."""
        first, most = RESTART_S
        delay = first
        while not stop.is_set():
            started = time.monotonic()
            try:
                bridge.run(stop)
                return
            except Exception as exc:  # a bridge that fails stops alone, and says why
                log.exception("bridge %s failed", bridge.definition.name)
                delay = first if time.monotonic() - started >= most else delay
                bridge.board.error(f"failed ({type(exc).__name__}: {exc}); started again in {delay:g} s")
            stop.wait(delay)
            delay = min(delay * 2, most)


class BridgeThread:
    """A :class:`BridgeRunner` in a background thread (the sync daemon's), until :meth:`stop`."""

    def __init__(self, runner: BridgeRunner) -> None:
        self.runner = runner
        self._stop = threading.Event()
        self._thread = threading.Thread(target=runner.run, args=(self._stop,), name="edgeq-bridges",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float | None = None) -> bool:
        """Stop the bridges and wait for each to finish its step; whether they all did in ``timeout``."""
        self._stop.set()
        self._thread.join(timeout)
        return not self._thread.is_alive()


def start_bridges(qm: QueueManager) -> BridgeThread | None:
    """Every bridge of ``qm``'s store running in a :class:`BridgeThread`; None if none is defined."""
    if not bridge_definitions(qm.path):
        return None
    running = BridgeThread(BridgeRunner(qm))
    running.start()
    return running

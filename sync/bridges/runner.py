"""Running a store's bridges: each in its own thread until stopped, their states written to the store
when they change (at most every ``flush_s``) for ``edgeq bridge status``."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from edgeq.sync.bridges.base import Bridge
from edgeq.sync.bridges.book import bridge_definitions
from edgeq.sync.bridges.errors import BridgeNotFound
from edgeq.sync.bridges.registry import load_bridge_class
from edgeq.sync.bridges.status import StatusBoard, write_states

if TYPE_CHECKING:
    from edgeq.manager import QueueManager

__all__ = ["BridgeRunner"]

log = logging.getLogger("edgeq.bridges")


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
        self.bridges: list[Bridge] = [
            load_bridge_class(d.kind)(d, qm, StatusBoard(d.name, qm.now_ms)) for d in chosen
        ]

    def run(self, stop: threading.Event) -> None:
        """Run every bridge until ``stop`` is set, then wait for each to finish its step."""
        threads = [threading.Thread(target=self._guarded, args=(b, stop), name=f"bridge-{b.definition.name}",
                                    daemon=True) for b in self.bridges]
        for thread in threads:
            thread.start()
        for b in self.bridges:
            log.info("bridge %s (%s) running on queue %s", b.definition.name, b.definition.kind,
                     b.definition.queue)
        boards = [b.board for b in self.bridges]
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
        try:
            bridge.run(stop)
        except Exception as exc:  # a bridge that fails stops alone, and says why
            log.exception("bridge %s stopped", bridge.definition.name)
            bridge.board.error(f"stopped: {type(exc).__name__}: {exc}")

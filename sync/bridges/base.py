"""The base class of bridge plugins: one queue and a foreign system, run in a thread until stopped."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Literal

if TYPE_CHECKING:
    from edgeq.manager import QueueManager
    from edgeq.sync.bridges.definition import BridgeDefinition
    from edgeq.sync.bridges.status import StatusBoard

__all__ = ["CRASH_AT_ENV", "Bridge"]

#: A test seam: the step at which a bridge process kills itself (SIGKILL), e.g. ``in.stored``.
CRASH_AT_ENV = "EDGEQ_BRIDGE_CRASH_AT"


class Bridge:
    """A bridge between one queue and a foreign system, run in a thread by the runner until ``stop``."""

    direction: ClassVar[Literal["in", "out"]]

    def __init__(self, definition: BridgeDefinition, qm: QueueManager, board: StatusBoard) -> None:
        self.definition, self.qm, self.board = definition, qm, board
        self._crash_at = os.environ.get(CRASH_AT_ENV)

    @classmethod
    def check_config(cls, config: Mapping[str, Any]) -> dict[str, Any]:
        """The config checked and completed with defaults; :class:`BridgeConfigError` if unusable."""
        raise NotImplementedError

    def run(self, stop: threading.Event) -> None:
        """Move messages until ``stop`` is set; errors are reported on the board, not raised."""
        raise NotImplementedError

    def step(self, name: str) -> None:
        """Mark a step of the delivery protocol (the crash tests' seam: ``EDGEQ_BRIDGE_CRASH_AT``)."""
        if name == self._crash_at:
            os.kill(os.getpid(), signal.SIGKILL)

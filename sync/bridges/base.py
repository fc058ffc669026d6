"""The base class of bridge plugins: one queue and a foreign system, run in a thread until stopped."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Final, Literal

from edgeq.message import Message
from edgeq.sync.bridges.errors import BridgeError
from edgeq.types import DEFAULT_DEAD_LETTER_QUEUE, DLQ_AT_MS, DLQ_QUEUE, DLQ_REASON, DLQ_REFUSAL, FieldValue
from edgeq.uid import MessageUID

if TYPE_CHECKING:
    from edgeq.manager import QueueManager
    from edgeq.results import PutResult
    from edgeq.sync.bridges.definition import BridgeDefinition
    from edgeq.sync.bridges.status import StatusBoard

__all__ = ["CRASH_AT_ENV", "PUT_COUNTERS", "Bridge"]

#: A test seam: the step at which a bridge process kills itself (SIGKILL), e.g. ``in.stored``.
CRASH_AT_ENV = "EDGEQ_BRIDGE_CRASH_AT"
#: The status counter an in-bridge's put outcome adds to (any other: ``forwarded``).
PUT_COUNTERS: Final[Mapping[str, str]] = {"duplicate": "duplicates", "expired": "skipped"}


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

    @property
    def client_id(self) -> str:
        """The name it connects under (``client_id``, else ``edgeq-QMGR-NAME``)."""
        d = self.definition
        return str(d.config.get("client_id") or f"edgeq-{self.qm.name}-{d.name}")

    @property
    def origin(self) -> str:
        """The origin of the uids an in-bridge makes: its name and its definition's confirm id."""
        return f"{self.definition.name}:{self.definition.confirm_id:x}"

    def step(self, name: str) -> None:
        """Mark a step of the delivery protocol (the crash tests' seam: ``EDGEQ_BRIDGE_CRASH_AT``)."""
        if name == self._crash_at:
            os.kill(os.getpid(), signal.SIGKILL)

    def dead_letter(self, put: Callable[[str, Callable[[MessageUID], Message]], PutResult], payload: bytes,
                    received_ms: int, why: str, fields: Mapping[str, FieldValue], what: str) -> None:
        """Put a refused incoming ``what`` on the dead-letter queue (through ``put``, which names its uid),
        saying why; :class:`BridgeError` if it cannot go there either."""
        d = self.definition
        dlq = self.qm.dead_letter_queue()
        header: dict[str, FieldValue] = {DLQ_REASON: "refused", DLQ_QUEUE: d.queue, DLQ_AT_MS: received_ms,
                                         DLQ_REFUSAL: f"bridge {d.name}: {why}"[:1000], **fields}
        if dlq == DEFAULT_DEAD_LETTER_QUEUE and dlq not in self.qm.queue_names():
            self.qm.define_queue(dlq, exist_ok=True)  # made when first needed, as edgeq's own moves do
        result = put(dlq, lambda uid: Message(payload, fields=header, uid=uid, created_ms=received_ms))
        if result.error is not None and result.status != "duplicate":
            raise BridgeError(f"it was refused ({why}) and the dead-letter queue {dlq} refused it too "
                              f"({result.detail})")
        self.board.count("refused")
        self.board.error(f"refused {what}: {why}; it is on {dlq}")

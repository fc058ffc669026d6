"""``dead-letter``: copy expired (or otherwise deleted) messages to a dead-letter queue."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from edgeq.errors import DuplicateMessage, InvalidArgument, QueueNotFound
from edgeq.names import check_name
from edgeq.rules.base import QueueRule, RuleEvent
from edgeq.types import DLQ_AT_MS, DLQ_ORIGINAL_EXPIRY, DLQ_QUEUE, DLQ_REASON, DLQ_WHERE
from edgeq.values import Int64

if TYPE_CHECKING:
    from edgeq.rules.base import RuleHost

__all__ = ["DeadLetterRule"]

_REASONS = ("expired", "got", "confirmed", "deleted", "purged", "overflow", "refused", "backout")


class DeadLetterRule(QueueRule):
    """Copies expired (or otherwise deleted) messages to a dead-letter queue, as MQe's rule does.

    Config (``queue``, ``reasons``, ``keep_expiry``) and the copy's fields: docs/rules.md, 'Built-in rules'.

    >>> import tempfile, os
    >>> from edgeq import QueueManager, Message, Int64
    >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
    >>> qm.define_queue("DLQ"); qm.define_queue("Q", rules=[("dead-letter", {"queue": "DLQ"})])
    >>> _ = qm.put("Q", Message(b"late", expiry=Int64(1)))
    >>> qm.get("DLQ").fields["dlq.where"]
    'add'
    >>> qm.close()
    """

    def __init__(
        self, queue: str, reasons: Sequence[str] = ("expired", "refused"), keep_expiry: bool = False
    ) -> None:
        self.target = check_name(queue, "dead-letter queue name")
        if isinstance(reasons, str) or not all(r in _REASONS for r in reasons):
            raise InvalidArgument(f"reasons must be a list drawn from {list(_REASONS)}, not {reasons!r}")
        if not isinstance(keep_expiry, bool):
            raise InvalidArgument(f"keep_expiry must be true or false, not {keep_expiry!r}")
        self.reasons = frozenset(reasons)
        self.keep_expiry = keep_expiry

    def attach(self, queue_manager: RuleHost, queue: str) -> None:
        """Refuse a dead-letter queue that is this queue or is not defined, then attach."""
        if queue == self.target:
            raise InvalidArgument(f"queue {queue!r} cannot be its own dead-letter queue")
        if self.target not in queue_manager.queue_names():
            raise QueueNotFound(f"dead-letter queue {self.target!r} is not defined: define it first")
        super().attach(queue_manager, queue)

    def on_expired(self, event: RuleEvent) -> None:
        if "expired" in self.reasons:
            self._copy(event, "expired")

    def on_removed(self, event: RuleEvent) -> None:
        if event.reason in self.reasons:
            self._copy(event, event.reason or "deleted")

    def _copy(self, event: RuleEvent, reason: str) -> None:
        message, qm = event.message, self.queue_manager
        if message is None or qm is None:
            return
        fields = dict(message.fields)
        fields.update({DLQ_QUEUE: event.queue, DLQ_REASON: reason, DLQ_AT_MS: Int64(event.at_ms)})
        if event.where is not None:
            fields[DLQ_WHERE] = event.where
        if message.expiry is not None:
            fields[DLQ_ORIGINAL_EXPIRY] = message.expiry
        remaining = message.remaining_expiry_ms
        expiry = Int64(event.at_ms + remaining) if self.keep_expiry and remaining is not None else None
        try:
            qm.put(self.target, message.replace(fields=fields, expiry=expiry, resend=True))
        except DuplicateMessage:
            return  # this event was delivered before a crash: the copy is already there
        qm.apply_stats(event.queue, {"dead_lettered": 1})

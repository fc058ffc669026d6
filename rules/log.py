"""``log``: structured logging of chosen queue events."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from edgeq.errors import InvalidArgument
from edgeq.rules.base import QueueRule, RuleEvent
from edgeq.types import EVENT_KINDS

__all__ = ["LogRule"]

_KINDS = EVENT_KINDS
_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


class LogRule(QueueRule):
    """Logs chosen queue events as one JSON object per line.

    Config ``events``, ``level``, ``logger``: docs/rules.md. The dict is also ``record.edgeq_event``.

    >>> LogRule(events=["expired"], level="warning").level
    30
    """

    def __init__(
        self, events: Sequence[str] = ("expired", "removed"), level: str = "info",
        logger: str = "edgeq.rules.log",
    ) -> None:
        if isinstance(events, str) or not all(e in _KINDS for e in events):
            raise InvalidArgument(f"events must be a list drawn from {list(_KINDS)}, not {events!r}")
        if level not in _LEVELS:
            raise InvalidArgument(f"level must be one of {list(_LEVELS)}, not {level!r}")
        self.events = frozenset(events)
        self.level = _LEVELS[level]
        self.logger = logging.getLogger(logger)

    def _log(self, event: RuleEvent) -> None:
        if event.kind not in self.events:
            return
        record: dict[str, Any] = {
            "event": event.kind, "queue_manager": event.queue_manager, "queue": event.queue,
            "at_ms": event.at_ms, "id": event.id,
        }
        if event.message is not None:
            record.update(uid=str(event.message.uid), bytes=len(event.message.data))
        for name in ("where", "reason", "depth"):
            if getattr(event, name) is not None:
                record[name] = getattr(event, name)
        self.logger.log(self.level, json.dumps(record, sort_keys=True), extra={"edgeq_event": record})

    on_activated = on_added = on_removed = on_expired = _log
    on_duplicate = on_threshold = on_closed = on_queue_deleted = _log

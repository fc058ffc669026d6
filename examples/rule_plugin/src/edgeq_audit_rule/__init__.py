"""An example third-party edgeq rule: an append-only audit trail of queue events."""

from __future__ import annotations

import json
import os
from typing import Any

from edgeq.errors import InvalidArgument
from edgeq.rules import QueueRule
from edgeq.rules.base import RuleEvent

__all__ = ["AuditTrailRule"]


class AuditTrailRule(QueueRule):
    """Appends every queue event to a JSON-lines file (config: ``path``; ``fsync``, default true)."""

    def __init__(self, path: str, fsync: bool = True) -> None:
        if not isinstance(path, str) or not path:
            raise InvalidArgument("audit-trail needs config {'path': '/where/to/write.jsonl'}")
        directory = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(directory):
            raise InvalidArgument(f"audit-trail: directory {directory!r} does not exist")
        self.path = path
        self.fsync = bool(fsync)

    def _write(self, event: RuleEvent) -> None:
        record: dict[str, Any] = {
            "id": event.id,
            "kind": event.kind,
            "queue": event.queue,
            "queue_manager": event.queue_manager,
            "at_ms": event.at_ms,
            "where": event.where,
            "reason": event.reason,
            "depth": event.depth,
            "uid": None if event.message is None else str(event.message.uid),
        }
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")
            if self.fsync:
                fh.flush()
                os.fsync(fh.fileno())

    # One method for every hook: an audit trail wants them all.
    on_activated = on_added = on_removed = on_expired = _write
    on_duplicate = on_threshold = on_closed = on_queue_deleted = _write

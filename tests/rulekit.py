"""Rules for tests, bound by dotted path (``tests.rulekit:Name``) so they persist."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from edgeq.rules import QueueRule
from edgeq.rules.base import RuleEvent


def event_line(event: RuleEvent) -> dict[str, object]:
    return {
        "id": event.id, "kind": event.kind, "queue": event.queue,
        "uid": None if event.message is None else str(event.message.uid),
        "where": event.where, "reason": event.reason, "depth": event.depth,
    }


class FileRecorder(QueueRule):
    """Appends one JSON line per event to ``path`` and fsyncs it, so another process can read it."""

    def __init__(self, path: str) -> None:
        self.path = path

    def _record(self, event: RuleEvent) -> None:
        with open(self.path, "a") as fh:
            fh.write(json.dumps(event_line(event)) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    on_activated = on_added = on_removed = on_expired = _record
    on_duplicate = on_threshold = on_closed = on_queue_deleted = _record


class Blocker(QueueRule):
    """While ``marker`` exists, announces each expiry on stdout and then blocks,
    so a test can SIGKILL the process between commit and delivery."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def on_expired(self, event: RuleEvent) -> None:
        if Path(self.marker).exists():
            print(f"delivering {event.id}", flush=True)
            sys.stdin.readline()  # blocks until killed


class Failing(QueueRule):
    """Raises on every expiry while ``switch`` (a file) exists."""

    def __init__(self, switch: str) -> None:
        self.switch = switch
        self.seen: list[int | None] = []

    def on_expired(self, event: RuleEvent) -> None:
        if Path(self.switch).exists():
            raise RuntimeError(f"failing on purpose for event {event.id}")
        self.seen.append(event.id)


def read_events(path: Path) -> list[dict[str, object]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

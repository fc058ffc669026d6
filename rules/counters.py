"""``counters``: persistent per-queue counters, read with ``qm.queue_stats("Q")``."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from edgeq.rules.base import QueueRule, RuleEvent

__all__ = ["CountersRule"]


def _counted(kind: str, where: str | None, reason: str | None) -> tuple[str, ...]:
    """The counters an event of ``kind`` (at ``where``, for ``reason``) adds one to."""
    if kind == "expired":
        return "expired", f"expired.{where}"
    if kind == "removed":
        return ("got" if reason in ("got", "confirmed") else str(reason),)
    if kind == "duplicate":
        return ("duplicates",)
    return ("added",) if kind == "added" else ()


class CountersRule(QueueRule):
    """Counts what happens on a queue, durably, for ``qm.queue_stats``.

    The counters, and what a crash can miss: docs/rules.md, 'Built-in rules'. No config."""

    def on_events(self, events: Sequence[RuleEvent]) -> None:
        """Count a commit's events in one write: those without an id summed, each durable one by id."""
        if self.queue_manager is None or not events:
            return
        batch: list[tuple[Mapping[str, int], int | None]] = []
        alike: Counter[tuple[str, str | None, str | None]] = Counter()  # the events without an id, by kind
        for e in events:
            if e.id is None:
                alike[e.kind, e.where, e.reason] += 1
            else:
                batch.append((dict.fromkeys(_counted(e.kind, e.where, e.reason), 1), e.id))
        summed: Counter[str] = Counter()
        for key, n in alike.items():
            for name in _counted(*key):
                summed[name] += n
        if summed:
            batch.append((summed, None))
        if batch:
            self.queue_manager.apply_stats_each(events[0].queue, batch, durable=False)

    def _one(self, event: RuleEvent) -> None:
        self.on_events([event])

    on_added = on_removed = on_expired = on_duplicate = _one

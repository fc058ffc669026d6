"""``counters``: persistent per-queue counters, read with ``qm.queue_stats("Q")``."""

from __future__ import annotations

from edgeq.rules.base import QueueRule, RuleEvent

__all__ = ["CountersRule"]


class CountersRule(QueueRule):
    """Counts what happens on a queue, durably, for ``qm.queue_stats``.

    Counters: ``added``, ``got`` (plain and confirmed gets), ``deleted``,
    ``purged``, ``overflow`` (discarded to make room by the queue's ``on_full``),
    and any other removal reason under its name (``transmitted``, ...), ``expired``
    and ``expired.<where>`` for each check point, and ``duplicates``. The
    ``dead-letter`` rule adds
    ``dead_lettered``. Read them with ``qm.queue_stats("Q")`` or
    ``edgeq queue stats Q``.

    Expiry and removal events are counted exactly once even if a crash makes
    edgeq deliver them again (deduplicated by event id); ``added`` is counted
    after the put commits, so a crash in between can miss one. No config.
    """

    def _bump(self, event: RuleEvent, *counters: str) -> None:
        if self.queue_manager is not None:
            self.queue_manager.apply_stats(event.queue, dict.fromkeys(counters, 1), event_id=event.id)

    def on_added(self, event: RuleEvent) -> None:
        """Count ``added``."""
        self._bump(event, "added")

    def on_removed(self, event: RuleEvent) -> None:
        """Count ``got`` for a get (plain or confirmed), else the reason (``deleted``, ``purged``, ``overflow``)."""
        self._bump(event, "got" if event.reason in ("got", "confirmed") else str(event.reason))

    def on_expired(self, event: RuleEvent) -> None:
        """Count ``expired`` and ``expired.<where>``."""
        self._bump(event, "expired", f"expired.{event.where}")

    def on_duplicate(self, event: RuleEvent) -> None:
        """Count ``duplicates``."""
        self._bump(event, "duplicates")

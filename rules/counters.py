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

    Counters: ``added``, ``got`` (plain and confirmed gets), ``deleted``,
    ``purged``, ``overflow`` (discarded to make room by the queue's ``on_full``),
    and any other removal reason under its name (``transmitted``, ...), ``expired``
    and ``expired.<where>`` for each check point, and ``duplicates``. The
    ``dead-letter`` rule adds
    ``dead_lettered``. Read them with ``qm.queue_stats("Q")`` or
    ``edgeq queue stats Q``.

    The events of one commit are counted in one write, made without waiting for
    the disk (the operation's own commit waited): a rule costs a put a small
    transaction, not a flush. Expiry and removal events are counted exactly once,
    even if a crash or a power cut makes edgeq deliver them again (deduplicated by
    event id in the same write). ``added`` and ``duplicates`` are counted after
    the operation commits: a crash in between, or a power cut before the next
    durable commit, can miss them. No config.
    """

    def on_events(self, events: Sequence[RuleEvent]) -> None:
        """Count a commit's events in one write: those without an id summed, each durable one by its id."""
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
        """A single event, as a batch of one."""
        self.on_events([event])

    on_added = on_removed = on_expired = on_duplicate = _one

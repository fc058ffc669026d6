"""The queue manager's administration verbs: rules and their counters, encryption at rest,
the quarantine and ``edgeq check``. Part of :class:`~edgeq.manager.QueueManager`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from edgeq.events.bindings import BindingInfo, RuleBook
from edgeq.events.sink import EventSink
from edgeq.results import QuarantineEntry
from edgeq.sealer import Sealer
from edgeq.store.connection import ConnectionFactory
from edgeq.store.rules import FailureRow

if TYPE_CHECKING:
    from edgeq.check.report import CheckReport
    from edgeq.rules import QueueRule

__all__ = ["AdminVerbs"]


class AdminVerbs:
    """Rules, counters, keys and damage (a mixin of ``QueueManager``: it uses the parts the
    queue manager builds)."""

    _rulebook: RuleBook
    _sealer: Sealer
    _sink: EventSink
    _db: ConnectionFactory

    # -- rules -------------------------------------------------------------------------------
    def add_rule(self, queue: str, rule: QueueRule) -> None:
        """Attach a rule instance to a queue, for the life of this queue manager object.

        Persisted rules, re-attached on every open, are bound by name with
        ``define_queue(..., rules=[...])`` instead.

        >>> from edgeq.rules import QueueRule
        >>> import tempfile, os
        >>> from edgeq import Message, QueueManager
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> qm.define_queue("Q"); qm.add_rule("Q", QueueRule()); qm.close()
        """
        self._rulebook.add_rule(queue, rule)

    def remove_rule(self, queue: str, rule: QueueRule) -> bool:
        """Detach a rule instance added with :meth:`add_rule`; return whether it was attached."""
        return self._rulebook.remove_rule(queue, rule)

    def queue_bindings(self, queue: str) -> list[BindingInfo]:
        """The rules bound to a queue, in the order they run (persisted ones first).

        >>> import tempfile, os
        >>> from edgeq import Message, QueueManager
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> qm.define_queue("Q", rules=["log"]); [b.name for b in qm.queue_bindings("Q")]
        ['log']
        >>> qm.close()
        """
        return self._rulebook.queue_bindings(queue)

    def rule_failures(self, *, parked: bool | None = None) -> list[FailureRow]:
        """Deliveries of durable events that raised: waiting for a retry, or parked.

        >>> import tempfile, os
        >>> from edgeq import Message, QueueManager
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> qm.rule_failures()
        []
        >>> qm.close()
        """
        return self._rulebook.rule_failures(parked=parked)

    def retry_rule_failures(self, *, parked: bool = False, event_id: int | None = None) -> int:
        """Retry failed deliveries now, without waiting for their backoff; with
        ``parked=True`` parked ones get a fresh round of attempts first; with
        ``event_id`` only that event's. Returns how many deliveries succeeded.
        (Due retries also happen by themselves: on later operations, on the
        expiry sweeper's ticks, and when the store is opened.)"""
        return self._rulebook.retry_rule_failures(parked=parked, event_id=event_id)

    def queue_stats(self, queue: str) -> dict[str, int]:
        """A queue's persistent counters (kept by the ``counters`` and ``dead-letter`` rules).

        >>> import tempfile, os
        >>> from edgeq import Message, QueueManager
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> qm.define_queue("Q", rules=["counters"]); _ = qm.put("Q", Message(b"x")); qm.queue_stats("Q")
        {'added': 1}
        >>> qm.close()
        """
        return self._rulebook.queue_stats(queue)

    def apply_stats(
        self, queue: str, increments: Mapping[str, int], *, event_id: int | None = None, durable: bool = True
    ) -> bool:
        """Add to a queue's counters (for rules). With the ``event_id`` of a durable event
        the increment is applied once, however often the event is delivered; returns
        whether it was applied. ``durable=False``: written without waiting for the disk
        (a power cut may lose it; a process crash does not)."""
        return self._rulebook.apply_stats_each(queue, [(increments, event_id)], durable=durable)[0]

    def apply_stats_each(
        self, queue: str, batch: Sequence[tuple[Mapping[str, int], int | None]], *, durable: bool = True
    ) -> list[bool]:
        """:meth:`apply_stats` for a batch of ``(increments, event_id)`` pairs, in one write
        (for a rule's batch hook); returns whether each was applied.

        >>> import tempfile, os
        >>> from edgeq import QueueManager
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1"); qm.define_queue("Q")
        >>> qm.apply_stats_each("Q", [({"seen": 1}, 7), ({"seen": 1}, 7), ({"seen": 2}, None)])
        [True, False, True]
        >>> qm.queue_stats("Q")
        {'seen': 3}
        >>> qm.close()
        """
        return self._rulebook.apply_stats_each(queue, batch, durable=durable)


    # -- encryption at rest ------------------------------------------------------------------
    def rotate_keys(self, queue: str | None = None, *, batch: int = 500) -> int:
        """Re-seal, under the current store key, every row of the encrypted queues (or
        of ``queue``) sealed with another key; return how many rows were re-sealed.

        Works in batches of ``batch`` rows, each its own transaction, so the queues
        stay in use throughout; a crash leaves each row sealed under one key or the
        other (the row says which), and running it again finishes the job. A row
        that fails its integrity check is quarantined.
        """
        return self._sealer.rotate_keys(self._sink, queue, batch=batch)

    def quarantined(self) -> list[QuarantineEntry]:
        """Rows moved to the quarantine because they failed their integrity check."""
        return self._sealer.quarantined(self._db)

    def check(self, *, repair: bool = False) -> CheckReport:
        """Look for damage in the store (``edgeq check``): SQLite's integrity check, every
        message row's checksum in one streaming pass, queue counters, rule bindings,
        rule events, journal rows and the store's identity. ``repair=True`` then
        quarantines damaged rows (rules see them ``removed``, reason ``quarantined``),
        rebuilds indexes and recounts queues; ``report.repairs`` says what was done.
        See :mod:`edgeq.check.checker`.

        >>> import tempfile, os
        >>> from edgeq import Message, QueueManager
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> qm.define_queue("Q"); _ = qm.put("Q", Message(b"x"))
        >>> report = qm.check()
        >>> report.clean, report.checked
        (True, 1)
        >>> qm.close()
        """
        from edgeq.check.checker import StoreCheck  # an operator's tool: not paid for by every `import edgeq`

        checker = StoreCheck(self._db)
        return checker.repair(self._sink) if repair else checker.run()

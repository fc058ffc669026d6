"""The queue manager's rule API (see ``docs/rules.md``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, cast

from edgeq.bindings import BindingInfo
from edgeq.errors import (
    InvalidType,
)
from edgeq.names import check_name
from edgeq.rulestore import FailureRow, RuleTx
from edgeq.store import Tx

if TYPE_CHECKING:
    from edgeq.manager import QueueManager
    from edgeq.rules import QueueRule

from edgeq.qm_base import (
    QueueManagerBase,
)

__all__ = ["RulesMixin"]


class RulesMixin(QueueManagerBase):
    """The rule API of :class:`~edgeq.QueueManager`: in-process rules, bindings, failures, counters."""

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
        from edgeq.rules import QueueRule

        check_name(queue, "queue name")
        if not isinstance(rule, QueueRule):
            raise InvalidType(f"rule must be an edgeq.rules.QueueRule instance, not {type(rule).__name__}")
        with self._db.read() as conn:
            self._queue(Tx(conn), queue)
        rule.attach(cast("QueueManager", self), queue)
        self._rules.add(queue, rule)

    def remove_rule(self, queue: str, rule: QueueRule) -> bool:
        """Detach a rule instance added with :meth:`add_rule`; return whether it was attached."""
        return self._rules.remove(queue, rule)

    def queue_bindings(self, queue: str) -> list[BindingInfo]:
        """The rules bound to a queue, in the order they run (persisted ones first).

        >>> import tempfile, os
        >>> from edgeq import Message, QueueManager
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> qm.define_queue("Q", rules=["log"]); [b.name for b in qm.queue_bindings("Q")]
        ['log']
        >>> qm.close()
        """
        check_name(queue, "queue name")
        with self._db.read() as conn:
            self._queue(Tx(conn), queue)
        return [BindingInfo(b.name, dict(b.config or {}), b.persisted, b.error) for b in self._rules.of(queue)]

    def rule_failures(self, *, parked: bool | None = None) -> list[FailureRow]:
        """Deliveries of durable events that raised: waiting for a retry, or parked.

        >>> import tempfile, os
        >>> from edgeq import Message, QueueManager
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> qm.rule_failures()
        []
        >>> qm.close()
        """
        with self._db.read() as conn:
            return RuleTx(conn).failures(parked=parked)

    def retry_rule_failures(self, *, parked: bool = False, event_id: int | None = None) -> int:
        """Retry failed deliveries now, without waiting for their backoff; with
        ``parked=True`` parked ones get a fresh round of attempts first; with
        ``event_id`` only that event's. Returns how many deliveries succeeded.
        (Due retries also happen by themselves: on later operations, on the
        expiry sweeper's ticks, and when the store is opened.)"""
        if event_id is not None and (isinstance(event_id, bool) or not isinstance(event_id, int)):
            raise InvalidType(f"event_id must be an int, not {event_id!r}")
        if parked:
            with self._write() as tx:
                RuleTx(tx.conn).rearm(self._clock(), event_id)
        return self._rules.retry(force=True, event_id=event_id)

    def queue_stats(self, queue: str) -> dict[str, int]:
        """A queue's persistent counters (kept by the ``counters`` and ``dead-letter`` rules).

        >>> import tempfile, os
        >>> from edgeq import Message, QueueManager
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> qm.define_queue("Q", rules=["counters"]); _ = qm.put("Q", Message(b"x")); qm.queue_stats("Q")
        {'added': 1}
        >>> qm.close()
        """
        check_name(queue, "queue name")
        with self._db.read() as conn:
            self._queue(Tx(conn), queue)
            return RuleTx(conn).stats(queue)

    def apply_stats(self, queue: str, increments: Mapping[str, int], *, event_id: int | None = None) -> bool:
        """Add to a queue's counters (for rules). With the ``event_id`` of a durable event
        the increment is applied once, however often the event is delivered; returns
        whether it was applied."""
        check_name(queue, "queue name")
        for counter, n in increments.items():
            if not isinstance(counter, str) or isinstance(n, bool) or not isinstance(n, int):
                raise InvalidType(f"increments map counter names to ints, not {counter!r}: {n!r}")
        with self._write() as tx:
            return RuleTx(tx.conn).apply_stats(queue, increments, event_id)

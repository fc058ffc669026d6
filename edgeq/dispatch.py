"""Delivering queue events to rules: after commit, in binding order, never lost.

Expiry and removal events on a queue with persisted rule bindings are written to
``rule_events`` inside the transaction that deleted the message, delivered after
it commits, and forgotten in a later transaction. A crash anywhere in between
leaves the event in the table, and it is delivered again when the queue
manager reopens: at-least-once, with a stable id. A hook that raises is logged
with the event id, counted, retried with exponential backoff, and parked after
``retry_limit`` attempts; it never blocks other rules or the queue.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from edgeq.connection import ConnectionFactory
from edgeq.message import Message
from edgeq.rows import to_message
from edgeq.rulestore import EventRow, FailureRow, RuleTx
from edgeq.store import MessageRow
from edgeq.types import Clock, RemovalReason, Where

if TYPE_CHECKING:
    import sqlite3

    from edgeq.rules import QueueRule
    from edgeq.rules.base import RuleEvent
    from edgeq.types import EventKind

__all__ = ["Binding", "Dispatcher", "Pending"]

log = logging.getLogger("edgeq.rules")

#: The kinds recorded durably (MQe: "when a message is deleted, a queue rule is called").
DURABLE_KINDS = frozenset({"expired", "removed"})


@dataclass(slots=True)
class Pending:
    """An event owed to a queue's rules; ``id`` is set once it is recorded durably."""

    kind: EventKind
    queue: str
    at_ms: int
    row: MessageRow | None = None
    message: Message | None = None
    where: Where | None = None
    reason: RemovalReason | None = None
    depth: int | None = None
    id: int | None = None


def _from_stored(row: EventRow) -> Pending:
    """A recorded event, as it was when its transaction committed."""
    detail: Any = row.detail  # a Where for "expired", a RemovalReason for "removed"
    kind: Any = row.kind
    return Pending(
        kind, row.queue, row.at_ms, row=row.row, id=row.id,
        where=detail if kind == "expired" else None,
        reason=detail if kind == "removed" else None,
    )


@dataclass(frozen=True, slots=True)
class Binding:
    """A rule attached to a queue: persisted (``b<id>``) or in-process (``p<n>``)."""

    key: str
    name: str
    rule: QueueRule
    persisted: bool
    config: dict[str, Any] | None = None
    error: str | None = None  # why a persisted binding's plugin could not be loaded


class Dispatcher:
    """The rules of one queue manager and the delivery of events to them."""

    def __init__(
        self, qm_name: str, db: ConnectionFactory, clock: Clock, *, retry_limit: int, retry_base_ms: int,
        unseal: Callable[[str, MessageRow], MessageRow] | None = None,
    ):
        self.qm_name = qm_name
        self._db = db
        self._clock = clock
        self.retry_limit = retry_limit
        self.retry_base_ms = retry_base_ms
        # Rows of encrypted queues are recorded sealed; a rule's copy is unsealed here.
        self._unseal = unseal or (lambda queue, row: row)
        self._bindings: dict[str, tuple[Binding, ...]] = {}
        self._lock = threading.Lock()
        self._delivered: list[int] = []
        self._keys = itertools.count(1)
        self._next_retry_ms: int | None = None
        #: hook calls that raised since this queue manager opened
        self.failure_count = 0

    # -- bindings ------------------------------------------------------------------------

    def of(self, queue: str) -> tuple[Binding, ...]:
        """The queue's bindings, in delivery order (``()`` if it has none)."""
        return self._bindings.get(queue, ())

    def wants(self, queue: str) -> bool:
        """Whether any rule is bound to ``queue``."""
        return queue in self._bindings

    def durable(self, queue: str) -> bool:
        """Whether any of the queue's bindings is persisted (its events are then recorded durably)."""
        return any(b.persisted for b in self.of(queue))

    def set_persisted(self, queue: str, bindings: Iterable[Binding]) -> None:
        """Replace a queue's persisted bindings, keeping its in-process rules after them."""
        with self._lock:
            keep = tuple(b for b in self.of(queue) if not b.persisted)
            self._set(queue, (*bindings, *keep))

    def add(self, queue: str, rule: QueueRule) -> None:
        """Bind an in-process (not persisted) rule to ``queue``, after its other rules."""
        with self._lock:
            binding = Binding(f"p{next(self._keys)}", type(rule).__name__, rule, persisted=False)
            self._set(queue, (*self.of(queue), binding))

    def remove(self, queue: str, rule: QueueRule) -> bool:
        """Unbind an in-process rule (by identity); return whether it was bound."""
        with self._lock:
            before = self.of(queue)
            after = tuple(b for b in before if b.persisted or b.rule is not rule)
            self._set(queue, after)
            return len(after) != len(before)

    def drop(self, queue: str) -> None:
        """Forget every binding of ``queue`` (as when it is deleted)."""
        with self._lock:
            self._bindings.pop(queue, None)

    def _set(self, queue: str, bindings: tuple[Binding, ...]) -> None:
        if bindings:
            self._bindings[queue] = bindings
        else:
            self._bindings.pop(queue, None)

    # -- inside the caller's transaction -------------------------------------------------------

    def record(self, conn: sqlite3.Connection, events: Iterable[Pending]) -> None:
        """Write the durable events among ``events`` in the caller's open transaction."""
        tx = RuleTx(conn)
        for ev in events:
            if ev.kind in DURABLE_KINDS and ev.row is not None and self.durable(ev.queue):
                ev.id = tx.record(ev.queue, ev.kind, ev.where or ev.reason, ev.at_ms, ev.row)

    def flush(self, conn: sqlite3.Connection) -> None:
        """Forget delivered events, piggybacking on the caller's write transaction."""
        with self._lock:
            ids, self._delivered = self._delivered, []
        if ids:
            RuleTx(conn).finish(ids)

    # -- after commit -----------------------------------------------------------------------

    def _event(self, ev: Pending) -> RuleEvent:
        from edgeq.rules.base import RuleEvent

        message = ev.message if ev.message is not None else (
            to_message(self._unseal(ev.queue, ev.row), ev.at_ms) if ev.row is not None else None
        )
        return RuleEvent(
            ev.kind, ev.queue, self.qm_name, ev.at_ms, message, ev.where, ev.reason, ev.depth, ev.id
        )

    def _call(self, binding: Binding, event: RuleEvent) -> str | None:
        """Run one hook; return None, or the error text if it raised."""
        hook: Callable[[RuleEvent], None] = getattr(binding.rule, f"on_{event.kind}")
        try:
            hook(event)
        except Exception as exc:
            self.failure_count += 1
            # MQe: a failing rule leaves the queue to its default behaviour.
            log.exception(
                "rule %s (%s) failed in on_%s on queue %s, event id %s",
                binding.name, binding.key, event.kind, event.queue, event.id,
            )
            return f"{type(exc).__name__}: {exc}"
        return None

    def dispatch(self, events: list[Pending]) -> None:
        """Deliver events to every rule in binding order; record failures of durable ones."""
        failed: list[tuple[int, str, Binding, str]] = []
        for ev in events:
            bindings = self.of(ev.queue)
            if bindings:
                event = self._event(ev)
                for binding in bindings:
                    error = self._call(binding, event)
                    if error is not None and ev.id is not None:
                        failed.append((ev.id, ev.queue, binding, error))
            if ev.id is not None:
                with self._lock:
                    self._delivered.append(ev.id)
        if failed:
            now = self._clock()
            with self._db.write() as conn:
                tx = RuleTx(conn)
                for event_id, queue, binding, error in failed:
                    self._note(tx.fail(event_id, binding.key, binding.name, queue, error, now,
                                       self.retry_limit, self.retry_base_ms))
        if self._next_retry_ms is not None and self._clock() >= self._next_retry_ms:
            self.retry()

    def _note(self, failure: FailureRow) -> None:
        if failure.parked:
            log.error(
                "rule %s parked event %s on queue %s after %d attempts: %s",
                failure.rule, failure.event_id, failure.queue, failure.attempts, failure.last_error,
            )
        elif self._next_retry_ms is None or failure.next_ms < self._next_retry_ms:
            self._next_retry_ms = failure.next_ms

    def recover(self) -> int:
        """Deliver the events a crash left undelivered; return how many."""
        with self._db.read() as conn:
            rows = RuleTx(conn).pending()
            self._next_retry_ms = RuleTx(conn).next_retry_ms()
        self.dispatch([_from_stored(r) for r in rows])
        return len(rows)

    def retry(self, *, force: bool = False, event_id: int | None = None) -> int:
        """Retry failed deliveries that are due (with ``force``: all that are not
        parked, now), optionally only those of ``event_id``; return how many succeeded."""
        now = self._clock()
        with self._db.read() as conn:
            due = RuleTx(conn).failures(parked=False, due_ms=None if force else now)
        if event_id is not None:
            due = [f for f in due if f.event_id == event_id]
        done = 0
        for failure in due:
            binding = next((b for b in self.of(failure.queue) if b.key == failure.binding), None)
            with self._db.read() as conn:
                stored = RuleTx(conn).event(failure.event_id)
            error: str | None
            if binding is None or stored is None:
                error = "the rule binding no longer exists (queue altered or queue manager reopened)"
            else:
                error = self._call(binding, self._event(_from_stored(stored)))
            with self._db.write() as conn:
                tx = RuleTx(conn)
                if error is None:
                    tx.succeed(failure.event_id, failure.binding)
                    done += 1
                else:
                    self._note(tx.fail(failure.event_id, failure.binding, failure.rule, failure.queue, error,
                                       now, self.retry_limit if binding else 1, self.retry_base_ms))
        with self._db.read() as conn:
            self._next_retry_ms = RuleTx(conn).next_retry_ms()
        return done

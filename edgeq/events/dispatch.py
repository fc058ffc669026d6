"""Delivering queue events to rules: after commit, in binding order, never lost.

How (recorded in the deleting transaction, at-least-once, retried, parked): docs/rules.md,
'What edgeq guarantees about delivery'."""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from edgeq.message import Message
from edgeq.store.connection import ConnectionFactory
from edgeq.store.records import MessageRow, NewMessage, as_stored
from edgeq.store.rows import to_message
from edgeq.store.rules import EventRow, FailureRow, RuleTx
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
    """An event owed to a queue's rules; ``id`` is set once it is recorded durably. ``new``: an
    ``added`` event's row as put (copied only if a rule reads it)."""

    kind: EventKind
    queue: str
    at_ms: int
    row: MessageRow | None = None
    message: Message | None = None
    where: Where | None = None
    reason: RemovalReason | None = None
    depth: int | None = None
    id: int | None = None
    new: NewMessage | None = None


def _from_stored(row: EventRow) -> Pending:
    """A recorded event, as it was when its transaction committed."""
    detail: Any = row.detail  # a Where for "expired", a RemovalReason for "removed"
    kind: Any = row.kind
    return Pending(
        kind, row.queue, row.at_ms, row=row.row, id=row.id,
        where=detail if kind == "expired" else None,
        reason=detail if kind == "removed" else None,
    )


def _by_queue(events: Iterable[Pending]) -> dict[str, list[Pending]]:
    out: dict[str, list[Pending]] = {}
    for ev in events:
        out.setdefault(ev.queue, []).append(ev)
    return out


def _batched(rule: object) -> bool:
    from edgeq.rules.base import QueueRule

    hook = getattr(type(rule), "on_events", None)
    return hook is not None and hook is not QueueRule.on_events


def _ids(events: Sequence[RuleEvent]) -> str:
    """The ids of a batch's events, for a log line (a long batch: its first and last)."""
    ids = [str(e.id) for e in events]
    return ", ".join(ids) if len(ids) <= 5 else f"{ids[0]} ... {ids[-1]} ({len(ids)} events)"


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

    # -- bindings ------------------------------------------------------------------------

    def of(self, queue: str) -> tuple[Binding, ...]:
        return self._bindings.get(queue, ())

    def wants(self, queue: str) -> bool:
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

    def _events(self, pending: Iterable[Pending]) -> list[RuleEvent]:
        """The rules' view of ``pending``: a clear row is copied only if a rule reads it; a sealed
        row is opened now, while the store's keys are at hand."""
        from edgeq.rules.base import RuleEvent

        out = []
        for ev in pending:
            row: MessageRow | NewMessage | None = ev.row if ev.new is None else ev.new
            message, load = ev.message, None
            if message is None and row is not None:
                if row.key_id is None:
                    load = partial(self._copy, ev.queue, row, ev.at_ms)
                else:
                    message = self._copy(ev.queue, row, ev.at_ms)
            out.append(RuleEvent(ev.kind, ev.queue, self.qm_name, ev.at_ms, message, ev.where, ev.reason,
                                 ev.depth, ev.id, load=load))
        return out

    def _copy(self, queue: str, row: MessageRow | NewMessage, at_ms: int) -> Message:
        stored = row if isinstance(row, MessageRow) else as_stored(queue, row)
        return to_message(self._unseal(queue, stored), at_ms)

    def _call(self, binding: Binding, hook: str, events: Sequence[RuleEvent]) -> str | None:
        """Run one hook on one event or a batch; return None, or the error text if it raised."""
        try:
            if hook == "events":
                binding.rule.on_events(events)
            else:
                getattr(binding.rule, f"on_{hook}")(events[0])
        except Exception as exc:
            # MQe: a failing rule leaves the queue to its default behaviour.
            log.exception(
                "rule %s (%s) failed in on_%s on queue %s, event id %s",
                binding.name, binding.key, hook, events[0].queue, _ids(events),
            )
            return f"{type(exc).__name__}: {exc}"
        return None

    def _deliver(self, binding: Binding, events: Sequence[RuleEvent]) -> list[tuple[RuleEvent, str]]:
        """Give one rule a commit's events: all at once to a batch hook, else one call per event
        (one failing event does not fail the others). Returns the failed events with their error."""
        if _batched(binding.rule):
            error = self._call(binding, "events", events)
            return [] if error is None else [(event, error) for event in events]
        failed = []
        for event in events:
            error = self._call(binding, event.kind, (event,))
            if error is not None:
                failed.append((event, error))
        return failed

    def dispatch(self, events: list[Pending]) -> None:
        """Deliver events to every rule in binding order; record failures of durable ones."""
        failed: list[tuple[int, str, Binding, str]] = []
        for queue, pending in _by_queue(events).items():
            bindings = self.of(queue)
            if bindings:
                batch = self._events(pending)
                for binding in bindings:
                    failed += [(e.id, queue, binding, error) for e, error in self._deliver(binding, batch)
                               if e.id is not None]
        delivered = [ev.id for ev in events if ev.id is not None]
        if delivered:
            with self._lock:
                self._delivered += delivered
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
        """Retry the failed deliveries that are due (``force``: all not parked), optionally only
        ``event_id``'s; return how many succeeded."""
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
                errors = self._deliver(binding, self._events([_from_stored(stored)]))
                error = errors[0][1] if errors else None
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

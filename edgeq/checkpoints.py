"""MQe's expiry check points that discard in bulk (:class:`ExpiryPolicy`): activation,
deletion, size inquiry and sweeps. The deadline arithmetic is :mod:`edgeq.expiry`;
the per-message check points (add, get, browse) are where messages are put and taken.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from edgeq.args import check_seconds
from edgeq.dispatch import Pending
from edgeq.errors import InvalidArgument
from edgeq.events import EventSink
from edgeq.names import check_name
from edgeq.queues import require_queue
from edgeq.records import QueueRow
from edgeq.store import Tx
from edgeq.types import EventKind, RemovalReason, Where

if TYPE_CHECKING:
    from apscheduler.schedulers.background import BackgroundScheduler

__all__ = ["DISCARD_BATCH", "ExpiryPolicy"]

DISCARD_BATCH = 1000  # expired rows per transaction when rules want copies

log = logging.getLogger("edgeq")


class ExpiryPolicy:
    """MQe's expiry check points that discard in bulk: activation (a queue's first
    use since the queue manager opened), deletion, size inquiry, and sweeps (IBM MQ's
    expiry scan, also in the background). Discards walk the deadline index only;
    their events go through the :class:`~edgeq.events.EventSink`.
    """

    def __init__(self, qm_name: str, sink: EventSink) -> None:
        self.qm_name = qm_name
        self.sink = sink
        self.clock = sink.clock
        self._active: set[str] = set()
        self._active_lock = threading.Lock()
        self._scheduler: BackgroundScheduler | None = None

    def active(self) -> list[str]:
        """The queues activated since the queue manager opened, by name."""
        with self._active_lock:
            return sorted(self._active)

    def forget(self, name: str) -> None:
        """A deleted queue: a queue later defined with its name is activated afresh."""
        with self._active_lock:
            self._active.discard(name)

    def _queue_names(self) -> list[str]:
        with self.sink.db.read() as conn:
            return [q.name for q in Tx(conn).queues()]

    def activate(self, name: str) -> int:
        """Activate a queue: discard every expired message on it, whatever its state.

        Happens by itself the first time a queue is used after the queue manager
        opens (MQe's "queue activated" check point). Returns how many it discarded.
        """
        check_name(name, "queue name")
        with self._active_lock:
            self._active.add(name)
        try:
            count = self.discard_expired(name, "activate")
        except BaseException:
            with self._active_lock:
                self._active.discard(name)
            raise
        if self.sink.rules.wants(name):
            self.sink.dispatch([Pending("activated", name, self.clock())])
        return count

    def touch(self, name: str) -> int:
        """Activate the queue on first reference (a set lookup afterwards); return how
        many expired messages activation discarded."""
        check_name(name, "queue name")
        return 0 if name in self._active else self.activate(name)

    def remove_in_batches(
        self, name: str, select: Callable[[Tx, QueueRow, int], list[int]], kind: EventKind,
        *, where: Where | None = None, reason: RemovalReason | None = None,
    ) -> int:
        """Delete the rows ``select`` picks, a batch per transaction, until none are left.
        Each batch's events are recorded in its transaction and delivered after it."""
        now = self.clock()
        total = 0
        while True:
            with self.sink.write() as tx:
                queue = require_queue(tx, self.qm_name, name)
                rows = tx.delete(queue.id, select(tx, queue, now))
                events = self.sink.events(name, kind, rows, now, where=where, reason=reason)
                self.sink.record(tx, events)
            total += len(rows)
            self.sink.dispatch(events)
            if len(rows) < DISCARD_BATCH:
                return total

    def discard_expired(self, name: str, where: Where) -> int:
        """Discard every expired message of a queue, any state, at check point ``where``.

        Walks the deadline index only, so unexpired messages are never read.
        Without rules it is one DELETE; with rules it goes in batches, each
        batch's rules firing after its commit. A store this user may only read keeps
        them (nothing is discarded): its readers leave them out instead.
        """
        if self.sink.db.read_only:
            return 0
        if not self.sink.observed(name, "expired"):
            with self.sink.write() as tx:
                return tx.delete_expired(require_queue(tx, self.qm_name, name).id, self.clock())
        return self.remove_in_batches(
            name, lambda tx, q, now: tx.expired_ids(q.id, now, DISCARD_BATCH), "expired", where=where
        )

    def depth(self, name: str) -> int:
        """How many messages the queue holds, locked ones included; expired ones are
        purged first (MQe's "size inquired" check point), so none is ever counted.

        One indexed probe plus one row read: constant time at any depth.
        """
        self.touch(name)
        self.discard_expired(name, "depth")
        with self.sink.db.read() as conn:
            queue = require_queue(Tx(conn), self.qm_name, name)
            if self.sink.db.read_only:  # kept, so left out of the count
                return queue.depth - Tx(conn).expired_totals(queue.id, self.clock())[0]
            return queue.depth

    def sweep_expired(self, name: str | None = None) -> int:
        """Discard expired messages now, on ``name`` or every queue; return how many
        (a queue's first use since the open discards at ``activate`` instead)."""
        names = [name] if name is not None else self._queue_names()
        total = 0
        for queue in names:
            # On a queue's first reference, activation discards first (MQe's
            # check point, where="activate"); those count as swept too.
            total += self.touch(queue) + self.discard_expired(queue, "sweep")
        return total

    def start_sweeper(self, interval_s: float) -> None:
        """Sweep every queue every ``interval_s`` seconds in a background thread (APScheduler).

        Stopped by :meth:`stop_sweeper` (the queue manager's ``close`` calls it).
        """
        check_seconds(interval_s, "interval_s")
        if self._scheduler is not None:
            raise InvalidArgument("the expiry sweeper is already running: stop_expiry_sweeper() first")
        from apscheduler.schedulers.background import BackgroundScheduler

        scheduler = BackgroundScheduler(daemon=True)
        scheduler.add_job(
            self._sweep_job, "interval", seconds=interval_s, max_instances=1, coalesce=True, id="edgeq-sweep"
        )
        scheduler.start()
        self._scheduler = scheduler

    def _sweep_job(self) -> None:
        try:
            self.sweep_expired()
            self.sink.rules.retry()  # also retries rule deliveries that are due on an idle queue
        except Exception:
            log.exception("periodic expiry sweep of %s failed", self.qm_name)

    def stop_sweeper(self) -> None:
        """Stop the background sweeper, waiting for a sweep in progress. No-op if none runs."""
        scheduler, self._scheduler = self._scheduler, None
        if scheduler is not None:
            scheduler.shutdown(wait=True)


"""MQe's expiry check points that discard in bulk: activation, deletion, size inquiry and sweeps
(docs/expiry.md). The per-message ones (add, get, browse) are where messages are put and taken."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from edgeq.args import check_seconds
from edgeq.errors import InvalidArgument
from edgeq.events.dispatch import Pending
from edgeq.events.sink import EventSink
from edgeq.names import check_name
from edgeq.queues.attributes import require_queue
from edgeq.store.records import QueueRow
from edgeq.store.tx import Tx
from edgeq.types import EventKind, RemovalReason, Where

__all__ = ["DISCARD_BATCH", "ExpiryPolicy"]

DISCARD_BATCH = 1000  # expired rows per transaction when rules want copies

log = logging.getLogger("edgeq")


class ExpiryPolicy:
    """The bulk expiry check points of one queue manager; discards walk the deadline index only."""

    def __init__(self, qm_name: str, sink: EventSink) -> None:
        self.qm_name = qm_name
        self.sink = sink
        self.clock = sink.clock
        self._active: set[str] = set()
        self._active_lock = threading.Lock()
        self._sweeper: tuple[threading.Thread, threading.Event] | None = None  # the thread, its stop

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
        """Discard every expired message of a queue, whatever its state (MQe's "queue activated");
        return how many."""
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
        """Activate the queue on first reference; return how many expired messages that discarded."""
        if name in self._active:  # a name activated was checked then
            return 0
        check_name(name, "queue name")
        return self.activate(name)

    def remove_in_batches(
        self, name: str, select: Callable[[Tx, QueueRow, int], list[int]], kind: EventKind,
        *, where: Where | None = None, reason: RemovalReason | None = None,
    ) -> int:
        """Delete the rows ``select`` picks, a batch per transaction (events delivered after each)."""
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

        Without rules one DELETE, else in batches; a read-only store keeps them (docs/expiry.md)."""
        if self.sink.db.read_only:
            return 0
        if not self.sink.observed(name, "expired"):
            with self.sink.write() as tx:
                return tx.delete_expired(require_queue(tx, self.qm_name, name).id, self.clock())
        return self.remove_in_batches(
            name, lambda tx, q, now: tx.expired_ids(q.id, now, DISCARD_BATCH), "expired", where=where
        )

    def depth(self, name: str) -> int:
        """How many messages the queue holds, locked ones included, expired ones purged first;
        constant time at any depth."""
        self.touch(name)
        self.discard_expired(name, "depth")
        with self.sink.db.read() as conn:
            queue = require_queue(Tx(conn), self.qm_name, name)
            if self.sink.db.read_only:  # kept, so left out of the count
                return queue.depth - Tx(conn).expired_totals(queue.id, self.clock())[0]
            return queue.depth

    def sweep_expired(self, name: str | None = None) -> int:
        """Discard expired messages now, on ``name`` or every queue; return how many."""
        names = [name] if name is not None else self._queue_names()
        total = 0
        for queue in names:
            # On a queue's first reference, activation discards first (MQe's
            # check point, where="activate"); those count as swept too.
            total += self.touch(queue) + self.discard_expired(queue, "sweep")
        return total

    def start_sweeper(self, interval_s: float) -> None:
        """Sweep every queue ``interval_s`` seconds after the last sweep ended, in a thread of its own.

        Stopped by :meth:`stop_sweeper` (the queue manager's ``close`` calls it).
        """
        check_seconds(interval_s, "interval_s")
        if self._sweeper is not None:
            raise InvalidArgument("the expiry sweeper is already running: stop_expiry_sweeper() first")
        stop = threading.Event()
        thread = threading.Thread(target=self._sweeps, args=(interval_s, stop), name="edgeq-sweeper",
                                  daemon=True)
        self._sweeper = (thread, stop)
        thread.start()

    def _sweeps(self, interval_s: float, stop: threading.Event) -> None:
        while not stop.wait(interval_s):
            try:
                self.sweep_expired()
                self.sink.rules.retry()  # also retries rule deliveries that are due on an idle queue
            except Exception:
                log.exception("periodic expiry sweep of %s failed", self.qm_name)

    def stop_sweeper(self) -> None:
        """Stop the background sweeper, waiting for a sweep in progress. No-op if none runs."""
        sweeper, self._sweeper = self._sweeper, None
        if sweeper is not None:
            sweeper[1].set()
            if sweeper[0] is not threading.current_thread():  # (stopped from a rule the sweep ran)
                sweeper[0].join()


"""The transmitter: the outbound side of remote queues (what the sync agent reads and
deletes once the target confirmed it, and sync-mode delivery inside ``put``), and the
settling of remembered uids that makes exactly-once independent of time
(``docs/protocol.md``, "Exactly once without a time window")."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from edgeq.args import check_count, check_stamp, check_uid
from edgeq.checkpoints import ExpiryPolicy
from edgeq.errors import InvalidType, RemoteUnavailable
from edgeq.events import EventSink
from edgeq.gets import Gets
from edgeq.message import Message
from edgeq.names import check_origin
from edgeq.queues import require_queue
from edgeq.store import Tx
from edgeq.uid import MessageUID

__all__ = ["Transmitter"]


class Transmitter:
    """Remote queues' outbound side for the store whose uids have ``origin``."""

    def __init__(self, qm_name: str, origin: str, sink: EventSink, expiry: ExpiryPolicy, gets: Gets) -> None:
        self.qm_name = qm_name
        self.origin = origin
        self.sink = sink
        self.clock = sink.clock
        self.expiry = expiry
        self.gets = gets
        self._hook: Callable[[str], None] | None = None

    def set_transmitter(self, transmitter: Callable[[str], None] | None) -> None:
        """Register what pushes a sync-mode remote queue inside ``put`` (or None)."""
        if transmitter is not None and not callable(transmitter):
            raise InvalidType("the transmitter must be callable as transmitter(queue_name)")
        self._hook = transmitter

    def transmit_now(self, queue: str, uids: list[MessageUID]) -> None:
        """Sync mode: deliver at once, or take the messages back and raise."""
        if not uids:
            return
        transmitter = self._hook
        reason = "no sync agent is running (nothing called set_transmitter)"
        if transmitter is not None:
            try:
                transmitter(queue)
                reason = "the server did not take every message"
            except Exception as exc:
                reason = f"{type(exc).__name__}: {exc}"
        with self.sink.write() as tx:
            q = require_queue(tx, self.qm_name, queue)
            left = [row.id for row in tx.find_many(q.id, [(uid.origin, uid.stamp) for uid in uids]).values()]
            tx.delete(q.id, left)
        if left:
            raise RemoteUnavailable(
                f"remote queue {queue!r} is synchronous and could not deliver to {q.target_qmgr}: {reason}; "
                "nothing was kept: retry when the server is reachable, or use mode='async'"
            )

    def next_for_transmission(self, queue: str, limit: int) -> list[Message]:
        """The next ``limit`` messages to transmit from a remote queue, in get order."""
        return self.gets.take(queue, check_count(limit), wanted=None, remove=False, confirm_id=None)

    def transmitted(self, queue: str, uids: Sequence[MessageUID | str]) -> int:
        """Delete local copies the target has confirmed, in one transaction; return how many."""
        checked = [check_uid(uid) for uid in uids]
        self.expiry.touch(queue)
        now = self.clock()
        with self.sink.write() as tx:
            q = require_queue(tx, self.qm_name, queue)
            # One indexed SELECT per origin and 500 uids, not one per uid.
            ids = [row.id for row in tx.find_many(q.id, [(uid.origin, uid.stamp) for uid in checked]).values()]
            events = self.sink.events(queue, "removed", tx.delete(q.id, ids), now, reason="transmitted")
            self.sink.record(tx, events)
        self.sink.dispatch(events)
        return len(ids)

    def settled_below(self) -> int:
        """This store's low-water mark (see ``QueueManager.settled_below``)."""
        with self.sink.db.read() as conn:
            return Tx(conn).transmission_low_water(self.origin)

    def settle(self, origin: str, below: int) -> int:
        """Forget ``origin``'s remembered uids below ``below`` (see ``QueueManager.settle``)."""
        check_origin(origin, "settle origin")
        below = check_stamp(below, "below")
        with self.sink.write(durable=False) as tx:  # lost in a power cut: only remembered a little longer
            return tx.settle(origin, below, self.clock())

    def settle_queue(self, queue: str, held: Mapping[str, int]) -> int:
        """Forget what ``queue`` remembers beyond what its sender still holds."""
        if not isinstance(held, Mapping):
            raise InvalidType("held must be a mapping of origin -> lowest stamp held")
        checked = {check_origin(o, "held origin"): check_stamp(s, f"held[{o!r}]") for o, s in held.items()}
        self.expiry.touch(queue)
        with self.sink.write(durable=False) as tx:
            return tx.settle_queue(require_queue(tx, self.qm_name, queue).id, checked, self.clock())

    def held_low_water(self, queue: str) -> dict[str, int]:
        """Per origin, the lowest stamp ``queue`` holds in any state."""
        self.expiry.touch(queue)
        with self.sink.db.read() as conn:
            tx = Tx(conn)
            return tx.held_low_water(require_queue(tx, self.qm_name, queue).id)

    def remembered_count(self, origin: str | None = None) -> int:
        """How many confirmed uids are remembered (of ``origin``, or in all)."""
        if origin is not None:
            check_origin(origin, "origin")
        with self.sink.db.read() as conn:
            return Tx(conn).remembered_count(origin)

"""The transmitter: remote queues' outbound side (read by the sync agent, deleted once confirmed;
sync-mode delivery inside ``put``) and the settling of remembered uids (docs/protocol.md)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from edgeq.args import check_positive, check_stamp, check_uid
from edgeq.errors import InvalidArgument, InvalidType, RemoteUnavailable
from edgeq.events.sink import EventSink
from edgeq.gets import Gets
from edgeq.message import Message
from edgeq.names import check_origin
from edgeq.queues.attributes import require_queue
from edgeq.queues.backout import Undone
from edgeq.queues.checkpoints import ExpiryPolicy
from edgeq.queues.deadletter import DeadLetters
from edgeq.store.syncstate import SyncTx
from edgeq.store.tx import Tx
from edgeq.uid import MessageUID

__all__ = ["DEFAULT_REFUSAL_LIMIT", "Refusal", "SyncOverview", "SyncQueue", "Transmitter"]

#: How many refusals by its target a remote queue's message may meet before it moves to
#: the dead-letter queue (``edgeq.queues.deadletter``; rules see it removed, reason ``refused``),
#: on a queue whose ``refusal_limit`` is None. With the agent's default backoff (1 s
#: doubling up to 300 s per failing queue) that is about 8.5 minutes of a queue refused as
#: a whole.
DEFAULT_REFUSAL_LIMIT: Final = 10
_STATE_KEY = "sync"  # edgeq_meta: "sync" holds the agent's state, "sync.<queue>" each queue's
_MAX_REASON = 500  # characters of a refusal reason kept


@dataclass(frozen=True, slots=True)
class Refusal:
    """What ``Exchange.refused`` did with one message."""

    uid: MessageUID
    count: int  #: how often its target has refused it, this time included
    dead_lettered: bool  #: it reached the limit and moved to the dead-letter queue (rules: ``refused``)
    kept: bool = False  #: it reached the limit, the dead-letter queue could not take it: it stays (logged)


@dataclass(frozen=True, slots=True)
class SyncQueue:
    """A remote or home-server queue as the sync status needs it (``QueueManager.sync_overview``)."""

    name: str
    kind: str  #: ``"remote"`` (pushed) or ``"home"`` (pulled)
    peer: str  #: the target queue manager (remote) or the home server (home)
    target_queue: str | None  #: a remote queue's queue on its target (None for a home-server queue)
    depth: int
    oldest_arrived_ms: int | None  #: when the longest-waiting ready message arrived
    refused_messages: int  #: messages held here that their target has refused
    refusals: int  #: how often, all of them together
    last_refusal: str | None
    last_refusal_ms: int | None
    refusal_limit: int | None  #: refusals before a message is dead-lettered (None for a home-server queue)
    state: dict[str, Any]  #: what the sync agent last recorded for the queue


@dataclass(frozen=True, slots=True)
class SyncOverview:
    """The sync agent's recorded state and every remote and home-server queue, read at once."""

    agent: dict[str, Any]
    queues: list[SyncQueue]
    dead_letter_queue: str  #: the store's dead-letter queue
    dead_letter_depth: int  #: the messages it holds (0 while it is not defined)


class Transmitter:
    """Remote queues' outbound side for the store whose uids have ``origin``."""

    def __init__(self, qm_name: str, origin: str, sink: EventSink, expiry: ExpiryPolicy, gets: Gets) -> None:
        self.qm_name = qm_name
        self.origin = origin
        self.sink = sink
        self.clock = sink.clock
        self.expiry = expiry
        self.gets = gets
        self.dead_letters = DeadLetters(qm_name, sink, gets)
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
        limit = check_positive(limit, "limit")
        taken = self.gets.take(queue, limit, wanted=None, remove=False, confirm_id=None)
        if taken:  # nothing leaves the device that a power cut could still take back
            self.sink.db.flushed()
        return taken

    def transmitted(self, queue: str, uids: Sequence[MessageUID | str]) -> int:
        """Delete local copies the target has confirmed, in one transaction; return how many."""
        checked = [check_uid(uid) for uid in uids]
        self.expiry.touch(queue)
        now = self.clock()
        with self.sink.write() as tx:
            q = require_queue(tx, self.qm_name, queue)
            # One index-only SELECT per origin and 500 uids, not one per uid; the rows are read once,
            # by the delete.
            ids = tx.ids_of(q.id, [(uid.origin, uid.stamp) for uid in checked])
            events = self.sink.events(queue, "removed", tx.delete(q.id, ids), now, reason="transmitted")
            self.sink.record(tx, events)
        self.sink.dispatch(events)
        return len(ids)

    def settled_below(self) -> int:
        with self.sink.db.read() as conn:
            return Tx(conn).transmission_low_water(self.origin)

    def settle(self, origin: str, below: int) -> int:
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

    # -- refusals and sync state -------------------------------------------------------------

    def refused(self, queue: str, refusals: Sequence[tuple[MessageUID | str, str]]) -> list[Refusal]:
        """Count one refusal of each ``(uid, reason)`` of remote queue ``queue``, and move those at
        its ``refusal_limit`` to the dead-letter queue, in one transaction."""
        checked = [(check_uid(uid), _reason(why)) for uid, why in refusals]
        self.expiry.touch(queue)
        now = self.clock()
        undone = Undone()
        with self.sink.write() as tx:
            q = require_queue(tx, self.qm_name, queue)
            if q.kind != "remote":
                raise InvalidArgument(
                    f"{queue!r} is not a remote queue: "
                    "only a remote queue's messages are refused by their target"
                )
            held = tx.find_many(q.id, [(uid.origin, uid.stamp) for uid, _ in checked])
            counted = [(uid, why) for uid, why in checked if (uid.origin, uid.stamp) in held]
            counts: dict[tuple[str, int], int] = {}
            if counted:
                counts = SyncTx(tx.conn).refuse(q.id, [(u.origin, u.stamp, why) for u, why in counted], now)
            limit = DEFAULT_REFUSAL_LIMIT if q.refusal_limit is None else q.refusal_limit
            over = {key for key, count in counts.items() if 0 < limit <= count}
            why = {(u.origin, u.stamp): (counts[(u.origin, u.stamp)], w) for u, w in counted}
            # Their refusal rows go with them (Tx.delete), in this transaction.
            due = [held[key] for key in over]
            moved = self.dead_letters.give_up(tx, q, due, why, now, undone) if due else set()
            self.sink.record(tx, undone.events)
        self.gets.backout.settle(undone)
        self.sink.dispatch(undone.events)
        return [
            Refusal(u, counts[key], held[key].id in moved, key in over and held[key].id not in moved)
            for u, _ in counted for key in [(u.origin, u.stamp)]
        ]

    def sync_overview(self) -> SyncOverview:
        """Every remote and home-server queue with its backlog, refusals and recorded sync
        state, and the agent's, in one read."""
        with self.sink.db.read() as conn:
            tx, sync = Tx(conn), SyncTx(conn)
            stored = {key: json.loads(value) for key, value in sync.meta_items(_STATE_KEY).items()}
            totals = sync.refusal_totals()
            queues = []
            dlq = self.dead_letters.queue_name(tx)
            dlq_depth = 0
            for q in tx.queues():
                if q.name == dlq:
                    dlq_depth = q.depth
                if q.kind not in ("remote", "home"):
                    continue
                messages, refusals, last_ms, last = totals.get(q.id, (0, 0, None, None))
                remote = q.kind == "remote"
                queues.append(SyncQueue(
                    q.name, q.kind, (q.target_qmgr if remote else q.server) or "",
                    (q.target_queue or q.name) if remote else None, q.depth,
                    sync.oldest_arrival(q.id) if remote else None, messages, refusals, last, last_ms,
                    (DEFAULT_REFUSAL_LIMIT if q.refusal_limit is None else q.refusal_limit)
                    if remote else None,
                    stored.get(f"{_STATE_KEY}.{q.name}", {}),
                ))
        return SyncOverview(stored.get(_STATE_KEY, {}), queues, dlq, dlq_depth)

    def record_sync_state(self, states: Mapping[str, Mapping[str, Any] | None]) -> None:
        """Keep the sync agent's state of each queue (``""``: itself) in the store as JSON, for
        ``edgeq sync status``; None forgets one, and states of non-sync queues are dropped."""
        if not isinstance(states, Mapping):
            raise InvalidType("states must map queue names ('' for the agent) to dicts")
        with self.sink.write(durable=False) as tx:  # lost in a power cut: only a status is older
            syncing = {q.name for q in tx.queues() if q.kind in ("remote", "home")}
            sync = SyncTx(tx.conn)
            items: dict[str, str | None] = {
                key: None for key in sync.meta_items(_STATE_KEY + ".")
                if key[len(_STATE_KEY) + 1:] not in syncing
            }
            for name, state in states.items():
                if name and name not in syncing:
                    continue
                key = f"{_STATE_KEY}.{name}" if name else _STATE_KEY
                items[key] = None if state is None else json.dumps(dict(state), separators=(",", ":"))
            sync.set_meta(items)


def _reason(why: object) -> str:
    if not isinstance(why, str):
        raise InvalidType(f"a refusal's reason must be a str, not {type(why).__name__}")
    return why[:_MAX_REASON]

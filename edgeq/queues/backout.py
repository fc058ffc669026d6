"""Undoing assured gets, and moving poison messages to a backout queue (IBM MQ's BOTHRESH/BOQNAME).

What moves, what never does, and the redelivery delay: docs/consumers.md, 'Poison messages'.
:meth:`Backout.move` is the one move of a message between queues (the dead-letter queue's too)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeAlias

from edgeq.encoding.fields import decode_fields, encode_fields
from edgeq.errors import EdgeqError
from edgeq.events.dispatch import Pending
from edgeq.events.sink import EventSink
from edgeq.queues.budget import OverflowTally, Room
from edgeq.sealer import Sealer
from edgeq.store.records import MessageRow, NewMessage, QueueRow, is_intact, stored_size
from edgeq.store.rows import is_expired
from edgeq.store.tx import Tx
from edgeq.types import FieldValue, MessageState, RemovalReason

__all__ = ["Backout", "Header", "Kept", "Undone", "redelivery_at", "redelivery_delay_ms"]

#: A moved message's new fields, from its row and its (plain) fields.
Header: TypeAlias = Callable[[MessageRow, dict[str, FieldValue]], dict[str, FieldValue]]
#: Told of a row that cannot move, and why.
Kept: TypeAlias = Callable[[MessageRow, str], None]

log = logging.getLogger("edgeq")

_READY = int(MessageState.READY)


@dataclass(slots=True)
class Undone:
    """What undoing some assured gets owes once its transaction commits."""

    events: list[Pending] = field(default_factory=list)  # to record in the transaction, then dispatch
    overflowed: dict[str, int] = field(default_factory=dict)  # on_full discards, by queue, to tally
    #: uid -> when each message backed out with a count may be got again (None: at once)
    due: dict[tuple[str, int], int | None] = field(default_factory=dict)


class Backout:
    """Undoes assured gets for a queue manager: backs messages out, or moves them on."""

    def __init__(self, sink: EventSink, sealer: Sealer, overflowed: OverflowTally) -> None:
        self.sink = sink
        self.sealer = sealer
        self.overflowed = overflowed

    def undo_gets(
        self, tx: Tx, q: QueueRow, rows: Sequence[MessageRow], now: int, *, count: bool, delay: bool = True
    ) -> Undone:
        """Undo the assured gets of ``rows`` of ``q`` in ``tx``: ready again after their redelivery
        delay, or moved to ``q``'s backout queue at its threshold. ``count=False``: no backout, no
        delay, no move; ``delay=False``: no delay. The caller records the events, then :meth:`settle`."""
        undone = Undone()
        threshold = q.backout_threshold
        due = [] if not count or threshold is None or q.backout_queue is None else [
            row for row in rows
            if row.backout_count + 1 >= threshold and not is_expired(row, now) and is_intact(q.name, row)
        ]
        moved = self.move(
            tx, q, q.backout_queue, due, now, undone, reason="backout",
            kept=lambda row, why: _kept(q, row, q.backout_queue, why),
        ) if due else set()
        stay = [row for row in rows if row.id not in moved]
        if not count or not delay:
            tx.back_out([row.id for row in stay], count=count)
            return undone
        for row in stay:
            undone.due[(row.origin, row.stamp)] = redelivery_at(q, row.backout_count + 1, row.deadline, now)
        tx.back_out_until((row.id, undone.due[(row.origin, row.stamp)]) for row in stay)
        return undone

    def settle(self, undone: Undone) -> None:
        """After the commit: count the discards made to make room."""
        for queue, discarded in undone.overflowed.items():
            self.overflowed.add(queue, discarded)

    def move(
        self, tx: Tx, q: QueueRow, target: str | None, due: Sequence[MessageRow], now: int, undone: Undone,
        *, reason: RemovalReason, kept: Kept, header: Header | None = None,
    ) -> set[int]:
        """Move what ``due`` (intact rows of ``q``) can to ``target`` in ``tx``, fields rewritten by
        ``header``; ``kept(row, why)`` hears of the others. Returns the ids moved."""
        dst = tx.queue(target) if target is not None else None
        why = _unfit(q, dst, target)
        if dst is None or why is not None:
            for row in due:
                kept(row, why or "it is not defined")
            return set()
        events = undone.events
        room = Room(tx, dst, None, now, self.sink, events)
        first_seq = tx.stamps(now, len(due))  # arrival order on the target queue
        present = tx.find_many(dst.id, [(row.origin, row.stamp) for row in due])  # one SELECT per 500
        taken: list[MessageRow] = []
        rows: list[NewMessage] = []
        try:
            for n, row in enumerate(due):
                if (row.origin, row.stamp) in present:
                    kept(row, "it already holds a message with this uid")
                    continue
                try:
                    new = self._row(q, dst, row, first_seq + n, header)
                except EdgeqError as exc:  # a key missing in this process, a seal that does not open
                    kept(row, str(exc))
                    continue
                refused = room.admit(stored_size(new), new.priority)
                if refused is not None:
                    kept(row, str(refused))
                    continue
                taken.append(row)
                rows.append(new)
        finally:
            room.close()  # the candidates' SELECT ends before anything is written
        if room.discards:
            tx.delete(dst.id, [row.id for row in room.discards])
            undone.overflowed[dst.name] = len(room.discards)
        tx.delete(q.id, [row.id for row in taken])
        tx.insert(dst.id, dst.name, rows)
        # The backout count is not checksummed: the event shows the one this undo added.
        counted = taken if reason != "backout" else [
            row._replace(backout_count=row.backout_count + 1) for row in taken]
        events += self.sink.events(q.name, "removed", counted, now, reason=reason)
        events += self.sink.added(dst.name, rows, now)
        limit = dst.depth_threshold
        if rows and limit is not None and dst.depth < limit <= room.depth and self.sink.rules.wants(dst.name):
            events.append(Pending("threshold", dst.name, now, depth=room.depth))
        return {row.id for row in taken}

    def _row(
        self, src: QueueRow, dst: QueueRow, row: MessageRow, seq: int, header: Header | None
    ) -> NewMessage:
        """``row`` of ``src`` as it becomes on ``dst``: ready, fields by ``header``, sealed for
        ``dst`` if encrypted (a seal binds the queue's name)."""
        plain = row if row.key_id is None else self.sealer.unseal_checked(src.name, row)
        fields = plain.fields if header is None else encode_fields(header(row, decode_fields(plain.fields)))
        new = NewMessage(
            row.origin, row.stamp, _READY, None, row.priority if dst.ordering == "priority" else 0, seq,
            row.priority, row.created_ms, row.arrived_ms, row.expiry_kind, row.expiry_value, row.cap_at,
            row.deadline, row.correlation_id, row.reply_to, row.report, fields, plain.data,
        )
        return self.sealer.seal(dst, new)


def redelivery_delay_ms(first_ms: int, most_ms: int, backouts: int) -> int:
    """How long a message backed out ``backouts`` times waits: ``first_ms``, doubling per backout,
    up to ``most_ms``.

    >>> [redelivery_delay_ms(1_000, 300_000, n) for n in (1, 2, 3, 9, 10, 500)]
    [1000, 2000, 4000, 256000, 300000, 300000]
    """
    return min(first_ms << min(max(backouts, 1) - 1, 40), most_ms)


def redelivery_at(q: QueueRow, backouts: int, deadline: int | None, now: int) -> int | None:
    """When a message of ``q`` backed out at ``now`` may be got again (None: at once); never
    after its ``deadline``."""
    delay = redelivery_delay_ms(q.redelivery_delay_ms, q.max_redelivery_delay_ms, backouts)
    if delay <= 0:
        return None
    return now + delay if deadline is None else min(now + delay, deadline)


def _unfit(src: QueueRow, dst: QueueRow | None, target: str | None) -> str | None:
    """Why ``dst`` can take none of ``src``'s messages (None: it can); a store changed by other
    means may have what define and alter refuse."""
    if dst is None:
        return "it is not defined"
    if dst.id == src.id:
        return "it is the queue itself"
    if src.encryption is not None and dst.encryption is None:
        return "it is not encrypted and this queue is: the message would be stored in clear"
    return None


def _kept(q: QueueRow, row: MessageRow, target: str | None, why: str) -> None:
    log.warning(
        "message %s.%s on queue %r reached its backout threshold (%s) "
        "but cannot move to backout queue %r: %s; "
        "it stays on %r, ready again, and moves at its next backout once that is fixed",
        row.origin, row.stamp, q.name, q.backout_threshold, target, why, q.name,
    )

"""Undoing assured gets, and moving poison messages (IBM MQ's BOTHRESH/BOQNAME).

An undone assured get makes its message ready again with one more backout. On a
queue with a ``backout_threshold``, a message whose count reaches it is moved
instead to the queue's ``backout_queue``, in the undo's own transaction: deleted
here, inserted there (so a crash leaves it on one queue or the other, never both
nor neither), keeping its uid, priority, times, deadline, fields, correlation id
and reply-to; its checksum and seal are made for the new queue, and both queues'
depth and bytes move with it. Rules of the source see it removed for ``backout``;
rules of the backout queue see it added.

A message backed out with a count is also not got again before its redelivery delay
(the queue's ``redelivery_delay_ms``, doubling per backout up to its
``max_redelivery_delay_ms``; never past its deadline), written as its ``not_before`` in
the same UPDATE: a poison message cannot spin a consumer, nor hold up the messages
behind it (docs/consumers.md, "Redelivery delay"). ``count=False`` and
``release_locks`` hand messages back at once.

What is never moved, and why (each is backed out as usual, and the move is tried
again at its next backout): an expired message (it expires as usual, at the next
check point); a row failing its checksum (a move would give damaged data a valid
checksum; the next read quarantines it); and, logged as a warning, a message the
backout queue cannot take: gone, encrypted data into a clear queue, a copy of the
same uid already there, or full (its ``max_depth``/``max_bytes``, applied by its
``on_full`` exactly as for a put; the store budget is not: a move adds nothing to
the store).

:meth:`Backout.move` is the one move of a message between queues: the dead-letter queue
(``edgeq.deadletter``) uses it too, with a header of fields added or removed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeAlias

from edgeq.budget import OverflowTally, Room
from edgeq.codec import decode_fields, encode_fields
from edgeq.dispatch import Pending
from edgeq.errors import EdgeqError
from edgeq.events import EventSink
from edgeq.records import MessageRow, NewMessage, QueueRow, is_intact, stored_size
from edgeq.rows import is_expired
from edgeq.sealer import Sealer
from edgeq.store import Tx
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
    """Undoes assured gets for a queue manager: backs messages out, or moves them on.
    Discards a backout queue's ``on_full`` makes are counted in ``overflowed``."""

    def __init__(self, sink: EventSink, sealer: Sealer, overflowed: OverflowTally) -> None:
        self.sink = sink
        self.sealer = sealer
        self.overflowed = overflowed

    def undo_gets(
        self, tx: Tx, q: QueueRow, rows: Sequence[MessageRow], now: int, *, count: bool, delay: bool = True
    ) -> Undone:
        """Undo the assured gets of ``rows`` (rows of ``q`` locked by gets) in ``tx``:
        each is ready again with one more backout and got again only after its
        redelivery delay (``delay=False``: at once; ``count=False``: neither, and never
        moved), or moved to ``q``'s backout queue if that reaches its threshold. The
        caller records :attr:`Undone.events` in ``tx`` and calls :meth:`settle` after."""
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
        """Move what ``due`` (intact rows of ``q``) can to queue ``target`` in ``tx``, their
        fields rewritten by ``header`` if given (the dead-letter queue's use); ``kept(row,
        why)`` is told of each that cannot move. Rules of ``q`` see the moved ones removed
        for ``reason``. Returns the ids moved; the caller records ``undone.events``."""
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
        """The row ``row`` of ``src`` becomes on ``dst``: the same message, ready, its
        fields rewritten by ``header`` if given, sealed for ``dst`` if it is encrypted
        (a seal binds the queue's name)."""
        plain = row if row.key_id is None else self.sealer.unseal_checked(src.name, row)
        fields = plain.fields if header is None else encode_fields(header(row, decode_fields(plain.fields)))
        new = NewMessage(
            row.origin, row.stamp, _READY, None, row.priority if dst.ordering == "priority" else 0, seq,
            row.priority, row.created_ms, row.arrived_ms, row.expiry_kind, row.expiry_value, row.cap_at,
            row.deadline, row.correlation_id, row.reply_to, row.report, fields, plain.data,
        )
        return self.sealer.seal(dst, new)


def redelivery_delay_ms(first_ms: int, most_ms: int, backouts: int) -> int:
    """How long a message backed out ``backouts`` times waits before it is got again:
    ``first_ms``, doubling with each further backout, up to ``most_ms`` (0: no wait).

    >>> [redelivery_delay_ms(1_000, 300_000, n) for n in (1, 2, 3, 9, 10, 500)]
    [1000, 2000, 4000, 256000, 300000, 300000]
    """
    return min(first_ms << min(max(backouts, 1) - 1, 40), most_ms)


def redelivery_at(q: QueueRow, backouts: int, deadline: int | None, now: int) -> int | None:
    """When a message of ``q`` backed out (now ``backouts`` times) at ``now`` may be got
    again (None: at once): never after its ``deadline``, so it expires as usual."""
    delay = redelivery_delay_ms(q.redelivery_delay_ms, q.max_redelivery_delay_ms, backouts)
    if delay <= 0:
        return None
    return now + delay if deadline is None else min(now + delay, deadline)


def _unfit(src: QueueRow, dst: QueueRow | None, target: str | None) -> str | None:
    """Why ``dst`` can take none of ``src``'s messages (None: it can). define and alter
    refuse these; a store changed by other means may still have them."""
    if dst is None:
        return "it is not defined"
    if dst.id == src.id:
        return "it is the queue itself"
    if src.encryption is not None and dst.encryption is None:
        return "it is not encrypted and this queue is: the message would be stored in clear"
    return None


def _kept(q: QueueRow, row: MessageRow, target: str | None, why: str) -> None:
    log.warning(
        "message %s.%s on queue %r reached its backout threshold (%s) but cannot move to backout queue %r: %s; "
        "it stays on %r, ready again, and moves at its next backout once that is fixed",
        row.origin, row.stamp, q.name, q.backout_threshold, target, why, q.name,
    )

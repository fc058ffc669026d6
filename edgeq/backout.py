"""Undoing assured gets, and moving poison messages (IBM MQ's BOTHRESH/BOQNAME).

An undone assured get makes its message ready again with one more backout. On a
queue with a ``backout_threshold``, a message whose count reaches it is moved
instead to the queue's ``backout_queue``, in the undo's own transaction: deleted
here, inserted there (so a crash leaves it on one queue or the other, never both
nor neither), keeping its uid, priority, times, deadline, fields, correlation id
and reply-to; its checksum and seal are made for the new queue, and both queues'
depth and bytes move with it. Rules of the source see it removed for ``backout``;
rules of the backout queue see it added.

What is never moved, and why (each is backed out as usual, and the move is tried
again at its next backout): an expired message (it expires as usual, at the next
check point); a row failing its checksum (a move would give damaged data a valid
checksum; the next read quarantines it); and, logged as a warning, a message the
backout queue cannot take: gone, encrypted data into a clear queue, a copy of the
same uid already there, or full (its ``max_depth``/``max_bytes``, applied by its
``on_full`` exactly as for a put; the store budget is not: a move adds nothing to
the store).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from edgeq.budget import OverflowTally, Room
from edgeq.dispatch import Pending
from edgeq.errors import EdgeqError
from edgeq.events import EventSink
from edgeq.rows import is_expired
from edgeq.sealer import Sealer
from edgeq.store import MessageRow, NewMessage, QueueRow, Tx, as_stored, is_intact, stored_size
from edgeq.types import MessageState

__all__ = ["Backout", "Undone"]

log = logging.getLogger("edgeq")

_READY = int(MessageState.READY)


@dataclass(slots=True)
class Undone:
    """What undoing some assured gets owes once its transaction commits."""

    events: list[Pending] = field(default_factory=list)  # to record in the transaction, then dispatch
    overflowed: dict[str, int] = field(default_factory=dict)  # on_full discards, by queue, to tally


class Backout:
    """Undoes assured gets for a queue manager: backs messages out, or moves them on.
    Discards a backout queue's ``on_full`` makes are counted in ``overflowed``."""

    def __init__(self, sink: EventSink, sealer: Sealer, overflowed: OverflowTally) -> None:
        self.sink = sink
        self.sealer = sealer
        self.overflowed = overflowed

    def undo_gets(self, tx: Tx, q: QueueRow, rows: Sequence[MessageRow], now: int, *, count: bool) -> Undone:
        """Undo the assured gets of ``rows`` (rows of ``q`` locked by gets) in ``tx``:
        each is ready again with one more backout (``count=False``: none, and never
        moved), or moved to ``q``'s backout queue if that reaches its threshold. The
        caller records :attr:`Undone.events` in ``tx`` and calls :meth:`settle` after."""
        undone = Undone()
        threshold = q.backout_threshold
        due = [] if not count or threshold is None or q.backout_queue is None else [
            row for row in rows
            if row.backout_count + 1 >= threshold and not is_expired(row, now) and is_intact(q.name, row)
        ]
        moved = self._move(tx, q, q.backout_queue, due, now, undone) if due else set()
        tx.back_out([row.id for row in rows if row.id not in moved], count=count)
        return undone

    def settle(self, undone: Undone) -> None:
        """After the commit: count the discards made to make room."""
        for queue, discarded in undone.overflowed.items():
            self.overflowed.add(queue, discarded)

    def _move(
        self, tx: Tx, q: QueueRow, target: str | None, due: Sequence[MessageRow], now: int, undone: Undone
    ) -> set[int]:
        """Move what ``due`` can to queue ``target``; return the ids moved."""
        dst = tx.queue(target) if target is not None else None
        why = _unfit(q, dst, target)
        if dst is None or why is not None:
            for row in due:
                _kept(q, row, target, why or "it is not defined")
            return set()
        events = undone.events
        room = Room(tx, dst, None, now, self.sink, events)
        first_seq = tx.stamps(now, len(due))  # arrival order on the backout queue
        taken: list[MessageRow] = []
        rows: list[NewMessage] = []
        try:
            for n, row in enumerate(due):
                if tx.find(dst.id, row.origin, row.stamp) is not None:
                    _kept(q, row, dst.name, "it already holds a message with this uid")
                    continue
                try:
                    new = self._row(q, dst, row, first_seq + n)
                except EdgeqError as exc:  # a key missing in this process, a seal that does not open
                    _kept(q, row, dst.name, str(exc))
                    continue
                refused = room.admit(stored_size(new), new.priority)
                if refused is not None:
                    _kept(q, row, dst.name, str(refused))
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
        counted = [row._replace(backout_count=row.backout_count + 1) for row in taken]  # not checksummed
        events += self.sink.events(q.name, "removed", counted, now, reason="backout")
        events += self.sink.events(dst.name, "added", [as_stored(dst.name, row) for row in rows], now)
        limit = dst.depth_threshold
        if rows and limit is not None and dst.depth < limit <= room.depth and self.sink.rules.wants(dst.name):
            events.append(Pending("threshold", dst.name, now, depth=room.depth))
        return {row.id for row in taken}

    def _row(self, src: QueueRow, dst: QueueRow, row: MessageRow, seq: int) -> NewMessage:
        """The row ``row`` of ``src`` becomes on ``dst``: the same message, ready, sealed
        for ``dst`` if it is encrypted (a seal binds the queue's name)."""
        plain = row if row.key_id is None else self.sealer.unseal_checked(src.name, row)
        new = NewMessage(
            row.origin, row.stamp, _READY, None, row.priority if dst.ordering == "priority" else 0, seq,
            row.priority, row.created_ms, row.arrived_ms, row.expiry_kind, row.expiry_value, row.cap_at,
            row.deadline, row.correlation_id, row.reply_to, row.report, plain.fields, plain.data,
        )
        return self.sealer.seal(dst, new)


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

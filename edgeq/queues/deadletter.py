"""The dead-letter queue: where a message goes that cannot be delivered (IBM MQ's DLQ).

What moves there, its header, and the operator's verbs: docs/protocol.md, 'Dead-letter queue'."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from edgeq.args import check_confirm_id, check_uid
from edgeq.encoding.fields import decode_fields
from edgeq.errors import ConfirmIdNotFound, EdgeqError, InvalidType, MessageNotFound
from edgeq.events.sink import EventSink
from edgeq.gets import Gets
from edgeq.message import Message
from edgeq.names import check_name
from edgeq.queues.attributes import require_queue
from edgeq.queues.backout import Backout, Kept, Undone
from edgeq.sealer import Sealer
from edgeq.store.journal import JournalKind, JournalTx, entry_row
from edgeq.store.records import MessageRow, QueueRow, is_intact
from edgeq.store.rows import is_expired, plain_size
from edgeq.store.syncstate import SyncTx
from edgeq.store.tx import Tx
from edgeq.types import (
    DEAD_LETTER_QUEUE_KEY,
    DEFAULT_DEAD_LETTER_QUEUE,
    DLQ_AT_MS,
    DLQ_ATTEMPTS,
    DLQ_PREFIX,
    DLQ_QUEUE,
    DLQ_REASON,
    DLQ_REFUSAL,
    FieldValue,
    MessageState,
    RemovalReason,
)
from edgeq.uid import MessageUID
from edgeq.values import Int32, Int64

__all__ = ["DeadLetters", "Resent"]

log = logging.getLogger("edgeq")

_DEFINED = {"default_priority": 4, "ordering": "priority"}  # the default one's attributes, as define_queue's
_READY, _GET_LOCKED = int(MessageState.READY), int(MessageState.GET_LOCKED)
#: The longest ``dlq.refusal`` kept.
_MAX_REFUSAL = 1000


@dataclass(frozen=True, slots=True)
class Resent:
    """What ``QueueManager.dlq_resend`` did: the uids moved back, and those kept (with why)."""

    moved: list[MessageUID] = field(default_factory=list)
    kept: list[tuple[MessageUID, str]] = field(default_factory=list)


class DeadLetters:
    """The dead-letter queue of one queue manager: moving given-up messages there; the operator's verbs."""

    def __init__(self, qm_name: str, sink: EventSink, gets: Gets) -> None:
        self.qm_name = qm_name
        self.sink = sink
        self.gets = gets
        self.sealer: Sealer = gets.sealer
        self.backout: Backout = gets.backout

    # -- which queue -----------------------------------------------------------------------

    def name(self) -> str:
        """The dead-letter queue's name (the default unless the operator named one)."""
        with self.sink.db.read() as conn:
            return _name(Tx(conn))

    def current(self) -> tuple[str, bool]:
        """The dead-letter queue's name, and whether it is defined."""
        with self.sink.db.read() as conn:
            tx = Tx(conn)
            name = _name(tx)
            return name, tx.queue(name) is not None

    @staticmethod
    def queue_name(tx: Tx) -> str:
        return _name(tx)

    def set_name(self, name: str | None) -> None:
        """Name the store's dead-letter queue (None: the default); until it is defined, given-up
        messages stay where they are."""
        if name is not None:
            check_name(name, "dead-letter queue name")
        with self.sink.write() as tx:
            SyncTx(tx.conn).set_meta(
                {DEAD_LETTER_QUEUE_KEY: None if name == DEFAULT_DEAD_LETTER_QUEUE else name}
            )

    # -- giving up -------------------------------------------------------------------------

    def give_up(
        self, tx: Tx, q: QueueRow, rows: Sequence[MessageRow], why: Mapping[tuple[str, int], tuple[int, str]],
        now: int, undone: Undone, told: Kept | None = None,
    ) -> set[int]:
        """Move ``rows`` of ``q`` (refused ``why[uid] = (count, last reason)``) to the dead-letter
        queue in ``tx``; return the ids moved. The others stay, logged (and ``told``)."""
        target = _name(tx)
        if target == DEFAULT_DEAD_LETTER_QUEUE and tx.queue(target) is None:
            encryption = q.encryption if q.encryption is not None else self.sealer.default_encryption
            tx.insert_queue(target, {**_DEFINED, "encryption": encryption}, now)
            log.info("made dead-letter queue %s for messages of %r that cannot be delivered", target, q.name,
                     extra={"event": "dlq-defined", "queue": target})
        movable = [row for row in rows if is_intact(q.name, row) and not is_expired(row, now)]

        def header(row: MessageRow, fields: dict[str, FieldValue]) -> dict[str, FieldValue]:
            count, reason = why[(row.origin, row.stamp)]
            return {**fields, DLQ_REASON: "refused", DLQ_QUEUE: q.name, DLQ_REFUSAL: reason,
                    DLQ_ATTEMPTS: Int32(count), DLQ_AT_MS: Int64(now)}

        def kept(row: MessageRow, reason: str) -> None:
            _kept(q, row, why[(row.origin, row.stamp)][0], target, reason)
            if told is not None:
                told(row, reason)

        moved = self.backout.move(tx, q, target, movable, now, undone, reason="refused", header=header,
                                  kept=kept)
        self._journal(tx, "dead-lettered", q.name, [r for r in movable if r.id in moved], now, "refused")
        return moved

    def give_up_gets(
        self, queue: str, confirm_id: int, refusals: Sequence[tuple[MessageUID | str, str]]
    ) -> list[tuple[MessageUID, str]]:
        """Move messages got under ``confirm_id`` that cannot be delivered (``(uid, why)``) to the
        dead-letter queue, in one transaction; those that cannot move are undone, a backout counted,
        and returned with why."""
        confirm_id = check_confirm_id(confirm_id)
        checked = {(u.origin, u.stamp): why for u, why in ((check_uid(u), w) for u, w in refusals)}
        if any(not isinstance(why, str) for why in checked.values()):
            raise InvalidType("a refusal's reason must be a str")
        now = self.sink.clock()
        undone = Undone()
        stayed: list[tuple[MessageUID, str]] = []
        with self.sink.write() as tx:
            q = require_queue(tx, self.qm_name, queue)
            rows = [r for r in tx.find_by_confirm_id(q.id, confirm_id)
                    if r.state == _GET_LOCKED and (r.origin, r.stamp) in checked]
            if not rows:
                raise ConfirmIdNotFound(f"none of the {len(checked)} uid(s) given is locked on queue "
                                        f"{queue!r} under confirm id {confirm_id}: already confirmed, "
                                        "undone, or expired")
            why = {(r.origin, r.stamp): (r.backout_count + 1, checked[(r.origin, r.stamp)][:_MAX_REFUSAL])
                   for r in rows}
            moved = self.give_up(tx, q, rows, why, now, undone,
                                 told=lambda row, reason: stayed.append((_uid(row), f"{reason}: undone, a "
                                                                         "backout counted")))
            rest = [r for r in rows if r.id not in moved]
            told = {u for u, _ in stayed}
            stayed += [(_uid(r), "it has expired or fails its integrity check: undone") for r in rest
                       if _uid(r) not in told]  # give_up leaves those out unlogged
            locked = {(r.origin, r.stamp) for r in rows}
            stayed += [(MessageUID(*key), f"it is not locked under confirm id {confirm_id} (confirmed, "
                        "undone or expired already)") for key in checked if key not in locked]
            if rest:
                back = self.backout.undo_gets(tx, q, rest, now, count=True)
                undone.events += back.events
                for name, n in back.overflowed.items():
                    undone.overflowed[name] = undone.overflowed.get(name, 0) + n
            self.sink.record(tx, undone.events)
        self.backout.settle(undone)
        self.sink.dispatch(undone.events)
        return stayed

    def _journal(
        self, tx: Tx, kind: JournalKind, queue: str, rows: Iterable[MessageRow], now: int,
        reason: RemovalReason,
    ) -> None:
        """Journal rows moved to the dead-letter queue (``dead-lettered``) or deleted from it
        (``discarded``), the reason in ``check_point``: a device reports them with its expiries."""
        side = self.sink.journal
        if side is None:
            return
        JournalTx(tx.conn).add(
            entry_row(kind, side, now, queue, f"{row.origin}.{row.stamp}", row.origin, check_point=reason,
                      size=plain_size(row), created_ms=row.created_ms, arrived_ms=row.arrived_ms)
            for row in rows
        )

    # -- the operator's verbs ----------------------------------------------------------------

    def browse(self, queue: str | None, limit: int | None) -> list[Message]:
        """The dead-letter queue's messages in get order (only those that left ``queue``, if
        given); none while it is not defined."""
        name, defined = self.current()
        wanted = None if queue is None else {DLQ_QUEUE: queue}
        return self.gets.browse(name, filter=wanted, limit=limit) if defined else []

    def delete(self, uids: Sequence[MessageUID | str] | None) -> int:
        """Delete messages of the dead-letter queue (``uids``, or all) in one transaction, each
        journaled ``discarded``; a damaged row is quarantined instead. Returns how many."""
        checked = _checked_uids(uids)
        now = self.sink.clock()
        with self.sink.write() as tx:
            dlq = tx.queue(_name(tx))
            if dlq is None or not dlq.depth:
                if checked:
                    raise MessageNotFound(
                        f"the dead-letter queue {_name(tx)!r} holds no message {checked[0]}")
                return 0
            rows = self._chosen(tx, dlq, checked)
            damaged = [row for row in rows if not is_intact(dlq.name, row)]
            events = [ev for row in damaged for ev in self.sink.quarantine(tx, dlq, row, now)]
            removed = tx.delete(dlq.id, [row.id for row in rows if row not in damaged])
            events += self.sink.events(dlq.name, "removed", removed, now, reason="deleted")
            self.sink.record(tx, events)
            self._journal(tx, "discarded", dlq.name, removed, now, "deleted")
        self.sink.dispatch(events)
        return len(removed)

    @staticmethod
    def _chosen(tx: Tx, dlq: QueueRow, uids: list[MessageUID] | None) -> list[MessageRow]:
        """The dead-letter queue's rows of ``uids`` (each must be there), or all of them."""
        if uids is None:
            return tx.rows(tx.ids(dlq.id, dlq.depth))
        found = tx.find_many(dlq.id, [(uid.origin, uid.stamp) for uid in uids])
        missing = [str(uid) for uid in uids if (uid.origin, uid.stamp) not in found]
        if missing:
            raise MessageNotFound(
                f"the dead-letter queue {dlq.name!r} holds no message {', '.join(missing[:5])}: "
                "see edgeq dlq browse (an expired one is gone)"
            )
        return list(found.values())

    def resend(self, uids: Sequence[MessageUID | str] | None, queue: str | None) -> Resent:
        """Move messages of the dead-letter queue (``uids``, or all; only those that left ``queue``)
        back to the queue each left, header removed, in one transaction."""
        checked = _checked_uids(uids)
        if queue is not None:
            check_name(queue, "original queue name")
        now = self.sink.clock()
        result = Resent()
        with self.sink.write() as tx:
            dlq = tx.queue(_name(tx))
            if dlq is None:
                result.kept.extend((uid, "there is no dead-letter queue") for uid in checked or [])
                return result
            undone = Undone()
            groups = self._origins(tx, dlq, checked, queue, now, result)
            for original, rows in groups.items():
                moved = self.backout.move(tx, dlq, original, rows, now, undone, reason="resent",
                                          header=_without_header, kept=_keeper(result, original))
                result.moved.extend(_uid(row) for row in rows if row.id in moved)
            self.sink.record(tx, undone.events)
        self.backout.settle(undone)
        self.sink.dispatch(undone.events)
        return result

    def _origins(
        self, tx: Tx, dlq: QueueRow, uids: list[MessageUID] | None, queue: str | None, now: int,
        result: Resent,
    ) -> dict[str, list[MessageRow]]:
        """The ready, intact, unexpired rows (of ``uids``, or all) by the queue they left (only
        ``queue``'s, if given); the others go to ``result.kept``."""
        if uids is None:
            rows = tx.rows(tx.ids(dlq.id, max(dlq.depth, 1)))
        else:
            found = tx.find_many(dlq.id, [(uid.origin, uid.stamp) for uid in uids])
            rows = list(found.values())
            result.kept.extend((u, "not on the dead-letter queue") for u in uids
                               if (u.origin, u.stamp) not in found)
        groups: dict[str, list[MessageRow]] = {}
        for row in rows:
            original, why = self._original(dlq, row, now)
            if original is not None and queue is not None and original != queue:
                continue
            if why is not None:
                result.kept.append((_uid(row), why))
            elif original is not None:
                groups.setdefault(original, []).append(row)
        return groups

    def _original(self, dlq: QueueRow, row: MessageRow, now: int) -> tuple[str | None, str | None]:
        """(the queue ``row`` left if it can be read, why it cannot be re-sent or None)."""
        if not is_intact(dlq.name, row):
            return None, "it fails its integrity check (run edgeq check)"
        try:
            plain = row if row.key_id is None else self.sealer.unseal_checked(dlq.name, row)
            original = decode_fields(plain.fields).get(DLQ_QUEUE)
        except EdgeqError as exc:
            return None, str(exc)
        if not isinstance(original, str):
            return None, (f"it has no {DLQ_QUEUE} field naming the queue it left: get it and put it where "
                          "it belongs")
        if row.state != _READY:
            return original, "it is locked by an assured get"
        if is_expired(row, now):
            return original, "it has expired"
        return original, None


def _checked_uids(uids: Sequence[MessageUID | str] | None) -> list[MessageUID] | None:
    """The operator's ``uids``: a list of uids, or None for all."""
    if uids is None:
        return None
    if isinstance(uids, (str, MessageUID)) or not isinstance(uids, Sequence):
        raise InvalidType("uids must be a list of uids (or None for all)")
    return [check_uid(uid) for uid in uids]


def _name(tx: Tx) -> str:
    return SyncTx(tx.conn).meta_items(DEAD_LETTER_QUEUE_KEY).get(
        DEAD_LETTER_QUEUE_KEY, DEFAULT_DEAD_LETTER_QUEUE
    )


def _uid(row: MessageRow) -> MessageUID:
    return MessageUID(row.origin, row.stamp)


def _keeper(result: Resent, original: str) -> Kept:
    """What tells ``result`` of a message that cannot go back to ``original``."""
    return lambda row, why: result.kept.append((_uid(row), f"cannot go back to {original!r}: {why}"))


def _without_header(row: MessageRow, fields: dict[str, FieldValue]) -> dict[str, FieldValue]:
    """A re-sent message's fields: the dead-letter header removed."""
    return {name: value for name, value in fields.items() if not name.startswith(DLQ_PREFIX)}


def _kept(q: QueueRow, row: MessageRow, count: int, target: str, why: str) -> None:
    log.warning(
        "message %s.%s of %r was refused %d times (its limit) but cannot move to dead-letter queue %r: %s; "
        "it stays on %r, is offered again, and moves at its next refusal once that is fixed",
        row.origin, row.stamp, q.name, count, target, why, q.name,
        extra={"event": "dlq-kept", "queue": q.name, "uid": f"{row.origin}.{row.stamp}", "dlq": target,
               "why": why},
    )

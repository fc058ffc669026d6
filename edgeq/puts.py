"""Putting messages: put and assured put (put locked, then confirm), a batch per transaction,
with the "added" expiry check point, duplicate detection by uid, and the flash budget."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from edgeq.args import check_confirm_id, check_uid
from edgeq.encoding.fields import encode_fields
from edgeq.errors import (
    DuplicateMessage,
    EdgeqError,
    InvalidType,
    MessageExpired,
    MessageNotFound,
    MessageTooLarge,
)
from edgeq.events.dispatch import Pending
from edgeq.events.sink import EventSink
from edgeq.exchange.transmit import Transmitter
from edgeq.expiry import effective_deadline, own_deadline
from edgeq.message import Message
from edgeq.queues.attributes import require_queue
from edgeq.queues.budget import OverflowTally, Room
from edgeq.queues.checkpoints import ExpiryPolicy
from edgeq.results import ConfirmResult, PutResult
from edgeq.sealer import Sealer
from edgeq.store.records import MessageRow, NewMessage, QueueRow, as_stored, is_intact, stored_size
from edgeq.store.rows import EXPIRY_KINDS, is_expired
from edgeq.store.tx import Tx
from edgeq.types import MessageState
from edgeq.uid import MessageUID

__all__ = ["Puts"]

# Plain ints for the rows put: sqlite3 binds an int subclass (an IntEnum) through its
# adapter lookup, which doubles the binding cost of that column on a 10,000-row batch.
_READY, _PUT_LOCKED = int(MessageState.READY), int(MessageState.PUT_LOCKED)


class Puts:
    """The put side of a queue manager's messaging. New uids get ``origin``; confirmed uids are
    remembered for ``remember_ms`` (or until settled); budget discards count in ``overflowed``."""

    def __init__(
        self, qm_name: str, origin: str, sink: EventSink, sealer: Sealer, expiry: ExpiryPolicy,
        transmitter: Transmitter, remember_ms: int | None, *, max_store_bytes: int | None = None,
        overflowed: OverflowTally | None = None,
    ) -> None:
        self.qm_name = qm_name
        self.origin = origin
        self.sink = sink
        self.clock = sink.clock
        self.sealer = sealer
        self.expiry = expiry
        self.transmitter = transmitter
        self.remember_ms = remember_ms
        self.max_store_bytes = max_store_bytes
        self.overflowed = overflowed if overflowed is not None else OverflowTally()

    def put_many(
        self, queue: str, messages: Sequence[Message], *, confirm_id: int | None = None
    ) -> list[MessageUID]:
        """Put a batch in one transaction: all are stored, or none (see ``QueueManager.put_many``)."""
        results, q = self._put(queue, messages, confirm_id, strict=True)
        uids = [r.uid for r in results]
        if q is not None and q.kind == "remote" and q.mode == "sync":
            self.transmitter.transmit_now(queue, [r.uid for r in results if r.status == "stored"])
        return uids

    def put_each(
        self, queue: str, messages: Sequence[Message], *, confirm_id: int | None = None
    ) -> list[PutResult]:
        """Put a batch in one transaction, with an outcome per message (see ``QueueManager.put_each``)."""
        results, q = self._put(queue, messages, confirm_id, strict=False)
        if q is not None and q.kind == "remote" and q.mode == "sync":
            self.transmitter.transmit_now(queue, [r.uid for r in results if r.status == "stored"])
        return results

    def _put(
        self, queue: str, messages: Sequence[Message], confirm_id: int | None, *, strict: bool
    ) -> tuple[list[PutResult], QueueRow | None]:
        if isinstance(messages, (Message, bytes, str)) or not isinstance(messages, Sequence):
            raise InvalidType("put takes a sequence of Message objects")
        for message in messages:
            if not isinstance(message, Message):
                raise InvalidType(
                    f"put takes an edgeq.Message, not {type(message).__name__}: wrap data as Message(b'...')"
                )
        if confirm_id is not None:
            confirm_id = check_confirm_id(confirm_id)
        if not messages:
            return [], None
        self.expiry.touch(queue)
        now = self.clock()
        events: list[Pending] = []
        try:
            results, q, discarded = self._put_rows(queue, messages, confirm_id, now, events, strict=strict)
        except DuplicateMessage as exc:
            refused = next((m for m in messages if m.uid == exc.uid), None)
            if refused is not None and self.sink.rules.wants(queue):
                self.sink.dispatch([Pending("duplicate", queue, now, message=refused)])
            raise
        self.overflowed.add(queue, discarded)
        duplicates = [
            m for m, r in zip(messages, results, strict=True) if r.status in ("duplicate", "unconfirmed")
        ]
        if duplicates and self.sink.rules.wants(queue):
            events += [Pending("duplicate", queue, now, message=m) for m in duplicates]
        self.sink.dispatch(events)
        return results, q

    def _put_rows(
        self, queue: str, messages: Sequence[Message], confirm_id: int | None, now: int,
        events: list[Pending], *, strict: bool,
    ) -> tuple[list[PutResult], QueueRow, int]:
        """The put transaction (``strict``: the first refusal raises, rolling the batch back); fills
        ``events``; returns the outcomes, the queue, and how many were discarded to make room."""

        def body(tx: Tx) -> tuple[list[PutResult], QueueRow, int]:
            q = require_queue(tx, self.qm_name, queue)
            room = Room(tx, q, self.max_store_bytes, now, self.sink, events)
            try:
                results, rows = self._admit(tx, q, room, messages, confirm_id, now, events, strict=strict)
            finally:
                room.close()  # the candidates' SELECT ends before the batch is written
            if room.discards:
                tx.delete(q.id, [row.id for row in room.discards])
            tx.insert(q.id, q.name, rows)
            threshold = q.depth_threshold
            if threshold is not None and q.depth < threshold <= room.depth and self.sink.rules.wants(queue):
                events.append(Pending("threshold", queue, now, depth=room.depth))
            self.sink.record(tx, events)
            return results, q, len(room.discards)

        return self.sink.run(body)  # concurrent puts: one thread writes them together (edgeq.store.flat)

    def _admit(
        self, tx: Tx, q: QueueRow, room: Room, messages: Sequence[Message], confirm_id: int | None, now: int,
        events: list[Pending], *, strict: bool,
    ) -> tuple[list[PutResult], list[NewMessage]]:
        """Decide each message of a batch, in ``tx``: its outcome, and the rows to insert."""
        queue = q.name
        first = tx.stamps(now, len(messages))
        rows: list[NewMessage] = []
        results: list[PutResult] = []
        seen: set[MessageUID] = set()
        # The copies already held or remembered, for every caller-given uid at once:
        # a constant number of indexed SELECTs per batch, not two per message.
        keys = [(m.uid.origin, m.uid.stamp) for m in messages if m.uid is not None]
        held = tx.find_many(q.id, keys) if keys else {}
        remembered = tx.remembered_many(q.id, [k for k in keys if k not in held]) if keys else set()
        # No copy of a row unless a rule or the journal wants its event.
        observed_expired = self.sink.observed(queue, "expired")
        observed_added = self.sink.observed(queue, "added")
        settled = self._settled_for(tx, q, keys)
        for offset, message in enumerate(messages):
            uid = message.uid or MessageUID._trusted(self.origin, first + offset)
            if settled and uid.stamp < settled and uid.origin == self.origin:
                # Its target takes this store's uids below the mark for resends: a new one.
                uid = MessageUID._trusted(self.origin, first + offset)
            row = self._row(q, uid, message, first + offset, confirm_id, now)
            error, existing = self._refusal(q, uid, message, row, seen, held, remembered)
            if isinstance(error, PutResult):
                results.append(error)  # a duplicate of something already confirmed
                if strict and error.error is not None:
                    raise error.error
                continue
            if error is None:
                if message.uid is not None:  # only a caller's uids can repeat within a batch
                    seen.add(uid)
                if row.deadline is not None and row.deadline <= now:
                    # MQe's "added" check point: never stored, rules still told.
                    if observed_expired:
                        events.extend(
                            self.sink.events(queue, "expired", [as_stored(queue, row)], now, where="add")
                        )
                    results.append(PutResult(uid, "expired"))
                    continue
                sealed = self.sealer.seal(q, row)
                # Room for it, by the queue's on_full (a resend takes its unconfirmed copy's place).
                error = room.admit(stored_size(sealed), row.priority, existing)
            if error is not None:
                if strict:
                    raise error
                results.append(PutResult(uid, "refused", str(error), error))
                continue
            if existing is not None:
                tx.delete(q.id, [existing.id])
            rows.append(sealed)
            results.append(PutResult(uid, "replaced" if existing is not None else "stored"))
            if observed_added:
                events.append(Pending("added", queue, now, new=row))  # copied only if a rule reads it
        return results, rows

    def _settled_for(self, tx: Tx, q: QueueRow, keys: Sequence[tuple[str, int]]) -> int:
        """The store's settled mark if this batch puts uids of its own origin on a remote queue, else
        0: below it the target takes them for resends (docs/protocol.md), so they get new uids."""
        if q.kind != "remote" or not any(origin == self.origin for origin, _ in keys):
            return 0
        return tx.transmission_low_water(self.origin)

    def _row(
        self, q: QueueRow, uid: MessageUID, message: Message, seq: int, confirm_id: int | None, now: int
    ) -> NewMessage:
        """The row of a new message of queue ``q`` (not sealed yet)."""
        created = message.created_ms if message.uid is not None and message.created_ms else now
        priority = q.default_priority if message.priority is None else message.priority
        cap_at = None if q.cap_expiry_ms is None else now + q.cap_expiry_ms
        deadline = effective_deadline(own_deadline(message.expiry, created), now, q.expiry_ms, cap_at)
        return NewMessage(
            uid.origin, uid.stamp, _READY if confirm_id is None else _PUT_LOCKED, confirm_id,
            priority if q.ordering == "priority" else 0, seq, priority, created, now,
            EXPIRY_KINDS[type(message.expiry)], None if message.expiry is None else int(message.expiry),
            cap_at, deadline, message.correlation_id, message.reply_to,
            None if message.expiry_report == "none" else message.expiry_report, encode_fields(message.fields),
            message.data,
        )

    def _refusal(
        self, q: QueueRow, uid: MessageUID, message: Message, row: NewMessage,
        seen: set[MessageUID], held: Mapping[tuple[str, int], MessageRow], remembered: set[tuple[str, int]],
    ) -> tuple[EdgeqError | PutResult | None, MessageRow | None]:
        """Why this message cannot be stored (an error, or a duplicate outcome), or None; and the
        copy of it already held, if any (a resend replaces it)."""
        size = len(row.data) + len(row.fields or b"")
        if q.max_message_bytes is not None and size > q.max_message_bytes:
            return MessageTooLarge(
                f"message is {size} bytes (data plus fields) but queue {q.name!r} takes at most "
                f"{q.max_message_bytes} (max_message_bytes): split it, or raise the limit with alter_queue"
            ), None
        existing = None
        if message.uid is not None:  # a uid made just now is new by construction: no lookups
            if uid in seen:
                return DuplicateMessage(f"message {uid} appears twice in one batch: put it once", uid), None
            existing = held.get((uid.origin, uid.stamp))
            if existing is not None and not (message.resend and existing.state == MessageState.PUT_LOCKED):
                error = self._duplicate(q.name, uid, existing, message.resend)
                if existing.state == MessageState.PUT_LOCKED:  # held but not confirmed: confirm it, or resend
                    return PutResult(uid, "unconfirmed", "held, awaiting its confirm", error), None
                return PutResult(uid, "duplicate", "already held", error), None
            if existing is None and (uid.origin, uid.stamp) in remembered:
                error = DuplicateMessage(
                    f"queue {q.name!r} already received and confirmed message {uid}: this is a duplicate; "
                    "drop it",
                    uid,
                )
                return PutResult(uid, "duplicate", "already confirmed", error), None
        return None, existing

    def _duplicate(self, queue: str, uid: MessageUID, existing: MessageRow, resend: bool) -> DuplicateMessage:
        if existing.state == MessageState.PUT_LOCKED:
            return DuplicateMessage(
                f"queue {queue!r} already holds an unconfirmed copy of {uid}: confirm_put it, "
                "or put again with resend=True to replace it",
                uid,
            )
        what = "resend of" if resend else "second put of"
        return DuplicateMessage(
            f"queue {queue!r} already holds confirmed message {uid}: this {what} it is a duplicate; "
            "drop it (a resend only replaces an unconfirmed copy)",
            uid,
        )

    def confirm_put(self, queue: str, uid: MessageUID | str) -> None:
        """Make an assured put visible (see ``QueueManager.confirm_put``)."""
        (result,) = self.confirm_put_each(queue, [uid])
        if result.status == "unknown":
            raise MessageNotFound(
                f"queue {queue!r} holds no message {result.uid}: it was never put, was undone, or expired "
                "and was discarded; put it again (with resend=True)"
            )
        if result.status == "expired":
            raise MessageExpired(
                f"message {result.uid} expired before its put was confirmed; it has been discarded"
            )

    def confirm_put_each(
        self, queue: str, uids: Sequence[MessageUID | str], *, device: str | None = None,
        clock_offset_ms: int | None = None,
    ) -> list[ConfirmResult]:
        """Confirm a batch of assured puts in one transaction (see ``QueueManager.confirm_put_each``)."""
        if isinstance(uids, (str, MessageUID)) or not isinstance(uids, Sequence):
            raise InvalidType("confirm_put_each takes a sequence of uids")
        checked = [check_uid(uid) for uid in uids]
        self.expiry.touch(queue)
        now = self.clock()
        results: list[ConfirmResult] = []
        keys = [(uid.origin, uid.stamp) for uid in checked]
        with self.sink.write() as tx:
            q = require_queue(tx, self.qm_name, queue)
            held = tx.find_many(q.id, keys)  # set-based: a few queries per batch, not per uid
            remembered = tx.remembered_many(q.id, [k for k in keys if k not in held])
            events: list[Pending] = []
            ready: list[MessageRow] = []
            ready_ids: set[int] = set()
            expired: list[int] = []
            # A damaged locked row is neither published nor discarded as expired (its
            # deadline may be what is damaged): quarantined, it answers "unknown" so the
            # sender keeps its copy and puts it again.
            for bad in [
                r for r in held.values() if r.state == MessageState.PUT_LOCKED and not is_intact(q.name, r)
            ]:
                events += self.sink.quarantine(tx, q, bad, now, through_index=True)
                del held[(bad.origin, bad.stamp)]
            for uid, key in zip(checked, keys, strict=True):
                row = held.get(key)
                if row is None:
                    results.append(ConfirmResult(uid, "already" if key in remembered else "unknown"))
                elif row.state != MessageState.PUT_LOCKED or row.id in ready_ids:
                    results.append(ConfirmResult(uid, "already"))  # MQe ignores a second confirm
                elif is_expired(row, now):
                    if row.id not in expired:
                        expired.append(row.id)
                    results.append(ConfirmResult(uid, "expired"))
                else:
                    ready.append(row)
                    ready_ids.add(row.id)
                    results.append(ConfirmResult(uid, "confirmed"))
            events += self.sink.events(queue, "expired", tx.delete(q.id, expired), now, where="add")
            if ready:
                tx.make_ready([row.id for row in ready], tx.stamps(now, len(ready)))
            if self.remember_ms is not None:
                tx.remember(q.id, [(row.origin, row.stamp) for row in ready], now)
                tx.forget_before(now - self.remember_ms)
            self.sink.accepted(tx, queue, ready, now, device=device, clock_offset_ms=clock_offset_ms)
            self.sink.record(tx, events)
        self.sink.dispatch(events)
        return results

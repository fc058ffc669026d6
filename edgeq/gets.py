"""Getting messages: get, assured get (lock, then confirm or undo), browse, and the
"removed" expiry check point: expired messages met first are discarded, never
returned. Also what takes messages for transmission from a remote queue."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from edgeq.args import check_confirm_id, check_count, check_uid
from edgeq.checkpoints import DISCARD_BATCH, ExpiryPolicy
from edgeq.crypto import IntegrityError
from edgeq.dispatch import Pending
from edgeq.errors import ConfirmIdNotFound, InvalidArgument, InvalidType, MessageExpired, MessageNotFound
from edgeq.events import EventSink
from edgeq.message import Message, check_fields
from edgeq.queues import readable_queue, require_queue
from edgeq.results import ConfirmResult
from edgeq.rows import is_expired, matches, to_message
from edgeq.sealer import Sealer
from edgeq.store import MessageRow, QueueRow, Tx
from edgeq.types import FieldValue, Filter, MessageState, RemovalReason, Where
from edgeq.uid import MessageUID

__all__ = ["PAGE", "Gets"]

PAGE = 256  # rows per page when a get or browse must walk past expired or filtered ones


class Gets:
    """The get side of a queue manager's messaging."""

    def __init__(self, qm_name: str, sink: EventSink, sealer: Sealer, expiry: ExpiryPolicy) -> None:
        self.qm_name = qm_name
        self.sink = sink
        self.clock = sink.clock
        self.sealer = sealer
        self.expiry = expiry

    def get_many(
        self, queue: str, count: int, *, confirm_id: int | None = None, filter: Filter | None = None
    ) -> list[Message]:
        """Take up to ``count`` messages in one transaction (see ``QueueManager.get``)."""
        count = check_count(count)
        if confirm_id is not None:
            confirm_id = check_confirm_id(confirm_id)
        wanted = check_fields(filter) if filter is not None else None
        return self.take(queue, count, wanted=wanted, remove=True, confirm_id=confirm_id)

    def browse(self, queue: str, *, filter: Filter | None = None, limit: int | None = None) -> list[Message]:
        """The visible messages in get order, without removing them (see ``QueueManager.browse``)."""
        if limit is not None:
            limit = check_count(limit)
        wanted = check_fields(filter) if filter is not None else None
        self.expiry.touch(queue)
        now = self.clock()
        events: list[Pending] = []
        with self.sink.write() as tx:
            q = readable_queue(tx, self.qm_name, queue)
            if tx.has_expired(q.id, now):
                ids = tx.expired_ids(q.id, now, q.depth, ready_only=True)
                if wanted is not None:
                    ids = [row.id for row in tx.rows(ids) if matches(self.sealer.unseal_for_rules(queue, row), wanted)]
                events = self.sink.events(queue, "expired", tx.delete(q.id, ids), now, where="browse")
                self.sink.record(tx, events)
        self.sink.dispatch(events)
        out: list[Message] = []
        corrupt: tuple[MessageRow, IntegrityError] | None = None
        with self.sink.db.read() as conn:
            tx = Tx(conn)
            q = require_queue(tx, self.qm_name, queue)
            for rows in tx.ready(q.id, PAGE):
                for row in rows:
                    if is_expired(row, now):
                        continue
                    try:
                        opened = self.sealer.unseal(queue, row)
                    except IntegrityError as exc:
                        corrupt = (row, exc)
                        break
                    if wanted is not None and not matches(opened, wanted):
                        continue
                    out.append(to_message(opened, now))
                    if limit is not None and len(out) >= limit:
                        return out
                if corrupt is not None:
                    break
        if corrupt is not None:
            with self.sink.write() as wtx:
                wq = require_queue(wtx, self.qm_name, queue)
                held = wtx.find(wq.id, corrupt[0].origin, corrupt[0].stamp)
                events = self.sink.quarantine(wtx, wq, held, now) if held is not None and held == corrupt[0] else []
                self.sink.record(wtx, events)
            self.sink.dispatch(events)
            raise corrupt[1]
        return out

    def take(
        self, queue: str, count: int, *, wanted: Mapping[str, FieldValue] | None, remove: bool,
        confirm_id: int | None,
    ) -> list[Message]:
        """The next ``count`` messages in get order, with the expired ones met first
        discarded (``where="get"``). ``remove``: taken from a local queue (deleted, or
        locked under ``confirm_id``); otherwise only read, from a remote queue (for
        transmission). A row failing its integrity check is quarantined and raised.
        """
        self.expiry.touch(queue)
        now = self.clock()
        # Only a plain get's delete must wait for the disk: an assured get's lock,
        # lost in a power cut, leaves the message visible exactly as an undo would
        # (its getter died too), and discarding an expired message twice is harmless.
        with self.sink.write(durable=remove and confirm_id is None) as tx:
            q = readable_queue(tx, self.qm_name, queue) if remove else require_queue(tx, self.qm_name, queue)
            if not remove and q.kind != "remote":
                raise InvalidArgument(f"{queue!r} is not a remote queue: nothing to transmit")
            # Common case: nothing expired anywhere on the queue, so one page of
            # exactly `count` rows is all a get reads.
            page = count if wanted is None and not tx.has_expired(q.id, now) else max(count, PAGE)
            chosen, plain, expired, error = self._scan(tx, q, page, count, now, wanted)
            events = self.sink.events(queue, "expired", tx.delete(q.id, expired), now, where="get")
            if remove and confirm_id is None:
                tx.delete(q.id, [row.id for row in chosen])
                events += self.sink.events(queue, "removed", chosen, now, reason="got")
            elif remove and confirm_id is not None:
                tx.lock_for_get([row.id for row in chosen], confirm_id)
            if error is not None:
                events += self.sink.quarantine(tx, q, error[0], now)
            self.sink.record(tx, events)
        self.sink.dispatch(events)
        if error is not None:
            raise error[1]
        return [to_message(row, now) for row in plain]

    def _scan(
        self, tx: Tx, q: QueueRow, page: int, count: int, now: int, wanted: Mapping[str, FieldValue] | None
    ) -> tuple[list[MessageRow], list[MessageRow], list[int], tuple[MessageRow, IntegrityError] | None]:
        """Walk ready messages in get order: the first ``count`` live matches (as
        stored, and unsealed), the ids of the expired matches met before them (to
        discard), and a row that failed its integrity check, if one stopped the walk
        before anything was chosen (to quarantine; a later call meets it otherwise)."""
        chosen: list[MessageRow] = []
        plain: list[MessageRow] = []
        expired: list[int] = []
        for rows in tx.ready(q.id, page):
            for row in rows:
                if wanted is None and is_expired(row, now):
                    expired.append(row.id)  # no need to unseal what is discarded unread
                    continue
                try:
                    opened = self.sealer.unseal(q.name, row)
                except IntegrityError as exc:
                    return chosen, plain, expired, None if chosen else (row, exc)
                if wanted is not None and not matches(opened, wanted):
                    continue
                if is_expired(row, now):
                    expired.append(row.id)
                    continue
                chosen.append(row)
                plain.append(opened)
                if len(chosen) == count:
                    return chosen, plain, expired, None
        return chosen, plain, expired, None

    def _delete_row(self, tx: Tx, q: QueueRow, row: MessageRow, now: int, where: Where,
                    reason: RemovalReason) -> list[Pending]:
        """Delete one message: an expired one counts as discarded at ``where``."""
        removed = tx.delete(q.id, [row.id])
        if is_expired(row, now):
            events = self.sink.events(q.name, "expired", removed, now, where=where)
        else:
            events = self.sink.events(q.name, "removed", removed, now, reason=reason)
        self.sink.record(tx, events)
        return events

    def confirm_get(self, queue: str, uid: MessageUID | str) -> None:
        """Complete an assured get: delete the locked message."""
        uid = check_uid(uid)
        self.expiry.touch(queue)
        now = self.clock()
        with self.sink.write() as tx:
            q = require_queue(tx, self.qm_name, queue)
            row = tx.find(q.id, uid.origin, uid.stamp)
            if row is None or row.state != MessageState.GET_LOCKED:
                state = "is not locked by an assured get" if row is not None else "is not on the queue"
                raise MessageNotFound(
                    f"message {uid} {state} {queue!r}: confirm_get only completes a get(confirm_id=...) "
                    "not yet confirmed or undone"
                )
            events = self._delete_row(tx, q, row, now, "get", "confirmed")
        self.sink.dispatch(events)
        if is_expired(row, now):
            raise MessageExpired(f"message {uid} expired while locked by an assured get; it has been discarded")

    def confirm_get_each(self, queue: str, uids: Sequence[MessageUID | str]) -> list[ConfirmResult]:
        """Complete a batch of assured gets in one transaction (see ``QueueManager.confirm_get_each``)."""
        if isinstance(uids, (str, MessageUID)) or not isinstance(uids, Sequence):
            raise InvalidType("confirm_get_each takes a sequence of uids")
        checked = [check_uid(uid) for uid in uids]
        self.expiry.touch(queue)
        now = self.clock()
        results: list[ConfirmResult] = []
        with self.sink.write() as tx:
            q = readable_queue(tx, self.qm_name, queue)
            held = tx.find_many(q.id, [(uid.origin, uid.stamp) for uid in checked])
            taken: dict[int, MessageRow] = {}
            for uid in checked:
                row = held.get((uid.origin, uid.stamp))
                if row is None or row.state != MessageState.GET_LOCKED or row.id in taken:
                    results.append(ConfirmResult(uid, "unknown"))
                else:
                    taken[row.id] = row
                    results.append(ConfirmResult(uid, "expired" if is_expired(row, now) else "confirmed"))
            removed = tx.delete(q.id, list(taken))
            events = self.sink.events(queue, "expired", [r for r in removed if is_expired(r, now)], now, where="get")
            events += self.sink.events(
                queue, "removed", [r for r in removed if not is_expired(r, now)], now, reason="confirmed"
            )
            self.sink.record(tx, events)
        self.sink.dispatch(events)
        return results

    def undo(self, queue: str, confirm_id: int) -> int:
        """Undo whatever ``confirm_id`` locked (see ``QueueManager.undo``)."""
        confirm_id = check_confirm_id(confirm_id)
        self.expiry.touch(queue)
        now = self.clock()
        with self.sink.write() as tx:
            q = require_queue(tx, self.qm_name, queue)
            rows = tx.find_by_confirm_id(q.id, confirm_id)
            if not rows:
                raise ConfirmIdNotFound(
                    f"nothing on queue {queue!r} is locked under confirm id {confirm_id}: it was already "
                    "confirmed, undone, or expired"
                )
            tx.back_out([r.id for r in rows if r.state == MessageState.GET_LOCKED])
            removed = tx.delete(q.id, [r.id for r in rows if r.state == MessageState.PUT_LOCKED])
            events = self.sink.events(queue, "removed", removed, now, reason="deleted")
            self.sink.record(tx, events)
        self.sink.dispatch(events)
        return len(rows)

    def delete_message(self, queue: str, uid: MessageUID | str) -> None:
        """Delete one message by uid, whatever its state."""
        uid = check_uid(uid)
        self.expiry.touch(queue)
        now = self.clock()
        with self.sink.write() as tx:
            q = require_queue(tx, self.qm_name, queue)
            row = tx.find(q.id, uid.origin, uid.stamp)
            if row is None:
                raise MessageNotFound(f"queue {queue!r} holds no message {uid}")
            events = self._delete_row(tx, q, row, now, "get", "deleted")
        self.sink.dispatch(events)

    def purge(self, name: str) -> int:
        """Remove every message from a queue (rules see reason ``purged``); return how many."""
        self.expiry.touch(name)
        if not self.sink.observed(name, "removed"):
            with self.sink.write() as tx:
                return tx.delete_all(require_queue(tx, self.qm_name, name).id)
        return self.expiry.remove_in_batches(name, lambda tx, q, now: tx.ids(q.id, DISCARD_BATCH), "removed", reason="purged")

    def release_locks(self, queue: str) -> int:
        """Undo every assured-get lock on a queue (its getter is gone); return how many."""
        self.expiry.touch(queue)
        with self.sink.write() as tx:
            q = require_queue(tx, self.qm_name, queue)
            ids = tx.get_locked(q.id)
            tx.back_out(ids)
        return len(ids)

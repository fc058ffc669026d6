"""Getting messages: get, assured get (lock, then confirm or undo), browse, and taking a remote
queue's messages for transmission; expired messages met first are discarded, never returned."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from edgeq.args import check_confirm_id, check_positive, check_uid
from edgeq.crypto import IntegrityError
from edgeq.errors import ConfirmIdNotFound, InvalidArgument, InvalidType, MessageExpired, MessageNotFound
from edgeq.events.dispatch import Pending
from edgeq.events.sink import EventSink
from edgeq.message import Message, check_fields
from edgeq.queues.attributes import readable_queue, require_queue
from edgeq.queues.backout import Backout, Undone
from edgeq.queues.budget import OverflowTally
from edgeq.queues.checkpoints import DISCARD_BATCH, ExpiryPolicy
from edgeq.results import ConfirmResult
from edgeq.sealer import Sealer
from edgeq.store.damage import index_damaged
from edgeq.store.records import MessageRow, QueueRow, is_intact
from edgeq.store.rows import is_expired, matches, to_message
from edgeq.store.tx import Tx
from edgeq.store.verify import locked_unindexed, tolerant
from edgeq.types import FieldValue, Filter, MessageState, RemovalReason, Where
from edgeq.uid import MessageUID

__all__ = ["PAGE", "Gets"]

PAGE = 256  # rows per page when a get or browse must walk past expired or filtered ones
_READY, _PUT_LOCKED, _GET_LOCKED = (int(s) for s in MessageState)  # plain ints: compared once per row read


@dataclass(slots=True)
class _Scan:
    """What a walk of the ready messages found (see :meth:`Gets._scan`)."""

    chosen: list[MessageRow] = field(default_factory=list)  # as stored
    plain: list[MessageRow] = field(default_factory=list)  # the same, unsealed
    expired: list[int] = field(default_factory=list)  # ids of the expired matches met first
    damaged: MessageRow | None = None  # the row that stopped the walk: it failed its check
    error: IntegrityError | None = None  # set if it is intact but would not open (tampered)


class Gets:
    """The get side of a queue manager's messaging. Each row is checked before it is used: see
    docs/storage.md, "What is detected"."""

    def __init__(
        self, qm_name: str, sink: EventSink, sealer: Sealer, expiry: ExpiryPolicy,
        overflowed: OverflowTally | None = None,
    ) -> None:
        self.qm_name = qm_name
        self.sink = sink
        self.clock = sink.clock
        self.sealer = sealer
        self.expiry = expiry
        # Undone gets: backed out, or moved to a backout queue (whose on_full discards are counted).
        self.backout = Backout(sink, sealer, overflowed if overflowed is not None else OverflowTally())

    def get_many(
        self, queue: str, count: int, *, confirm_id: int | None = None, filter: Filter | None = None
    ) -> list[Message]:
        """Take up to ``count`` messages in one transaction (see ``QueueManager.get``)."""
        count = check_positive(count, "count")
        if confirm_id is not None:
            confirm_id = check_confirm_id(confirm_id)
        wanted = check_fields(filter) if filter is not None else None
        return self.take(queue, count, wanted=wanted, remove=True, confirm_id=confirm_id)

    def browse(self, queue: str, *, filter: Filter | None = None, limit: int | None = None) -> list[Message]:
        """The visible messages in get order, without removing them (see ``QueueManager.browse``)."""
        if limit is not None:
            limit = check_positive(limit, "limit")
        wanted = check_fields(filter) if filter is not None else None
        self.expiry.touch(queue)
        now = self.clock()
        self._discard_expired(queue, now, wanted)
        with self.sink.db.read() as conn:
            tx = Tx(conn)
            q = require_queue(tx, self.qm_name, queue)
            found = tolerant(conn, lambda: self._scan(tx, q, PAGE, limit, now, wanted, due=False))
        if found.damaged is None:
            return [to_message(row, now, intact=True) for row in found.plain]  # _scan checked them
        with self.sink.write() as wtx:  # read in the snapshot above: quarantined unless taken since
            wq = require_queue(wtx, self.qm_name, queue)
            events = self.sink.quarantine(wtx, wq, found.damaged, now, through_index=found.error is None,
                                          same_tx=False)
            self.sink.record(wtx, events)
        self.sink.dispatch(events)
        raise found.error or self.sealer.damaged(queue, found.damaged)

    def _discard_expired(self, queue: str, now: int, wanted: Mapping[str, FieldValue] | None) -> None:
        """Browse's check point: discard the expired ready matches (kept on a read-only store)."""
        if self.sink.db.read_only:
            return
        events: list[Pending] = []
        error: IntegrityError | None = None
        with self.sink.write() as tx:
            q = readable_queue(tx, self.qm_name, queue)
            if tx.has_expired(q.id, now):
                rows = tolerant(tx.conn, lambda: tx.rows(tx.expired_ids(q.id, now, q.depth, ready_only=True)))
                doomed: list[int] = []
                for row in rows:
                    if row.state != _READY:
                        continue
                    if not is_intact(queue, row):  # a damaged deadline must not discard a live message
                        events += self.sink.quarantine(tx, q, row, now, through_index=True)
                        error = error or self.sealer.damaged(queue, row)
                        continue
                    if not is_expired(row, now):
                        raise index_damaged(
                            f"the deadline index of queue {queue!r} has message {row.origin}.{row.stamp} "
                            "expired, the message itself does not", tx.conn,
                        )
                    try:
                        if wanted is None or matches(self.sealer.unseal_checked(queue, row), wanted):
                            doomed.append(row.id)
                    except IntegrityError as exc:
                        events += self.sink.quarantine(tx, q, row, now, through_index=False)
                        error = error or exc
                events += self.sink.events(queue, "expired", tx.delete(q.id, doomed), now, where="browse")
            self.sink.record(tx, events)
        self.sink.dispatch(events)
        if error is not None:
            raise error

    def take(
        self, queue: str, count: int, *, wanted: Mapping[str, FieldValue] | None, remove: bool,
        confirm_id: int | None,
    ) -> list[Message]:
        """The next ``count`` messages in get order, the expired ones met first discarded. ``remove``:
        deleted or locked under ``confirm_id``; else only read, from a remote queue (to transmit)."""
        self.expiry.touch(queue)
        now = self.clock()

        def body(tx: Tx) -> tuple[_Scan, MessageRow | None, list[Pending]]:
            q = (readable_queue(tx, self.qm_name, queue, counted=False) if remove
                 else require_queue(tx, self.qm_name, queue, counted=False))
            if not remove and q.kind != "remote":
                raise InvalidArgument(f"{queue!r} is not a remote queue: nothing to transmit")
            # Common case: nothing expired at the head of the queue, so one page of exactly
            # `count` rows is all a get reads; past expired or filtered rows, pages of PAGE.
            page = count if wanted is None else max(count, PAGE)
            found = tolerant(tx.conn, lambda: self._scan(tx, q, page, count, now, wanted, due=True))
            chosen = found.chosen
            # A damaged row met after others were chosen is left for the next call.
            damaged = found.damaged if not chosen else None
            events = self.sink.events(queue, "expired", tx.delete(q.id, found.expired), now, where="get")
            if remove and confirm_id is None:
                tx.delete(q.id, [row.id for row in chosen])
                events += self.sink.events(queue, "removed", chosen, now, reason="got")
            elif remove and confirm_id is not None:
                tx.lock_for_get([row.id for row in chosen], confirm_id)
            if damaged is not None:
                events += self.sink.quarantine(tx, q, damaged, now, through_index=found.error is None)
            self.sink.record(tx, events)
            return found, damaged, events

        # Only a plain get's delete must wait for the disk: an assured get's lock, lost in a power cut, leaves
        # the message visible exactly as an undo would (its getter died too), and
        # discarding an expired message twice is harmless.
        found, damaged, events = self.sink.run(body, durable=remove and confirm_id is None)
        self.sink.dispatch(events)
        if damaged is not None:
            raise found.error or self.sealer.damaged(queue, damaged)
        return [to_message(row, now, intact=True) for row in found.plain]  # _scan checked them

    def _scan(
        self, tx: Tx, q: QueueRow, page: int, count: int | None, now: int,
        wanted: Mapping[str, FieldValue] | None, *, due: bool,
    ) -> _Scan:
        """Walk ready messages in get order: the first ``count`` (None: all) live matches and the
        expired ones met before them, or the row that failed its check. ``due``: skip delayed ones."""
        found = _Scan()
        seen: set[tuple[str, int]] = set()  # uids: one row twice, or two rows of one uid
        for rows in tx.ready(q.id, page, now if due else None, then=max(page, PAGE)):
            for row in rows:
                uid = (row.origin, row.stamp)
                if row.state != _READY or uid in seen:
                    continue
                seen.add(uid)
                if not is_intact(q.name, row):
                    found.damaged = row
                    return found
                if wanted is None and is_expired(row, now):
                    found.expired.append(row.id)  # no need to unseal what is discarded unread
                    continue
                try:
                    opened = self.sealer.unseal_checked(q.name, row)
                except IntegrityError as exc:
                    found.damaged, found.error = row, exc
                    return found
                if wanted is not None and not matches(opened, wanted):
                    continue
                if is_expired(row, now):
                    found.expired.append(row.id)
                    continue
                found.chosen.append(row)
                found.plain.append(opened)
                if len(found.chosen) == count:
                    return found
        return found

    def _delete_row(self, tx: Tx, q: QueueRow, row: MessageRow, now: int, where: Where,
                    reason: RemovalReason) -> list[Pending]:
        """Delete one message: an expired one counts as discarded at ``where``."""
        removed = tx.delete_row(q.id, row)
        if is_expired(row, now):
            events = self.sink.events(q.name, "expired", removed, now, where=where)
        else:
            events = self.sink.events(q.name, "removed", removed, now, reason=reason)
        self.sink.record(tx, events)
        return events

    def _set_aside(
        self, tx: Tx, q: QueueRow, rows: Sequence[MessageRow], now: int
    ) -> tuple[list[Pending], IntegrityError]:
        """Quarantine rows that failed their check; return the error to raise after the commit."""
        events = [ev for row in rows for ev in self.sink.quarantine(tx, q, row, now, through_index=True)]
        self.sink.record(tx, events)
        return events, self.sealer.damaged(q.name, rows[0])

    def _find(self, tx: Tx, q: QueueRow, uid: MessageUID) -> tuple[MessageRow | None, bool]:
        """The row of ``uid`` on ``q`` (or None) and whether it is intact and really ``uid``."""
        row = tolerant(tx.conn, lambda: tx.find(q.id, uid.origin, uid.stamp))
        if row is None:
            return None, False
        return row, row.origin == uid.origin and row.stamp == uid.stamp and is_intact(q.name, row)

    def confirm_get(self, queue: str, uid: MessageUID | str) -> None:
        """Complete an assured get: delete the locked message."""
        uid = check_uid(uid)
        self.expiry.touch(queue)
        now = self.clock()

        def body(tx: Tx) -> tuple[MessageRow, list[Pending], IntegrityError | None]:
            q = require_queue(tx, self.qm_name, queue, counted=False)
            row, intact = self._find(tx, q, uid)
            if row is None and locked_unindexed(tx, q.id, uid.origin, uid.stamp):
                raise index_damaged(
                    f"the uid index of queue {queue!r} does not find message {uid}, locked there", tx.conn
                )
            if row is None or row.state != _GET_LOCKED:
                state = "is not locked by an assured get" if row is not None else "is not on the queue"
                raise MessageNotFound(
                    f"message {uid} {state} {queue!r}: confirm_get only completes a get(confirm_id=...) "
                    "not yet confirmed or undone"
                )
            if intact:
                return row, self._delete_row(tx, q, row, now, "get", "confirmed"), None
            return row, *self._set_aside(tx, q, [row], now)

        row, events, error = self.sink.run(body)
        self.sink.dispatch(events)
        if error is not None:
            raise error
        if is_expired(row, now):
            raise MessageExpired(
                f"message {uid} expired while locked by an assured get; it has been discarded"
            )

    def confirm_get_each(self, queue: str, uids: Sequence[MessageUID | str]) -> list[ConfirmResult]:
        """Complete a batch of assured gets in one transaction (see ``QueueManager.confirm_get_each``)."""
        if isinstance(uids, (str, MessageUID)) or not isinstance(uids, Sequence):
            raise InvalidType("confirm_get_each takes a sequence of uids")
        checked = [check_uid(uid) for uid in uids]
        self.expiry.touch(queue)
        now = self.clock()
        results: list[ConfirmResult] = []
        error: IntegrityError | None = None
        with self.sink.write() as tx:
            q = readable_queue(tx, self.qm_name, queue)
            held = tolerant(tx.conn, lambda: tx.find_many(q.id, [(uid.origin, uid.stamp) for uid in checked]))
            locked = {row.id: row for row in held.values() if row.state == _GET_LOCKED}
            bad = [row for row in locked.values() if not is_intact(q.name, row)]
            if bad:
                events, error = self._set_aside(tx, q, bad, now)
            else:
                taken: dict[int, MessageRow] = {}
                for uid in checked:
                    row = held.get((uid.origin, uid.stamp))
                    if row is None or row.id not in locked or row.id in taken:
                        results.append(ConfirmResult(uid, "unknown"))
                    else:
                        taken[row.id] = row
                        results.append(ConfirmResult(uid, "expired" if is_expired(row, now) else "confirmed"))
                removed = tx.delete(q.id, list(taken))
                events = self.sink.events(
                    queue, "expired", [r for r in removed if is_expired(r, now)], now, where="get"
                )
                events += self.sink.events(
                    queue, "removed", [r for r in removed if not is_expired(r, now)], now, reason="confirmed"
                )
                self.sink.record(tx, events)
        self.sink.dispatch(events)
        if error is not None:
            raise error
        return results

    def undo(
        self, queue: str, confirm_id: int, *, count_backout: bool = True,
        uids: Sequence[MessageUID | str] | None = None,
    ) -> int:
        """Undo whatever ``confirm_id`` locked, or only its ``uids`` (see ``QueueManager.undo``)."""
        return self.undo_due(queue, confirm_id, count_backout=count_backout, uids=uids)[0]

    def undo_due(
        self, queue: str, confirm_id: int, *, count_backout: bool = True,
        uids: Sequence[MessageUID | str] | None = None,
    ) -> tuple[int, dict[tuple[str, int], int | None]]:
        """:meth:`undo`, and by uid when each message backed out may be got again (None: at once;
        one moved to its backout queue is absent)."""
        confirm_id = check_confirm_id(confirm_id)
        if not isinstance(count_backout, bool):
            raise InvalidType(f"count_backout must be True or False, not {count_backout!r}")
        only: set[tuple[str, int]] | None = None
        if uids is not None:
            if isinstance(uids, (str, MessageUID)) or not isinstance(uids, Sequence):
                raise InvalidType("undo's uids takes a sequence of uids (or None: all under the confirm id)")
            only = {(uid.origin, uid.stamp) for uid in map(check_uid, uids)}
        self.expiry.touch(queue)
        now = self.clock()
        error: IntegrityError | None = None
        undone = Undone()
        with self.sink.write() as tx:
            q = require_queue(tx, self.qm_name, queue)
            rows = tolerant(tx.conn, lambda: tx.find_by_confirm_id(q.id, confirm_id))
            if only is not None:
                rows = [r for r in rows if (r.origin, r.stamp) in only]
                if not rows:
                    raise ConfirmIdNotFound(
                        f"none of the {len(only)} uid(s) given is locked on queue {queue!r} under confirm id "
                        f"{confirm_id}: already confirmed, undone, or expired"
                    )
            if not rows:
                raise ConfirmIdNotFound(
                    f"nothing on queue {queue!r} is locked under confirm id {confirm_id}: it was already "
                    "confirmed, undone, or expired"
                )
            bad = [r for r in rows if r.state in (_GET_LOCKED, _PUT_LOCKED) and not is_intact(q.name, r)]
            if bad:
                events, error = self._set_aside(tx, q, bad, now)
            else:
                got = [r for r in rows if r.state == _GET_LOCKED]
                undone = self.backout.undo_gets(tx, q, got, now, count=count_backout)
                removed = tx.delete(q.id, [r.id for r in rows if r.state == _PUT_LOCKED])
                events = undone.events + self.sink.events(queue, "removed", removed, now, reason="deleted")
                self.sink.record(tx, events)
        self.backout.settle(undone)
        self.sink.dispatch(events)
        if error is not None:
            raise error
        return len(rows), undone.due

    def delete_message(self, queue: str, uid: MessageUID | str) -> None:
        """Delete one message by uid, whatever its state."""
        uid = check_uid(uid)
        self.expiry.touch(queue)
        now = self.clock()
        error: IntegrityError | None = None
        with self.sink.write() as tx:
            q = require_queue(tx, self.qm_name, queue)
            row, intact = self._find(tx, q, uid)
            if row is None:
                raise MessageNotFound(f"queue {queue!r} holds no message {uid}")
            if intact:
                events = self._delete_row(tx, q, row, now, "get", "deleted")
            else:
                events, error = self._set_aside(tx, q, [row], now)
        self.sink.dispatch(events)
        if error is not None:
            raise error

    def purge(self, name: str) -> int:
        """Remove every message from a queue (rules see reason ``purged``); return how many."""
        self.expiry.touch(name)
        if not self.sink.observed(name, "removed"):
            with self.sink.write() as tx:
                return tx.delete_all(require_queue(tx, self.qm_name, name).id)
        return self.expiry.remove_in_batches(
            name, lambda tx, q, now: tx.ids(q.id, DISCARD_BATCH), "removed", reason="purged"
        )

    def due_in(self, queue: str) -> float | None:
        """Seconds until the first delayed message of ``queue`` may be got (None: none, or no queue).
        For waiting gets only: never on the path of a get that finds a message."""
        now = self.clock()
        with self.sink.db.read() as conn:
            tx = Tx(conn)
            q = tx.queue(queue)
            at = None if q is None else tx.next_due(q.id, now)
        return None if at is None else (at - now) / 1000

    def release_locks(self, queue: str) -> int:
        """Undo every assured-get lock on a queue (its getter is gone); return how many. Each counts
        a backout but has no redelivery delay: the getter failed, maybe not the message."""
        self.expiry.touch(queue)
        now = self.clock()
        with self.sink.write() as tx:
            q = require_queue(tx, self.qm_name, queue)
            ids = tx.get_locked(q.id)
            if q.backout_threshold is None:  # nothing can move: no need to read the rows
                tx.back_out(ids)
                undone = Undone()
            else:
                rows = tolerant(tx.conn, lambda: tx.rows(ids))
                undone = self.backout.undo_gets(tx, q, rows, now, count=True, delay=False)
                self.sink.record(tx, undone.events)
        self.backout.settle(undone)
        self.sink.dispatch(undone.events)
        return len(ids)

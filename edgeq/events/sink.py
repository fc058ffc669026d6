"""The event sink: the one writer of what a queue manager owes its rules and its journal.

Events are made here (no copies when nothing wants them), recorded in the caller's transaction and
delivered after the commit; the journal's readers are here too, so its rows are written in one place."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import TypeVar

from edgeq.args import check_int, check_non_negative, check_positive
from edgeq.errors import InvalidArgument
from edgeq.events.dispatch import Dispatcher, Pending
from edgeq.names import check_name
from edgeq.store.connection import ConnectionFactory
from edgeq.store.damage import index_damaged
from edgeq.store.journal import (
    DEVICE_KINDS,
    JournalEntry,
    JournalKind,
    JournalSide,
    JournalTx,
    RemoteExpiryResult,
    entry_row,
    remote_expiry_refusal,
)
from edgeq.store.records import MessageRow, NewMessage, QueueRow, is_intact
from edgeq.store.rows import is_expired, plain_size
from edgeq.store.tx import Tx
from edgeq.store.verify import diagnose, lenient, stripped
from edgeq.types import Clock, EventKind, RemovalReason, Where

T = TypeVar("T")

__all__ = ["EventSink"]

log = logging.getLogger("edgeq")

#: The kinds of event whose rows were read from the store (an ``added`` row was made just now).
_READ = frozenset({"expired", "removed"})


class EventSink:
    """Builds, records and delivers a queue manager's rule events and journal rows.

    ``journal``: ``"server"`` (accepted, expired, delivered), ``"device"`` (expiries only) or None."""

    def __init__(
        self, qm_name: str, db: ConnectionFactory, clock: Clock, rules: Dispatcher,
        journal: JournalSide | None,
    ) -> None:
        self.qm_name = qm_name
        self.db = db
        self.clock = clock
        self.rules = rules
        self.journal = journal

    @contextmanager
    def write(self, *, durable: bool = True) -> Iterator[Tx]:
        """A write transaction that also forgets the rule events delivered since the last one."""
        with self.db.write(durable=durable) as conn:
            self.rules.flush(conn)
            yield Tx(conn, self.db.known)

    def run(self, body: Callable[[Tx], T], *, durable: bool = True) -> T:
        """``body``'s result, in a write transaction (``ConnectionFactory.run``)."""

        def step(conn: sqlite3.Connection) -> T:
            self.rules.flush(conn)
            return body(Tx(conn, self.db.known))

        return self.db.run(step, durable=durable)

    # -- events ----------------------------------------------------------------------------

    def observed(self, queue: str, kind: EventKind) -> bool:
        """Whether rules or the journal must see this queue's ``kind`` events (a device's journal
        takes only expiries, so its puts and transmissions pay nothing extra)."""
        if self.rules.wants(queue):
            return True
        if self.journal == "server":
            return kind in ("expired", "removed")
        return self.journal == "device" and kind == "expired"

    def events(
        self, queue: str, kind: EventKind, rows: Iterable[MessageRow], now_ms: int,
        *, where: Where | None = None, reason: RemovalReason | None = None,
    ) -> list[Pending]:
        """One event per row; empty (and no copies made) if nothing wants them."""
        if not self.observed(queue, kind):
            return []
        return [Pending(kind, queue, now_ms, row=row, where=where, reason=reason) for row in rows]

    def added(self, queue: str, rows: Iterable[NewMessage], now_ms: int) -> list[Pending]:
        """One ``added`` event per row put, kept as put; empty if nothing wants them."""
        if not self.observed(queue, "added"):
            return []
        return [Pending("added", queue, now_ms, new=row) for row in rows]

    def record(self, tx: Tx, events: list[Pending]) -> None:
        """Make the events durable in the caller's transaction (a damaged row becomes a ``quarantined``
        removal; an "expired" row that has not expired raises: a damaged deadline index)."""
        if not events:
            return
        for ev in events:
            row = ev.row
            if row is None or ev.kind not in _READ or ev.reason == "quarantined":
                continue
            if not is_intact(ev.queue, row):
                self._set_aside(tx, ev, row)
            elif ev.kind == "expired" and not is_expired(row, ev.at_ms):  # its deadline came from an index
                raise index_damaged(
                    f"message {row.origin}.{row.stamp} of queue {ev.queue!r} was taken for expired "
                    "through the deadline index, and it is not", tx.conn,
                )
        self.rules.record(tx.conn, events)
        if self.journal is None:
            return
        rows = []
        for ev in events:
            row = ev.row
            if row is None:
                continue
            uid = f"{row.origin}.{row.stamp}"
            if ev.kind == "expired":
                rows.append(entry_row(
                    "expired", self.journal, ev.at_ms, ev.queue, uid, row.origin, check_point=ev.where,
                    size=plain_size(row), created_ms=row.created_ms, arrived_ms=row.arrived_ms,
                ))
            elif ev.kind == "removed" and ev.reason in ("got", "confirmed") and self.journal == "server":
                rows.append(entry_row(
                    "delivered", "server", ev.at_ms, ev.queue, uid, row.origin, size=plain_size(row),
                    created_ms=row.created_ms, arrived_ms=row.arrived_ms,
                ))
        if rows:
            JournalTx(tx.conn).add(rows)

    def accepted(
        self, tx: Tx, queue: str, rows: Sequence[MessageRow], now_ms: int, *, device: str | None,
        clock_offset_ms: int | None,
    ) -> None:
        """Journal the confirmed assured puts of ``rows`` (a home server's ``accepted``)."""
        if self.journal != "server" or not rows:
            return
        JournalTx(tx.conn).add(
            entry_row(
                "accepted", "server", now_ms, queue, f"{row.origin}.{row.stamp}", row.origin,
                size=plain_size(row), created_ms=row.created_ms, arrived_ms=row.arrived_ms,
                confirmed_ms=now_ms, clock_offset_ms=clock_offset_ms, device=device or row.origin,
            )
            for row in rows
        )

    def dispatch(self, events: list[Pending]) -> None:
        if events:
            self.rules.dispatch(events)

    def quarantine(
        self, tx: Tx, q: QueueRow, row: MessageRow, now: int, *, through_index: bool = False,
        same_tx: bool = True,
    ) -> list[Pending]:
        """Quarantine a row of ``q`` failing its integrity check (``through_index``: unless only the
        index is damaged, raised; ``same_tx=False``: read earlier, skipped if gone since)."""
        with lenient(tx.conn):  # a damaged row's text may not even be UTF-8
            if through_index:
                found = diagnose(tx, q, row, same_tx=same_tx)
                if found is None:
                    return []
                q, row = found
            tx.quarantine(q.name, q.id, row, "integrity check failed", now)
        log.error(
            "message %s.%s on queue %s failed its integrity check: quarantined", row.origin, row.stamp, q.name
        )
        return self._copies(q.name, row, now)

    def _copies(self, queue: str, row: MessageRow, now: int) -> list[Pending]:
        """The event of a quarantined row, if anything wants it: removed, with its uid alone (if readable)."""
        if not self.observed(queue, "removed"):
            return []
        return [Pending("removed", queue, now, row=stripped(row), reason="quarantined")]

    def _set_aside(self, tx: Tx, ev: Pending, row: MessageRow) -> None:
        """Quarantine a row already deleted that fails its checksum, and turn its event to say so."""
        q = tx.queue(ev.queue)
        with lenient(tx.conn):
            tx.quarantine(ev.queue, q.id if q is not None else 0, row, "integrity check failed", ev.at_ms)
        log.error(
            "message %s.%s on queue %s failed its integrity check: quarantined",
            row.origin, row.stamp, ev.queue,
        )
        ev.kind, ev.where, ev.reason, ev.row = "removed", None, "quarantined", stripped(row)

    # -- the journal -----------------------------------------------------------------------

    def journal_since(self, after_id: int, limit: int) -> list[JournalEntry]:
        """Journal entries with an id above ``after_id``, oldest first (at most ``limit``)."""
        check_non_negative(after_id, "after_id")
        limit = check_positive(limit, "limit")
        with self.db.read() as conn:
            return JournalTx(conn).since(after_id, limit)

    def journal_trim(self, up_to_id: int) -> int:
        """Delete journal entries up to ``up_to_id``; return how many."""
        check_int(up_to_id, "up_to_id")
        with self.write() as tx:
            return JournalTx(tx.conn).trim(up_to_id)

    def remote_expiries(self, device: str, entries: Sequence[JournalEntry], clock_offset_ms: int) -> int:
        """Record the expiries a device reports, unchecked; return how many were new."""
        self._check_remote(device, clock_offset_ms, "journal_remote_expiries")
        rows = [_device_expiry_row(device, e, clock_offset_ms) for e in entries if e.kind in DEVICE_KINDS]
        with self.write() as tx:
            before = tx.conn.total_changes
            JournalTx(tx.conn).add(rows)
            return tx.conn.total_changes - before

    def remote_expiries_each(
        self, device: str, entries: Sequence[JournalEntry], clock_offset_ms: int
    ) -> list[RemoteExpiryResult]:
        """Record the expiries a device reports, answering each (foreign ones refused)."""
        self._check_remote(device, clock_offset_ms, "journal_remote_expiries_each")
        refusals = [remote_expiry_refusal(device, e) for e in entries]
        rows = [
            _device_expiry_row(device, e, clock_offset_ms)
            for e, why in zip(entries, refusals, strict=True) if why is None
        ]
        added: Iterator[bool] = iter(())
        if rows:
            with self.write() as tx:
                added = iter(JournalTx(tx.conn).add_each(rows))
        return [
            RemoteExpiryResult(e.uid, e.queue, "refused", why) if why is not None
            else RemoteExpiryResult(e.uid, e.queue, "recorded" if next(added) else "already")
            for e, why in zip(entries, refusals, strict=True)
        ]

    def _check_remote(self, device: str, clock_offset_ms: object, verb: str) -> None:
        check_name(device, "device name")
        if self.journal != "server":
            raise InvalidArgument(f"{verb} needs QueueManager(..., journal='server')")
        check_int(clock_offset_ms, "clock_offset_ms")


def _device_expiry_row(device: str, e: JournalEntry, clock_offset_ms: int) -> tuple[object, ...]:
    """The journal row of an expiry (or dead-lettering) ``device`` reported, rebased to our clock."""
    kind: JournalKind = next((k for k in DEVICE_KINDS if k == e.kind), "expired")
    return entry_row(
        kind, "device", e.at_ms - clock_offset_ms, e.queue, e.uid, e.origin,
        check_point=e.check_point, size=e.size, created_ms=e.created_ms,
        arrived_ms=None if e.arrived_ms is None else e.arrived_ms - clock_offset_ms,
        clock_offset_ms=clock_offset_ms, device=device,
    )

"""Held puts: assured puts stored locked and never confirmed, by sender (docs/protocol.md, 'Held puts')."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

from edgeq.args import check_non_negative, check_uid
from edgeq.errors import InvalidArgument
from edgeq.events.dispatch import Pending
from edgeq.events.sink import EventSink
from edgeq.names import check_name, origin_qmgr
from edgeq.queues.attributes import require_queue
from edgeq.queues.checkpoints import DISCARD_BATCH
from edgeq.store.rows import is_expired
from edgeq.store.tx import Tx
from edgeq.types import MessageState
from edgeq.uid import MessageUID

__all__ = ["HeldGroup", "HeldTx", "HeldUsage", "Holds"]

_PUT_LOCKED = int(MessageState.PUT_LOCKED)
_SIZE = "length(data) + ifnull(length(fields), 0)"  # as stored: what queues.bytes counts


@dataclass(frozen=True, slots=True)
class HeldUsage:
    """What one sender holds put-locked: ``messages``, their ``bytes`` (data plus fields,
    as stored) and the earliest arrival among them (``oldest_ms``; None: none held)."""

    messages: int
    bytes: int
    oldest_ms: int | None = None


@dataclass(frozen=True, slots=True)
class HeldGroup:
    """The put-locked messages of one ``sender`` on one ``queue``."""

    sender: str
    queue: str
    messages: int
    bytes: int
    oldest_ms: int


class HeldTx:
    """The held-put queries on one open transaction."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    @staticmethod
    def _held_by(sender: str | None) -> tuple[str, tuple[str, ...]]:
        """The condition on put-locked rows of ``sender`` (its origins are ``NAME`` and
        ``NAME:<incarnation>``), or of every sender: an index seek either way."""
        if sender is None:
            return f"state = {_PUT_LOCKED}", ()
        # One range seek from NAME to NAME; (';' follows ':'), then keep NAME itself and
        # NAME:...: the range also holds names that merely start with NAME (NAME0, NAME-X).
        return (f"state = {_PUT_LOCKED} AND origin >= ? AND origin < ? AND (origin = ? OR origin > ?)",
                (sender, f"{sender};", sender, f"{sender}:"))

    def usage(self, sender: str) -> HeldUsage:
        """What ``sender`` holds put-locked on every queue."""
        where, args = self._held_by(sender)
        count, size, oldest = self.conn.execute(
            f"SELECT count(*), ifnull(sum({_SIZE}), 0), min(arrived_ms) FROM messages WHERE {where}", args
        ).fetchone()
        return HeldUsage(int(count), int(size), oldest)

    def among(self, queue_id: int, uids: Sequence[tuple[str, int]]) -> HeldUsage:
        """How many of these uids a queue holds put-locked, and their bytes: one query
        whatever the batch (the uids go in as one JSON array)."""
        if not uids:
            return HeldUsage(0, 0)
        count, size = self.conn.execute(
            # CROSS JOIN: the uids drive the loop, each a seek on messages_uid (never a queue scan).
            f"SELECT count(*), ifnull(sum({_SIZE}), 0) FROM json_each(?) AS u "
            "CROSS JOIN messages ON queue_id = ? "
            "AND origin = json_extract(u.value, '$[0]') AND stamp = json_extract(u.value, '$[1]') "
            f"WHERE state = {_PUT_LOCKED}",
            (json.dumps([[origin, stamp] for origin, stamp in uids]), queue_id),
        ).fetchone()
        return HeldUsage(int(count), int(size))

    def groups(self, sender: str | None, arrived_by: int | None) -> list[HeldGroup]:
        """Put-locked rows (of ``sender``; that arrived at or before ``arrived_by``)
        summed by sender and queue, by sender then queue."""
        where, args = self._held_by(sender)
        age, more = ("", ()) if arrived_by is None else (" AND arrived_ms <= ?", (arrived_by,))
        rows = self.conn.execute(
            f"SELECT origin, q.name, count(*), sum({_SIZE}), min(arrived_ms) FROM messages "
            f"JOIN queues AS q ON q.id = queue_id WHERE {where}{age} GROUP BY origin, queue_id",
            (*args, *more),
        )
        # Incarnations of one sender are one sender: fold them.
        folded: dict[tuple[str, str], tuple[int, int, int]] = {}
        for origin, queue, count, size, oldest in rows:
            key = (origin_qmgr(origin), queue)
            n, b, o = folded.get(key, (0, 0, oldest))
            folded[key] = (n + count, b + size, min(o, oldest))
        return [HeldGroup(s, q, n, b, o) for (s, q), (n, b, o) in sorted(folded.items())]

    def ids(self, sender: str | None, arrived_by: int, limit: int) -> list[tuple[int, int]]:
        """Up to ``limit`` put-locked rows (of ``sender``) that arrived at or before
        ``arrived_by``: (queue id, row id)."""
        where, args = self._held_by(sender)
        rows = self.conn.execute(
            f"SELECT queue_id, id FROM messages WHERE {where} AND arrived_ms <= ? LIMIT ?",
            (*args, arrived_by, limit),
        )
        return [(int(q), int(i)) for q, i in rows]


def _check_sender(sender: object) -> str | None:
    return None if sender is None else check_name(sender, "sender (a queue manager name)")


class Holds:
    """The held puts of a queue manager: measured, listed and undone by sender."""

    def __init__(self, qm_name: str, sink: EventSink) -> None:
        self.qm_name = qm_name
        self.sink = sink
        self.clock = sink.clock

    def usage(
        self, sender: str, *, queue: str | None = None, uids: Sequence[MessageUID | str] | None = None
    ) -> HeldUsage:
        """What ``sender`` holds put-locked; with ``queue`` and ``uids``, only those of
        the uids that ``queue`` holds put-locked (``oldest_ms`` is then None)."""
        checked = check_name(sender, "sender (a queue manager name)")
        if (queue is None) != (uids is None):
            raise InvalidArgument("give queue and uids together, or neither")
        with self.sink.db.read() as conn:
            if queue is None or uids is None:
                return HeldTx(conn).usage(checked)
            keys = [(u.origin, u.stamp) for u in map(check_uid, uids)]
            return HeldTx(conn).among(require_queue(Tx(conn), self.qm_name, queue).id, keys)

    def held(self, sender: str | None = None, *, older_than_ms: int | None = None) -> list[HeldGroup]:
        """The held puts (of ``sender``; held at least ``older_than_ms``) by sender and queue."""
        sender = _check_sender(sender)
        arrived_by = (None if older_than_ms is None
                      else self.clock() - check_non_negative(older_than_ms, "older_than_ms"))
        with self.sink.db.read() as conn:
            return HeldTx(conn).groups(sender, arrived_by)

    def undo(self, sender: str | None = None, *, older_than_ms: int = 0) -> int:
        """Undo the held puts (of ``sender``) that arrived ``older_than_ms`` or more ago, a batch
        per transaction; return how many."""
        sender = _check_sender(sender)
        age = check_non_negative(older_than_ms, "older_than_ms")
        total = 0
        while True:
            now = self.clock()
            with self.sink.write() as tx:
                picked = HeldTx(tx.conn).ids(sender, now - age, DISCARD_BATCH)
                by_queue: dict[int, list[int]] = {}
                for queue_id, row_id in picked:
                    by_queue.setdefault(queue_id, []).append(row_id)
                names = {q.id: q.name for q in tx.queues()} if picked else {}
                events: list[Pending] = []
                for queue_id, row_ids in by_queue.items():
                    rows = tx.delete(queue_id, row_ids)
                    name = names[queue_id]
                    events += self.sink.events(
                        name, "expired", [r for r in rows if is_expired(r, now)], now, where="sweep"
                    )
                    events += self.sink.events(
                        name, "removed", [r for r in rows if not is_expired(r, now)], now, reason="deleted"
                    )
                self.sink.record(tx, events)
            self.sink.dispatch(events)
            total += len(picked)
            if len(picked) < DISCARD_BATCH:
                return total

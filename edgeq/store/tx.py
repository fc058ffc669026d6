"""Every SQL statement edgeq runs on messages and queues, in :class:`Tx`: rows, not policy. Verbs
adding or removing rows move ``queues.depth`` and ``bytes`` with them, so a depth is one row read."""

from __future__ import annotations

import sqlite3
from collections.abc import Generator, Iterable, Iterator, Sequence

from edgeq.store.damage import advance, checked_queue, missing_queue
from edgeq.store.integrity import CRC_SQL
from edgeq.store.records import MessageRow, NewMessage, QueueRow, new_crc, stored_size
from edgeq.store.syncstate import forget_refusals, prune_refusals
from edgeq.store.uids import CHUNK, UidTx, by_origin
from edgeq.types import MessageState

__all__ = ["Tx"]

# Message states as SQL literals (edgeq.types.MessageState): one definition, inlined.
_READY, _PUT_LOCKED, _GET_LOCKED = (int(s) for s in MessageState)

_MSG_COLS = (
    "id, origin, stamp, state, confirm_id, priority, created_ms, arrived_ms, expiry_kind, "
    "expiry_value, cap_at, deadline, backout_count, correlation_id, reply_to, report, fields, data, "
    "key_id, crc"
)
_QUEUE_COLS = (
    "id, name, expiry_ms, cap_expiry_ms, max_depth, max_message_bytes, default_priority, "
    "ordering, created_ms, depth, depth_threshold, kind, target_qmgr, target_queue, mode, server, "
    "encryption, bytes, max_bytes, on_full, refusal_limit, backout_threshold, backout_queue, "
    "compression, redelivery_delay_ms, max_redelivery_delay_ms"
)


_FIND = f"SELECT {_MSG_COLS} FROM messages WHERE queue_id = ? AND origin = ? AND stamp = ?"
_READY_PAGE = (  # ?3 NULL: browse, delayed or not
    f"SELECT {_MSG_COLS}, rank, seq FROM messages WHERE queue_id = ?1 AND state = {_READY} "
    "AND (?3 IS NULL OR coalesce(not_before, 0) <= ?3)"
)
_READY_FIRST = f"{_READY_PAGE} ORDER BY rank DESC, seq LIMIT ?2"
_READY_NEXT = f"{_READY_PAGE} AND (rank < ?4 OR (rank = ?4 AND seq > ?5)) ORDER BY rank DESC, seq LIMIT ?2"
_INSERT = """INSERT INTO messages (queue_id, origin, stamp, state, confirm_id, rank, seq, priority,
    created_ms, arrived_ms, expiry_kind, expiry_value, cap_at, deadline, correlation_id, reply_to, report,
    fields, data, key_id, crc) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"""


def _chunks(ids: Sequence[int]) -> Iterator[Sequence[int]]:
    for start in range(0, len(ids), CHUNK):
        yield ids[start : start + CHUNK]


class Tx(UidTx):
    """The verbs of one transaction on ``conn`` (opened by ``ConnectionFactory``)."""

    def __init__(
        self, conn: sqlite3.Connection, known: dict[tuple[object, ...], object] | None = None
    ) -> None:
        self.conn = conn
        self.known = known  # ConnectionFactory.known: definition(), counters(), stamps()
        self._kinds: dict[int, str] = {}  # queues looked up here: a local one keeps no refusal counts

    # -- queues --------------------------------------------------------------------

    def queue(self, name: str) -> QueueRow | None:
        """The row of the queue named ``name``, or None (found by its index: damage.missing_queue)."""
        sql = f"SELECT {_QUEUE_COLS} FROM queues WHERE id = (SELECT id FROM queues WHERE name = ?)"
        row = self.conn.execute(sql, (name,)).fetchone()
        if row is None or row[1] != name:
            missing_queue(self.conn, name, row)
            return None
        found = checked_queue(QueueRow(*row), self.conn)
        self._kinds[found.id] = found.kind
        if self.known is not None:
            self.known[("counters", found.id)] = [found.depth, found.bytes]
        return found

    def definition(self, name: str) -> QueueRow | None:
        """Like :meth:`queue`, from ``known`` when it holds it: its ``depth`` and ``bytes`` may be stale
        (:meth:`counters` has them)."""
        found = None if self.known is None else self.known.get(("queue", name))
        if isinstance(found, QueueRow):
            self._kinds[found.id] = found.kind
            return found
        row = self.queue(name)
        if row is not None and self.known is not None:
            self.known[("queue", name)] = row
        return row

    def counters(self, queue_id: int) -> tuple[int, int]:
        """A queue's depth and bytes now, from ``known`` when it holds them."""
        found = None if self.known is None else self.known.get(("counters", queue_id))
        if isinstance(found, list):
            return found[0], found[1]
        sql = "SELECT depth, bytes FROM queues WHERE id = ?"
        depth, size = self.conn.execute(sql, (queue_id,)).fetchone()
        if self.known is not None:
            self.known[("counters", queue_id)] = [depth, size]
        return depth, size

    def queues(self) -> list[QueueRow]:
        """Every queue row, by name."""
        rows = self.conn.execute(f"SELECT {_QUEUE_COLS} FROM queues NOT INDEXED ORDER BY name").fetchall()
        return [checked_queue(QueueRow(*row), self.conn) for row in rows]

    def insert_queue(self, name: str, attrs: dict[str, object], now_ms: int) -> None:
        """Insert a new, empty queue with the attribute columns ``attrs``."""
        cols = ", ".join(attrs)
        marks = ", ".join("?" for _ in attrs)
        self.conn.execute(
            f"INSERT INTO queues (name, created_ms, depth, {cols}) VALUES (?, ?, 0, {marks})",
            (name, now_ms, *attrs.values()),
        )

    def update_queue(self, queue_id: int, attrs: dict[str, object]) -> None:
        """Set the attribute columns ``attrs`` of a queue."""
        sets = ", ".join(f"{col} = ?" for col in attrs)
        self.conn.execute(f"UPDATE queues SET {sets} WHERE id = ?", (*attrs.values(), queue_id))

    def delete_queue(self, queue_id: int) -> None:
        """Delete an (empty) queue, its rule bindings and counters: a new one of its name starts afresh."""
        self.conn.execute("DELETE FROM rule_bindings WHERE queue_id = ?", (queue_id,))
        self.conn.execute("DELETE FROM confirmed_uids WHERE queue_id = ?", (queue_id,))
        self.conn.execute("DELETE FROM refusals WHERE queue_id = ?", (queue_id,))
        self.conn.execute(
            "DELETE FROM queue_stats WHERE queue = (SELECT name FROM queues WHERE id = ?)", (queue_id,)
        )
        self.conn.execute("DELETE FROM queues WHERE id = ?", (queue_id,))

    def retime(self, queue_id: int, expiry_ms: int | None) -> None:
        """Re-time messages without their own expiry to a new queue expiry (and their checksums)."""
        self.conn.execute(
            """UPDATE messages SET deadline = CASE
                   WHEN ?1 IS NULL THEN cap_at
                   WHEN cap_at IS NULL THEN arrived_ms + ?1
                   ELSE min(cap_at, arrived_ms + ?1) END
               WHERE queue_id = ?2 AND expiry_kind = 0""",
            (expiry_ms, queue_id),
        )
        self.conn.execute(
            f"UPDATE messages SET crc = {CRC_SQL} WHERE queue_id = ? AND expiry_kind = 0", (queue_id,)
        )

    def rerank(self, queue_id: int, by_priority: bool) -> None:
        """Re-order a queue's messages for a new ordering (priority or FIFO)."""
        self.conn.execute(
            "UPDATE messages SET rank = CASE WHEN ? THEN priority ELSE 0 END WHERE queue_id = ?",
            (by_priority, queue_id),
        )

    # -- messages: add and remove --------------------------------------------------

    def insert(self, queue_id: int, queue: str, rows: Sequence[NewMessage]) -> None:
        """Insert message rows into queue ``queue``, each with its checksum."""
        size = 0
        checked = []
        for r in rows:
            size += len(r.data) + (len(r.fields) if r.fields is not None else 0)
            checked.append((queue_id, *r, new_crc(queue, r)))
        self.conn.executemany(_INSERT, checked)
        self._move_depth(queue_id, len(rows), size)

    def delete(self, queue_id: int, ids: Sequence[int]) -> list[MessageRow]:
        """Delete this queue's rows with these ids, and return them."""
        if not ids:
            return []
        out: list[MessageRow] = []
        for chunk in _chunks(ids):
            marks = ", ".join("?" for _ in chunk)
            out.extend(
                MessageRow(*row)
                for row in self.conn.execute(  # +queue_id: a filter, so the rowids are looked up
                    f"DELETE FROM messages WHERE id IN ({marks}) AND +queue_id = {int(queue_id)} "
                    f"RETURNING {_MSG_COLS}", chunk,
                )
            )
        return self._gone(queue_id, out)

    def delete_row(self, queue_id: int, row: MessageRow) -> list[MessageRow]:
        """Delete a row this transaction read (``[row]``; ``[]`` if it is not on the queue): no copy
        is read back, as :meth:`delete` does."""
        cur = self.conn.execute("DELETE FROM messages WHERE id = ? AND +queue_id = ?", (row.id, queue_id))
        return self._gone(queue_id, [row] if cur.rowcount else [])

    def _gone(self, queue_id: int, out: list[MessageRow]) -> list[MessageRow]:
        """Count deleted rows out of their queue (and their refusal counts); return them."""
        self._move_depth(queue_id, -len(out), -sum(map(stored_size, out)))
        if out and self._kinds.get(queue_id, "remote") == "remote":  # their refusal counts go too
            forget_refusals(self.conn, queue_id, [(row.origin, row.stamp) for row in out])
        return out

    def delete_expired(self, queue_id: int, now_ms: int) -> int:
        """Delete every expired row of a queue (no copies kept); return how many."""
        # Sum first, then delete: RETURNING buffers a row per message (+50-90% on 1M).
        count, size = self.expired_totals(queue_id, now_ms)
        if count:
            self.conn.execute("DELETE FROM messages WHERE queue_id = ? AND deadline <= ?", (queue_id, now_ms))
            self._move_depth(queue_id, -count, -size)
            if self._kinds.get(queue_id, "remote") == "remote":
                prune_refusals(self.conn, queue_id)
        return int(count)

    def delete_all(self, queue_id: int) -> int:
        """Delete every message of a queue, in any state; return how many."""
        cur = self.conn.execute("DELETE FROM messages WHERE queue_id = ?", (queue_id,))
        self.conn.execute("UPDATE queues SET depth = 0, bytes = 0 WHERE id = ?", (queue_id,))
        if self.known is not None:
            self.known.pop(("counters", queue_id), None)
        self.conn.execute("DELETE FROM refusals WHERE queue_id = ?", (queue_id,))
        return cur.rowcount

    def _move_depth(self, queue_id: int, delta: int, size: int) -> None:
        if delta:
            self.conn.execute(
                "UPDATE queues SET depth = depth + ?, bytes = bytes + ? WHERE id = ?", (delta, size, queue_id)
            )
            counted = None if self.known is None else self.known.get(("counters", queue_id))
            if isinstance(counted, list):
                counted[0] += delta
                counted[1] += size

    def store_bytes(self) -> int:
        """Data plus fields of every message of every queue (a sum over the queue rows)."""
        (total,) = self.conn.execute("SELECT ifnull(sum(bytes), 0) FROM queues").fetchone()
        return int(total)

    # -- overflow: what a full queue may discard (edgeq.queues.budget) ---------------------------

    def overflow_candidates(
        self, queue_id: int, *, ranked: bool, lowest_first: bool
    ) -> Generator[MessageRow, None, None]:
        """A queue's ready messages in its ``on_full``'s discard order, lazily (close it when done)."""
        # Ranked: rank is the priority, so SQLite merges ten ranges of the ready index, never sorting
        # the queue. FIFO by priority must be sorted: no index orders it so.
        cols = f"{_MSG_COLS}, rank, seq"
        if ranked:
            arms = " UNION ALL ".join(
                f"SELECT {cols} FROM messages WHERE queue_id = ?1 AND state = {_READY} AND rank = {rank}"
                for rank in range(10)
            )
            sql = f"{arms} ORDER BY {'rank, seq' if lowest_first else 'seq'}"
        else:
            order = "priority, seq" if lowest_first else "rank DESC, seq"
            sql = f"SELECT {cols} FROM messages WHERE queue_id = ?1 AND state = {_READY} ORDER BY {order}"
        cursor = self.conn.execute(sql, (queue_id,))
        try:
            for row in cursor:
                yield MessageRow(*row[:-2])
        finally:
            cursor.close()

    # -- messages: find ----------------------------------------------------------------

    def find(self, queue_id: int, origin: str, stamp: int) -> MessageRow | None:
        """The message of a queue with uid (``origin``, ``stamp``), or None."""
        row = self.conn.execute(_FIND, (queue_id, origin, stamp)).fetchone()
        return None if row is None else MessageRow(*row)

    def find_many(self, queue_id: int, uids: Sequence[tuple[str, int]]) -> dict[tuple[str, int], MessageRow]:
        """The rows held for these (origin, stamp) uids, keyed by uid."""
        # Per origin, so SQLite seeks the whole messages_uid index (a row-value IN scans the queue).
        out: dict[tuple[str, int], MessageRow] = {}
        for origin, stamps in by_origin(uids):
            marks = ", ".join("?" for _ in stamps)
            for row in self.conn.execute(
                f"SELECT {_MSG_COLS} FROM messages WHERE queue_id = ? AND origin = ? AND stamp IN ({marks})",
                (queue_id, origin, *stamps),
            ):
                found = MessageRow(*row)
                out[(found.origin, found.stamp)] = found
        return out

    def find_by_confirm_id(self, queue_id: int, confirm_id: int) -> list[MessageRow]:
        """The rows locked under ``confirm_id`` (by an unconfirmed put or get), in id order."""
        rows = self.conn.execute(
            f"SELECT {_MSG_COLS} FROM messages WHERE queue_id = ? AND confirm_id = ? ORDER BY id",
            (queue_id, confirm_id),
        ).fetchall()
        return [MessageRow(*row) for row in rows]

    def rows(self, ids: Sequence[int]) -> list[MessageRow]:
        """The rows with these ids that exist, in no particular order."""
        out: list[MessageRow] = []
        for chunk in _chunks(ids):
            marks = ", ".join("?" for _ in chunk)
            out.extend(
                MessageRow(*row)
                for row in self.conn.execute(f"SELECT {_MSG_COLS} FROM messages WHERE id IN ({marks})", chunk)
            )
        return out

    def ids(self, queue_id: int, limit: int) -> list[int]:
        """Up to ``limit`` message ids of a queue, any state (for purging in batches)."""
        rows = self.conn.execute("SELECT id FROM messages WHERE queue_id = ? LIMIT ?", (queue_id, limit))
        return [row[0] for row in rows]

    def ready(
        self, queue_id: int, page: int, due_at: int | None = None, *, then: int | None = None
    ) -> Iterator[list[MessageRow]]:
        """Ready messages in get order, a page at a time (rows may be deleted between pages), the
        pages after the first of ``then`` rows if given; with ``due_at`` (epoch ms), only those whose
        redelivery delay has passed by then."""
        # Keyset paging on (rank, seq): every page an index seek. The delay is a filter, not an
        # index: get order stays the index's. ?3 is NULL for browse: delayed or not.
        after: tuple[int, int] | None = None
        while True:
            if after is None:
                rows = self.conn.execute(_READY_FIRST, (queue_id, page, due_at)).fetchall()
            else:
                rows = self.conn.execute(_READY_NEXT, (queue_id, page, due_at, after[0], after[1])).fetchall()
            if not rows:
                return
            after = advance(self.conn, queue_id, after, (rows[-1][-2], rows[-1][-1]))  # never loops on damage
            yield [MessageRow(*row[:-2]) for row in rows]
            if len(rows) < page:
                return
            page = then or page

    def expired_totals(self, queue_id: int, now_ms: int) -> tuple[int, int]:
        """How many messages of the queue are past their deadline, and their bytes as stored."""
        count, size = self.conn.execute(
            "SELECT count(*), ifnull(sum(length(data) + ifnull(length(fields), 0)), 0) FROM messages "
            "WHERE queue_id = ? AND deadline <= ?",
            (queue_id, now_ms),
        ).fetchone()
        return int(count), int(size)

    def has_expired(self, queue_id: int, now_ms: int) -> bool:
        """Whether any message of the queue, in any state, is past its deadline."""
        row = self.conn.execute(
            "SELECT 1 FROM messages WHERE queue_id = ? AND deadline <= ? LIMIT 1", (queue_id, now_ms)
        ).fetchone()
        return row is not None

    def expired_ids(self, queue_id: int, now_ms: int, limit: int, *, ready_only: bool = False) -> list[int]:
        """Ids of up to ``limit`` expired messages, earliest deadline first (``ready_only``: ready ones)."""
        state = f" AND state = {_READY}" if ready_only else ""
        rows = self.conn.execute(
            f"SELECT id FROM messages WHERE queue_id = ? AND deadline <= ?{state} ORDER BY deadline LIMIT ?",
            (queue_id, now_ms, limit),
        ).fetchall()
        return [row[0] for row in rows]

    # -- messages: state changes ---------------------------------------------------------

    def lock_for_get(self, ids: Iterable[int], confirm_id: int) -> None:
        """Lock rows for a get under ``confirm_id``: invisible until the get is confirmed or undone."""
        self.conn.executemany(
            f"UPDATE messages SET state = {_GET_LOCKED}, confirm_id = ? WHERE id = ?",
            [(confirm_id, i) for i in ids],
        )

    def make_ready(self, ids: Sequence[int], first_seq: int) -> None:
        """Confirm puts: the messages become visible, ordered by confirm time (then by ``ids`` order)."""
        self.conn.executemany(
            f"UPDATE messages SET state = {_READY}, confirm_id = NULL, seq = ? WHERE id = ?",
            [(first_seq + n, msg_id) for n, msg_id in enumerate(ids)],
        )

    def quarantine(self, queue: str, queue_id: int, row: MessageRow, reason: str, now_ms: int) -> None:
        """Move a row that failed its integrity check out of the queue, whole."""
        import cbor2

        self.conn.execute(
            "INSERT INTO quarantine (queue, uid, at_ms, reason, row) VALUES (?, ?, ?, ?, ?)",
            (queue, f"{row.origin}.{row.stamp}", now_ms, reason, cbor2.dumps(list(row))),
        )
        self.delete(queue_id, [row.id])

    def quarantined(self) -> list[tuple[int, str, str, int, str]]:
        """The quarantined rows as (id, queue, uid, at_ms, reason), oldest first."""
        return self.conn.execute(
            "SELECT id, queue, uid, at_ms, reason FROM quarantine ORDER BY id"
        ).fetchall()

    def stale_sealed(self, queue_id: int, current_key: str, limit: int) -> list[MessageRow]:
        """Rows of a queue sealed with another key than ``current_key`` (or not at all)."""
        rows = self.conn.execute(
            f"SELECT {_MSG_COLS} FROM messages "
            "WHERE queue_id = ? AND (key_id IS NULL OR key_id != ?) LIMIT ?",
            (queue_id, current_key, limit),
        ).fetchall()
        return [MessageRow(*row) for row in rows]

    def reseal(self, rows: Sequence[tuple[bytes | None, bytes, str, int]]) -> None:
        """Store re-encrypted (fields, data, key_id) for row ids, with new checksums."""
        self.conn.executemany("UPDATE messages SET fields = ?, data = ?, key_id = ? WHERE id = ?", rows)
        for chunk in _chunks([row[3] for row in rows]):
            marks = ", ".join("?" for _ in chunk)
            self.conn.execute(f"UPDATE messages SET crc = {CRC_SQL} WHERE id IN ({marks})", chunk)

    def get_locked(self, queue_id: int) -> list[int]:
        """Ids of a queue's messages locked by unconfirmed gets."""
        rows = self.conn.execute(
            f"SELECT id FROM messages WHERE queue_id = ? AND state = {_GET_LOCKED}", (queue_id,)
        )
        return [row[0] for row in rows]

    def back_out(self, ids: Iterable[int], *, count: bool = True) -> None:
        """Undo assured gets: ready again where they were, with one more backout (``count=False``: not)."""
        self.conn.executemany(
            f"UPDATE messages SET state = {_READY}, confirm_id = NULL, "
            f"backout_count = backout_count + {int(count)} WHERE id = ?",
            [(i,) for i in ids],
        )

    def back_out_until(self, due: Iterable[tuple[int, int | None]]) -> None:
        """Undo failed assured gets, each (id, not-before epoch ms or None), with one more backout."""
        self.conn.executemany(
            f"UPDATE messages SET state = {_READY}, confirm_id = NULL, backout_count = backout_count + 1, "
            "not_before = ? WHERE id = ?",
            [(at, i) for i, at in due],
        )

    def next_due(self, queue_id: int, now_ms: int) -> int | None:
        """The first time after ``now_ms`` a ready message waiting out a delay may be got (None: none)."""
        (at,) = self.conn.execute(
            "SELECT min(not_before) FROM messages "
            f"WHERE queue_id = ? AND not_before > ? AND state = {_READY}",
            (queue_id, now_ms),
        ).fetchone()
        return None if at is None else int(at)

    def ids_of(self, queue_id: int, uids: Sequence[tuple[str, int]]) -> list[int]:
        """The ids of the rows held for these (origin, stamp) uids: the uid index alone, no row read."""
        out: list[int] = []
        for origin, stamps in by_origin(uids):
            marks = ", ".join("?" for _ in stamps)
            out.extend(row_id for (row_id,) in self.conn.execute(
                f"SELECT id FROM messages WHERE queue_id = ? AND origin = ? AND stamp IN ({marks})",
                (queue_id, origin, *stamps),
            ))
        return out

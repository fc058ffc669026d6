"""The storage contract: every SQL statement edgeq runs on messages and queues.

:class:`Tx` is one open transaction with a family of verbs that mirror each
other (insert/delete, lock/unlock, find/find-by-confirm-id). Every verb that
adds or removes message rows also moves ``queues.depth`` by the same amount, in
the same transaction, so a depth inquiry is one row read however deep the queue.
Policy (expiry, ordering, validation, rules) lives in ``edgeq.manager``; this
module only knows rows.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Collection, Generator, Iterable, Iterator, Mapping, Sequence

from edgeq.store.damage import advance, checked_queue, missing_queue
from edgeq.store.integrity import CRC_SQL
from edgeq.store.records import MessageRow, NewMessage, QueueRow, new_crc, stored_size
from edgeq.store.syncstate import forget_refusals, prune_refusals
from edgeq.types import DEAD_LETTER_QUEUE_KEY, DEFAULT_DEAD_LETTER_QUEUE, MessageState

__all__ = ["Tx"]

# Message states as SQL literals (edgeq.types.MessageState): one definition, inlined.
_READY, _PUT_LOCKED, _GET_LOCKED = (int(s) for s in MessageState)

_MSG_COLS = (
    "id, origin, stamp, state, confirm_id, priority, created_ms, arrived_ms, expiry_kind, "
    "expiry_value, cap_at, deadline, backout_count, correlation_id, reply_to, report, fields, data, key_id, crc"
)
_QUEUE_COLS = (
    "id, name, expiry_ms, cap_expiry_ms, max_depth, max_message_bytes, default_priority, "
    "ordering, created_ms, depth, depth_threshold, kind, target_qmgr, target_queue, mode, server, encryption, "
    "bytes, max_bytes, on_full, refusal_limit, backout_threshold, backout_queue, compression, "
    "redelivery_delay_ms, max_redelivery_delay_ms"
)
_CHUNK = 500  # ids per IN (...) list, well under SQLite's variable limit


def _by_origin(uids: Sequence[tuple[str, int]]) -> Iterator[tuple[str, list[int]]]:
    """(origin, stamps) groups of at most ``_CHUNK`` stamps: one indexed query each."""
    groups: dict[str, list[int]] = {}
    for origin, stamp in uids:
        groups.setdefault(origin, []).append(stamp)
    for origin, stamps in groups.items():
        for start in range(0, len(stamps), _CHUNK):
            yield origin, stamps[start : start + _CHUNK]


def _chunks(ids: Sequence[int]) -> Iterator[Sequence[int]]:
    for start in range(0, len(ids), _CHUNK):
        yield ids[start : start + _CHUNK]


class Tx:
    """The verbs of one transaction on ``conn`` (opened by ``ConnectionFactory``)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self._kinds: dict[int, str] = {}  # queues looked up here: a local one keeps no refusal counts

    # -- the stamp clock -----------------------------------------------------------

    def stamps(self, now_ms: int, count: int) -> int:
        """Reserve ``count`` consecutive stamps; return the first.

        Stamps are ``ms * 1000 + n``: never below the wall clock, and always above
        every stamp issued before, by any thread or process, across restarts,
        even when the wall clock steps back.
        """
        (last,) = self.conn.execute(
            "UPDATE edgeq_clock SET stamp = max(stamp, ?) + ? WHERE id = 1 RETURNING stamp",
            (now_ms * 1000 - 1, count),
        ).fetchone()
        return int(last) - count + 1

    # -- queues --------------------------------------------------------------------

    def queue(self, name: str) -> QueueRow | None:
        """The row of the queue named ``name``, or None (read by the id its index gives: damage.missing_queue)."""
        sql = f"SELECT {_QUEUE_COLS} FROM queues WHERE id = (SELECT id FROM queues WHERE name = ?)"
        row = self.conn.execute(sql, (name,)).fetchone()
        if row is None or row[1] != name:
            missing_queue(self.conn, name, row)
            return None
        found = checked_queue(QueueRow(*row), self.conn)
        self._kinds[found.id] = found.kind
        return found

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
        """Delete an (empty) queue with its rule bindings and counters: a queue later
        defined with the same name starts afresh."""
        self.conn.execute("DELETE FROM rule_bindings WHERE queue_id = ?", (queue_id,))
        self.conn.execute("DELETE FROM confirmed_uids WHERE queue_id = ?", (queue_id,))
        self.conn.execute("DELETE FROM refusals WHERE queue_id = ?", (queue_id,))
        self.conn.execute(
            "DELETE FROM queue_stats WHERE queue = (SELECT name FROM queues WHERE id = ?)", (queue_id,)
        )
        self.conn.execute("DELETE FROM queues WHERE id = ?", (queue_id,))

    def retime(self, queue_id: int, expiry_ms: int | None) -> None:
        """Re-time messages without their own expiry to a new queue expiry interval
        (their checksums, which cover the deadline, follow)."""
        self.conn.execute(
            """UPDATE messages SET deadline = CASE
                   WHEN ?1 IS NULL THEN cap_at
                   WHEN cap_at IS NULL THEN arrived_ms + ?1
                   ELSE min(cap_at, arrived_ms + ?1) END
               WHERE queue_id = ?2 AND expiry_kind = 0""",
            (expiry_ms, queue_id),
        )
        self.conn.execute(f"UPDATE messages SET crc = {CRC_SQL} WHERE queue_id = ? AND expiry_kind = 0", (queue_id,))

    def rerank(self, queue_id: int, by_priority: bool) -> None:
        """Re-order a queue's messages for a new ordering (priority or FIFO)."""
        self.conn.execute(
            "UPDATE messages SET rank = CASE WHEN ? THEN priority ELSE 0 END WHERE queue_id = ?",
            (by_priority, queue_id),
        )

    # -- messages: add and remove --------------------------------------------------

    def insert(self, queue_id: int, queue: str, rows: Sequence[NewMessage]) -> None:
        """Insert message rows into queue ``queue``, each with its checksum, raising the
        queue's depth and bytes to match."""
        size = 0
        checked = []
        for r in rows:
            size += len(r.data) + (len(r.fields) if r.fields is not None else 0)
            checked.append((*r, new_crc(queue, r)))
        self.conn.executemany(
            f"""INSERT INTO messages (queue_id, origin, stamp, state, confirm_id, rank, seq, priority,
                   created_ms, arrived_ms, expiry_kind, expiry_value, cap_at, deadline,
                   correlation_id, reply_to, report, fields, data, key_id, crc)
               VALUES ({int(queue_id)}, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
            checked,  # queue_id is an int of ours, inlined
        )
        self._move_depth(queue_id, len(rows), size)

    def delete(self, queue_id: int, ids: Sequence[int]) -> list[MessageRow]:
        """Delete rows by id, only the table's rows of this queue, and return them."""
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
        self._move_depth(queue_id, -len(out), -sum(map(stored_size, out)))
        if out and self._kinds.get(queue_id, "remote") == "remote":  # their refusal counts go too
            forget_refusals(self.conn, queue_id, [(row.origin, row.stamp) for row in out])
        return out

    def delete_expired(self, queue_id: int, now_ms: int) -> int:
        """Delete every expired row of a queue at once (no copies kept); return how many."""
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
        self.conn.execute("DELETE FROM refusals WHERE queue_id = ?", (queue_id,))
        return cur.rowcount

    def _move_depth(self, queue_id: int, delta: int, size: int) -> None:
        if delta:
            self.conn.execute(
                "UPDATE queues SET depth = depth + ?, bytes = bytes + ? WHERE id = ?", (delta, size, queue_id)
            )

    def store_bytes(self) -> int:
        """Data plus fields of every message of every queue (a sum over the queue rows)."""
        (total,) = self.conn.execute("SELECT ifnull(sum(bytes), 0) FROM queues").fetchone()
        return int(total)

    # -- overflow: what a full queue may discard (edgeq.queues.budget) ---------------------------

    def overflow_candidates(
        self, queue_id: int, *, ranked: bool, lowest_first: bool
    ) -> Generator[MessageRow, None, None]:
        """A queue's ready messages in the order its ``on_full`` discards them: oldest
        (by ``seq``) first, or with ``lowest_first`` the lowest priority first, then the
        oldest. Locked messages are never among them.

        One statement, stepped lazily: the caller reads only as many rows as it needs
        and closes the iterator. On a priority-ordered (``ranked``) queue, ``rank`` is
        the priority, so each priority is one range of the ready index and SQLite
        merges the ten ranges in order, never sorting the queue; a FIFO queue is one
        range by age (by priority it must be sorted: no index orders it so).
        """
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
        row = self.conn.execute(
            f"SELECT {_MSG_COLS} FROM messages WHERE queue_id = ? AND origin = ? AND stamp = ?",
            (queue_id, origin, stamp),
        ).fetchone()
        return None if row is None else MessageRow(*row)

    def find_many(self, queue_id: int, uids: Sequence[tuple[str, int]]) -> dict[tuple[str, int], MessageRow]:
        """The rows held for these (origin, stamp) uids, keyed by uid.

        Grouped by origin as ``origin = ? AND stamp IN (...)`` so SQLite seeks the
        whole ``messages_uid`` index (a row-value ``IN (VALUES ...)`` would only use
        its first column and scan the queue).
        """
        out: dict[tuple[str, int], MessageRow] = {}
        for origin, stamps in _by_origin(uids):
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
        """The rows with these ids (ids not found are skipped; in no particular order)."""
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

    def ready(self, queue_id: int, page: int, due_at: int | None = None) -> Iterator[list[MessageRow]]:
        """Ready messages in get order, a page at a time (keyset pagination); with
        ``due_at`` (epoch ms), only those whose redelivery delay has passed by then.

        Paging by ``(rank, seq)`` rather than OFFSET lets the caller delete rows
        between pages and keeps every page an index seek. The delay is a filter on
        the rows the ready index gives (never an index of its own: get order stays
        the index's order, and a message never delayed costs one comparison).
        """
        # ?3 is NULL for browse: every ready message, delayed or not.
        due = "AND (?3 IS NULL OR coalesce(not_before, 0) <= ?3)"
        after: tuple[int, int] | None = None
        while True:
            if after is None:
                rows = self.conn.execute(
                    f"SELECT {_MSG_COLS}, rank, seq FROM messages WHERE queue_id = ?1 AND state = {_READY} "
                    f"{due} ORDER BY rank DESC, seq LIMIT ?2",
                    (queue_id, page, due_at),
                ).fetchall()
            else:
                rows = self.conn.execute(
                    f"SELECT {_MSG_COLS}, rank, seq FROM messages WHERE queue_id = ?1 AND state = {_READY} "
                    f"{due} AND (rank < ?4 OR (rank = ?4 AND seq > ?5)) ORDER BY rank DESC, seq LIMIT ?2",
                    (queue_id, page, due_at, after[0], after[1]),
                ).fetchall()
            if not rows:
                return
            after = advance(self.conn, queue_id, after, (rows[-1][-2], rows[-1][-1]))  # never loops on damage
            yield [MessageRow(*row[:-2]) for row in rows]
            if len(rows) < page:
                return

    def expired_totals(self, queue_id: int, now_ms: int) -> tuple[int, int]:
        """How many messages of the queue are past their deadline, and their bytes as stored."""
        count, size = self.conn.execute(
            "SELECT count(*), ifnull(sum(length(data) + ifnull(length(fields), 0)), 0) FROM messages "
            "WHERE queue_id = ? AND deadline <= ?",
            (queue_id, now_ms),
        ).fetchone()
        return int(count), int(size)

    def has_expired(self, queue_id: int, now_ms: int) -> bool:
        """Whether any message of the queue, in any state, is past its deadline (index probe)."""
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
            f"UPDATE messages SET state = {_GET_LOCKED}, confirm_id = ? WHERE id = ?", [(confirm_id, i) for i in ids]
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
        return self.conn.execute("SELECT id, queue, uid, at_ms, reason FROM quarantine ORDER BY id").fetchall()

    def stale_sealed(self, queue_id: int, current_key: str, limit: int) -> list[MessageRow]:
        """Rows of a queue sealed with another key than ``current_key`` (or not at all)."""
        rows = self.conn.execute(
            f"SELECT {_MSG_COLS} FROM messages WHERE queue_id = ? AND (key_id IS NULL OR key_id != ?) LIMIT ?",
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
        rows = self.conn.execute(f"SELECT id FROM messages WHERE queue_id = ? AND state = {_GET_LOCKED}", (queue_id,))
        return [row[0] for row in rows]

    # -- remembered confirmed uids -------------------------------------------------------

    def remember(self, queue_id: int, uids: Sequence[tuple[str, int]], now_ms: int) -> None:
        """Remember these uids as confirmed on a queue at ``now_ms`` (so a resend is known as a duplicate)."""
        self.conn.executemany(
            "INSERT OR REPLACE INTO confirmed_uids (queue_id, origin, stamp, confirmed_ms) VALUES (?, ?, ?, ?)",
            [(queue_id, origin, stamp, now_ms) for origin, stamp in uids],
        )

    def remembered_many(self, queue_id: int, uids: Sequence[tuple[str, int]]) -> set[tuple[str, int]]:
        """Which of these uids are remembered as confirmed (an index seek per origin and chunk)."""
        out: set[tuple[str, int]] = set()
        for origin, stamps in _by_origin(uids):
            marks = ", ".join("?" for _ in stamps)
            out.update(
                (origin, stamp)
                for (stamp,) in self.conn.execute(
                    f"SELECT stamp FROM confirmed_uids WHERE queue_id = ? AND origin = ? AND stamp IN ({marks})",
                    (queue_id, origin, *stamps),
                )
            )
        return out

    def forget_before(self, cutoff_ms: int) -> None:
        """Drop remembered uids confirmed before ``cutoff_ms`` (an index range delete),
        except those of origins whose sender settles them (:meth:`settle`): a time
        window must never decide what is a duplicate for them."""
        self.conn.execute(
            "DELETE FROM confirmed_uids WHERE confirmed_ms < ? "
            "AND origin NOT IN (SELECT origin FROM settled_origins)",
            (cutoff_ms,),
        )

    def settle(self, origin: str, below: int, now_ms: int) -> int:
        """The sender of ``origin``'s messages holds none below stamp ``below`` any more:
        forget those remembered uids on every queue, and from now on only this way.
        Returns how many were forgotten."""
        self._settling(origin, below, now_ms)
        return self.conn.execute(
            "DELETE FROM confirmed_uids WHERE origin = ? AND stamp < ?", (origin, below)
        ).rowcount

    def settle_queue(self, queue_id: int, held: Mapping[str, int], now_ms: int) -> int:
        """The sender of a queue's messages still holds, per origin, nothing below
        ``held[origin]`` and nothing at all of an origin it does not name: forget the
        rest of what this queue remembers. Returns how many were forgotten."""
        origins = [o for (o,) in self.conn.execute(
            "SELECT DISTINCT origin FROM confirmed_uids WHERE queue_id = ?", (queue_id,)
        )]
        forgotten = 0
        for origin in {*origins, *held}:
            self._settling(origin, 0, now_ms)
            if origin in origins:
                below = "AND stamp < ?" if origin in held else ""  # not held at all: every stamp
                forgotten += self.conn.execute(
                    f"DELETE FROM confirmed_uids WHERE queue_id = ? AND origin = ? {below}",
                    (queue_id, origin, *([held[origin]] if origin in held else [])),
                ).rowcount
        return forgotten

    def _settling(self, origin: str, below: int, now_ms: int) -> None:
        self.conn.execute(
            "INSERT INTO settled_origins (origin, below, updated_ms) VALUES (?, ?, ?) "
            "ON CONFLICT (origin) DO UPDATE SET below = max(below, excluded.below), updated_ms = excluded.updated_ms",
            (origin, below, now_ms),
        )

    def held_low_water(self, queue_id: int) -> dict[str, int]:
        """Per origin, the lowest stamp a queue holds (any state): what a puller may
        still be offered again."""
        rows = self.conn.execute(
            "SELECT origin, min(stamp) FROM messages WHERE queue_id = ? GROUP BY origin", (queue_id,)
        )
        return {origin: int(stamp) for origin, stamp in rows}

    def transmission_low_water(self, origin: str) -> int:
        """The lowest stamp of ``origin`` still held where it may be transmitted from with its
        uid (a remote queue; the dead-letter queue and a queue whose backout queue is remote,
        whence it moves there unchanged), or (none held) the next stamp this store will
        issue: no uid of ``origin`` below it will ever be transmitted again."""
        (held,) = self.conn.execute(
            "SELECT min((SELECT min(stamp) FROM messages WHERE queue_id = q.id AND origin = ?)) "
            "FROM queues q WHERE q.kind = 'remote' "
            "OR q.name = ifnull((SELECT value FROM edgeq_meta WHERE key = ?), ?) "
            "OR q.backout_queue IN (SELECT name FROM queues WHERE kind = 'remote')",
            (origin, DEAD_LETTER_QUEUE_KEY, DEFAULT_DEAD_LETTER_QUEUE),
        ).fetchone()
        (last,) = self.conn.execute("SELECT stamp FROM edgeq_clock WHERE id = 1").fetchone()
        return int(last) + 1 if held is None else min(int(held), int(last) + 1)

    def last_stamp(self) -> int:
        """The last stamp this store issued (0: none yet)."""
        (last,) = self.conn.execute("SELECT stamp FROM edgeq_clock WHERE id = 1").fetchone()
        return int(last)

    def held_below(self, origin: str, below: int) -> int:
        """How many messages of ``origin`` the remote queues hold with a stamp below ``below``."""
        (count,) = self.conn.execute(
            "SELECT count(*) FROM messages WHERE origin = ? AND stamp < ? "
            "AND queue_id IN (SELECT id FROM queues WHERE kind = 'remote')",
            (origin, below),
        ).fetchone()
        return int(count)

    def settled_marks(self, origins: Collection[str]) -> dict[str, int]:
        """The settled mark of each of these origins that has one (one SELECT)."""
        if not origins:
            return {}
        marks = ", ".join("?" for _ in origins)
        rows = self.conn.execute(f"SELECT origin, below FROM settled_origins WHERE origin IN ({marks})", [*origins])
        return {str(origin): int(below) for origin, below in rows}

    def highest_seen(self, origin: str) -> int | None:
        """The highest stamp of ``origin`` held (any queue, any state) or remembered as
        confirmed: one index seek per queue, and one."""
        (seen,) = self.conn.execute(
            "SELECT max(ifnull((SELECT max((SELECT max(stamp) FROM messages WHERE queue_id = q.id AND origin = ?1)) "
            "FROM queues q), 0), ifnull((SELECT max(stamp) FROM confirmed_uids WHERE origin = ?1), 0))",
            (origin,),
        ).fetchone()
        return int(seen) or None

    def remembered_count(self, origin: str | None) -> int:
        """How many confirmed uids are remembered (of ``origin``, or in all)."""
        if origin is None:
            (count,) = self.conn.execute("SELECT count(*) FROM confirmed_uids").fetchone()
        else:
            (count,) = self.conn.execute(
                "SELECT count(*) FROM confirmed_uids WHERE origin = ?", (origin,)
            ).fetchone()
        return int(count)

    def back_out(self, ids: Iterable[int], *, count: bool = True) -> None:
        """Undo an assured get: visible again where it was, at once, with one more backout
        (``count=False``: handed back, the count unchanged)."""
        self.conn.executemany(
            f"UPDATE messages SET state = {_READY}, confirm_id = NULL, backout_count = backout_count + {int(count)} "
            "WHERE id = ?",
            [(i,) for i in ids],
        )

    def back_out_until(self, due: Iterable[tuple[int, int | None]]) -> None:
        """Undo failed assured gets, each (id, not-before epoch ms): ready again where it
        was, with one more backout, and got again no earlier than that (None: at once)."""
        self.conn.executemany(
            f"UPDATE messages SET state = {_READY}, confirm_id = NULL, backout_count = backout_count + 1, "
            "not_before = ? WHERE id = ?",
            [(at, i) for i, at in due],
        )

    def next_due(self, queue_id: int, now_ms: int) -> int | None:
        """The earliest time after ``now_ms`` a ready message of a queue waiting out a
        redelivery delay may be got (None: none waits); one seek of the delayed index."""
        (at,) = self.conn.execute(
            f"SELECT min(not_before) FROM messages WHERE queue_id = ? AND not_before > ? AND state = {_READY}",
            (queue_id, now_ms),
        ).fetchone()
        return None if at is None else int(at)

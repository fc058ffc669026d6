"""The SQL of uids: the stamp clock, the confirmed uids a queue remembers (so a resend is known as
a duplicate), settled origins, and the low-water marks a sync peer is told (docs/protocol.md)."""

from __future__ import annotations

import sqlite3
from collections.abc import Collection, Iterator, Mapping, Sequence

from edgeq.types import DEAD_LETTER_QUEUE_KEY, DEFAULT_DEAD_LETTER_QUEUE

__all__ = ["CHUNK", "UidTx", "by_origin"]

CHUNK = 500  # ids per IN (...) list, well under SQLite's variable limit
_CLOCK = ("clock",)  # the key of the last stamp issued in ConnectionFactory.known


def by_origin(uids: Sequence[tuple[str, int]]) -> Iterator[tuple[str, list[int]]]:
    """(origin, stamps) groups of at most ``CHUNK`` stamps: one indexed query each."""
    groups: dict[str, list[int]] = {}
    for origin, stamp in uids:
        groups.setdefault(origin, []).append(stamp)
    for origin, stamps in groups.items():
        for start in range(0, len(stamps), CHUNK):
            yield origin, stamps[start : start + CHUNK]


class UidTx:
    """The uid verbs of one transaction on ``conn`` (``Tx`` has them all)."""

    conn: sqlite3.Connection
    known: dict[tuple[object, ...], object] | None

    def stamps(self, now_ms: int, count: int) -> int:
        """Reserve ``count`` consecutive stamps; return the first (docs/storage.md, "Uids"). The last
        one issued is kept in ``known``: while it is valid the clock row is written, not read back
        (``RETURNING`` costs a put about a tenth of its CPU)."""
        last = None if self.known is None else self.known.get(_CLOCK)
        if isinstance(last, int):
            first = max(last + 1, now_ms * 1000)
            self.conn.execute("UPDATE edgeq_clock SET stamp = ? WHERE id = 1", (first + count - 1,))
        else:
            (top,) = self.conn.execute(
                "UPDATE edgeq_clock SET stamp = max(stamp, ?) + ? WHERE id = 1 RETURNING stamp",
                (now_ms * 1000 - 1, count),
            ).fetchone()
            first = int(top) - count + 1
        if self.known is not None:
            self.known[_CLOCK] = first + count - 1
        return first

    def last_stamp(self) -> int:
        """The last stamp this store issued (0: none yet)."""
        (last,) = self.conn.execute("SELECT stamp FROM edgeq_clock WHERE id = 1").fetchone()
        return int(last)

    def remember(self, queue_id: int, uids: Sequence[tuple[str, int]], now_ms: int) -> None:
        """Remember these uids as confirmed on a queue at ``now_ms``."""
        self.conn.executemany(
            "INSERT OR REPLACE INTO confirmed_uids (queue_id, origin, stamp, confirmed_ms) "
            "VALUES (?, ?, ?, ?)",
            [(queue_id, origin, stamp, now_ms) for origin, stamp in uids],
        )

    def remembered_many(self, queue_id: int, uids: Sequence[tuple[str, int]]) -> set[tuple[str, int]]:
        """Which of these uids are remembered as confirmed."""
        out: set[tuple[str, int]] = set()
        for origin, stamps in by_origin(uids):
            marks = ", ".join("?" for _ in stamps)
            out.update(
                (origin, stamp)
                for (stamp,) in self.conn.execute(
                    "SELECT stamp FROM confirmed_uids WHERE queue_id = ? AND origin = ? "
                    f"AND stamp IN ({marks})",
                    (queue_id, origin, *stamps),
                )
            )
        return out

    def forget_before(self, cutoff_ms: int) -> None:
        """Drop remembered uids confirmed before ``cutoff_ms``, except settled origins' (:meth:`settle`)."""
        self.conn.execute(
            "DELETE FROM confirmed_uids WHERE confirmed_ms < ? "
            "AND origin NOT IN (SELECT origin FROM settled_origins)",
            (cutoff_ms,),
        )

    def settle(self, origin: str, below: int, now_ms: int) -> int:
        """Forget ``origin``'s uids below ``below`` on every queue, from now on only so; return how many."""
        self._settling(origin, below, now_ms)
        return self.conn.execute(
            "DELETE FROM confirmed_uids WHERE origin = ? AND stamp < ?", (origin, below)
        ).rowcount

    def settle_queue(self, queue_id: int, held: Mapping[str, int], now_ms: int) -> int:
        """Forget what a queue remembers below ``held[origin]`` (all, if not in ``held``); return how many."""
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
            "ON CONFLICT (origin) DO UPDATE SET below = max(below, excluded.below), "
            "updated_ms = excluded.updated_ms",
            (origin, below, now_ms),
        )

    def held_low_water(self, queue_id: int) -> dict[str, int]:
        """Per origin, the lowest stamp a queue holds (any state): what a puller may be offered again."""
        rows = self.conn.execute(
            "SELECT origin, min(stamp) FROM messages WHERE queue_id = ? GROUP BY origin", (queue_id,)
        )
        return {origin: int(stamp) for origin, stamp in rows}

    def transmission_low_water(self, origin: str) -> int:
        """No uid of ``origin`` below this will ever be transmitted again: the lowest held where it may be
        (a remote queue, the dead-letter queue, one backing out to a remote queue), or the next stamp."""
        (held,) = self.conn.execute(
            "SELECT min((SELECT min(stamp) FROM messages WHERE queue_id = q.id AND origin = ?)) "
            "FROM queues q WHERE q.kind = 'remote' "
            "OR q.name = ifnull((SELECT value FROM edgeq_meta WHERE key = ?), ?) "
            "OR q.backout_queue IN (SELECT name FROM queues WHERE kind = 'remote')",
            (origin, DEAD_LETTER_QUEUE_KEY, DEFAULT_DEAD_LETTER_QUEUE),
        ).fetchone()
        last = self.last_stamp()
        return last + 1 if held is None else min(int(held), last + 1)

    def held_below(self, origin: str, below: int) -> int:
        """How many messages of ``origin`` the remote queues hold with a stamp below ``below``."""
        (count,) = self.conn.execute(
            "SELECT count(*) FROM messages WHERE origin = ? AND stamp < ? "
            "AND queue_id IN (SELECT id FROM queues WHERE kind = 'remote')",
            (origin, below),
        ).fetchone()
        return int(count)

    def settled_marks(self, origins: Collection[str]) -> dict[str, int]:
        """The settled mark of each of these origins that has one."""
        if not origins:
            return {}
        marks = ", ".join("?" for _ in origins)
        rows = self.conn.execute(
            f"SELECT origin, below FROM settled_origins WHERE origin IN ({marks})", [*origins]
        )
        return {str(origin): int(below) for origin, below in rows}

    def highest_seen(self, origin: str) -> int | None:
        """The highest stamp of ``origin`` held (any queue, any state) or remembered as confirmed."""
        (seen,) = self.conn.execute(
            "SELECT max(ifnull((SELECT max((SELECT max(stamp) FROM messages "
            "WHERE queue_id = q.id AND origin = ?1)) "
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

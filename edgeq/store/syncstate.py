"""The SQL of what the sync agent keeps in a device's store: how often the target refused each
message of a remote queue (``refusals``: as long as the message lives, dropped by ``Tx``'s
removal verbs), and its state per queue (``edgeq_meta`` keys ``sync``, ``sync.<queue>``: JSON).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Mapping, Sequence

from edgeq.types import MessageState

__all__ = ["SyncTx", "forget_refusals", "prune_refusals"]

_CHUNK = 500  # stamps per IN (...) list, well under SQLite's variable limit


def _stamps_by_origin(uids: Sequence[tuple[str, int]]) -> Iterator[tuple[str, list[int]]]:
    """(origin, up to 500 stamps) groups: one indexed statement each."""
    grouped: dict[str, list[int]] = {}
    for origin, stamp in uids:
        grouped.setdefault(origin, []).append(stamp)
    yield from (
        (o, stamps[i : i + _CHUNK]) for o, stamps in grouped.items() for i in range(0, len(stamps), _CHUNK)
    )


def forget_refusals(
    conn: sqlite3.Connection, queue_id: int, uids: Sequence[tuple[str, int]]
) -> None:
    """Drop the refusal counts of these uids of a queue (their messages left it)."""
    for origin, stamps in _stamps_by_origin(uids):
        conn.execute(
            "DELETE FROM refusals WHERE queue_id = ? AND origin = ? "
            f"AND stamp IN ({', '.join('?' * len(stamps))})",
            (queue_id, origin, *stamps),
        )


def prune_refusals(conn: sqlite3.Connection, queue_id: int) -> None:
    """Drop the refusal counts of a queue's messages gone in a bulk delete (a probe per count)."""
    conn.execute(
        "DELETE FROM refusals WHERE queue_id = ? AND NOT EXISTS (SELECT 1 FROM messages m "
        "WHERE m.queue_id = refusals.queue_id AND m.origin = refusals.origin "
        "AND m.stamp = refusals.stamp)",
        (queue_id,),
    )


class SyncTx:
    """The sync agent's verbs in one transaction on ``conn``."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def refuse(
        self, queue_id: int, refused: Sequence[tuple[str, int, str]], now_ms: int
    ) -> dict[tuple[str, int], int]:
        """Count one more refusal of each ``(origin, stamp, reason)``; return each uid's count now."""
        self.conn.executemany(
            "INSERT INTO refusals (queue_id, origin, stamp, count, last_reason, last_ms) "
            "VALUES (?, ?, ?, 1, ?, ?) "
            "ON CONFLICT (queue_id, origin, stamp) DO UPDATE SET count = count + 1, "
            "last_reason = excluded.last_reason, last_ms = excluded.last_ms",
            [(queue_id, origin, stamp, reason, now_ms) for origin, stamp, reason in refused],
        )
        counts: dict[tuple[str, int], int] = {}
        for origin, stamps in _stamps_by_origin([(origin, stamp) for origin, stamp, _ in refused]):
            rows = self.conn.execute(
                f"SELECT stamp, count FROM refusals WHERE queue_id = ? AND origin = ? "
                f"AND stamp IN ({', '.join('?' * len(stamps))})",
                (queue_id, origin, *stamps),
            )
            counts.update(((origin, int(stamp)), int(count)) for stamp, count in rows)
        return counts

    def refusal_totals(self) -> dict[int, tuple[int, int, int, str]]:
        """Per queue id: (messages refused, refusals in all, latest refusal's ms, its reason)."""
        # SQLite takes a bare column (last_reason) from the row that gave max().
        rows = self.conn.execute(
            "SELECT queue_id, count(*), sum(count), max(last_ms), last_reason FROM refusals "
            "GROUP BY queue_id"
        )
        return {int(q): (int(n), int(total), int(ms), str(reason)) for q, n, total, ms, reason in rows}

    def oldest_arrival(self, queue_id: int) -> int | None:
        """When the longest-waiting ready message of a queue arrived (None: none is ready); one
        probe of the ready index per rank, never a scan."""
        arms = " UNION ALL ".join(
            "SELECT * FROM (SELECT arrived_ms FROM messages WHERE queue_id = ?1 "
            f"AND state = {MessageState.READY:d} AND rank = {rank} ORDER BY seq LIMIT 1)"
            for rank in range(10)
        )
        (oldest,) = self.conn.execute(f"SELECT min(arrived_ms) FROM ({arms})", (queue_id,)).fetchone()
        return None if oldest is None else int(oldest)

    def meta_items(self, prefix: str) -> dict[str, str]:
        """The ``edgeq_meta`` entries whose key starts with ``prefix``."""
        rows = self.conn.execute(
            "SELECT key, value FROM edgeq_meta WHERE key >= ? AND key < ?", (prefix, prefix + "\U0010ffff")
        )
        return {str(key): str(value) for key, value in rows}

    def set_meta(self, items: Mapping[str, str | None]) -> None:
        """Write ``edgeq_meta`` entries; None deletes one."""
        self.conn.executemany(
            "INSERT INTO edgeq_meta (key, value) VALUES (?, ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            [(key, value) for key, value in items.items() if value is not None],
        )
        self.conn.executemany(
            "DELETE FROM edgeq_meta WHERE key = ?", [(k,) for k, v in items.items() if v is None]
        )

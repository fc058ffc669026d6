"""Plain ``sqlite3``: the physical limit of a durable SQLite queue.

WAL + ``synchronous=FULL``, autocommit connection, explicit ``BEGIN IMMEDIATE``.
A put is one row per transaction, a batch put one transaction, a get+confirm
two transactions (lock the head row, then delete it), the same shape as edgeq's
assured get. The table is the minimum a queue needs: integer key, state, an
optional deadline (partial index, so rows without one cost nothing), data.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path

from benchmarks.peers.base import QueueAdapter

__all__ = ["RawSqliteAdapter"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS q (
    id INTEGER PRIMARY KEY,
    state INTEGER NOT NULL DEFAULT 0,
    deadline INTEGER,
    data BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS q_deadline ON q (deadline) WHERE deadline IS NOT NULL;
"""


class RawSqliteAdapter(QueueAdapter):
    """A hand-written queue on one ``sqlite3`` connection."""

    key = "raw-sqlite"
    label = "raw sqlite3"

    def __init__(self, directory: Path, *, now_ms: int | None = None) -> None:
        super().__init__(directory, now_ms=now_ms)
        directory.mkdir(parents=True, exist_ok=True)
        self.conn = sqlite3.connect(directory / "raw.db", isolation_level=None, timeout=30.0)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")
        self.conn.executescript(_SCHEMA)

    @staticmethod
    def version() -> str:
        return sqlite3.sqlite_version

    def connections(self) -> Sequence[sqlite3.Connection]:
        return [self.conn]

    def _insert(self, rows: Sequence[tuple[int | None, bytes]]) -> None:
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany("INSERT INTO q (deadline, data) VALUES (?, ?)", rows)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def fill(self, payloads: Sequence[bytes]) -> None:
        self._insert([(None, p) for p in payloads])

    def fill_expiring(self, payloads: Sequence[bytes], ttl_ms: int) -> None:
        assert self.now_ms is not None, "expiring messages need now_ms"
        deadline = self.now_ms + ttl_ms
        self._insert([(deadline, p) for p in payloads])

    def put(self, payload: bytes) -> None:
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO q (data) VALUES (?)", (payload,))
        conn.execute("COMMIT")

    def put_batch(self, payloads: Sequence[bytes]) -> None:
        self._insert([(None, p) for p in payloads])

    def get_confirm(self) -> bytes | None:
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        row = conn.execute(
            "UPDATE q SET state = 1 WHERE id = (SELECT id FROM q WHERE state = 0 ORDER BY id LIMIT 1) "
            "RETURNING id, data"
        ).fetchone()
        conn.execute("COMMIT")
        if row is None:
            return None
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("DELETE FROM q WHERE id = ?", (row[0],))
        conn.execute("COMMIT")
        return bytes(row[1])

    def depth(self) -> int:
        (count,) = self.conn.execute("SELECT count(*) FROM q").fetchone()
        return int(count)

    def sweep_expired(self) -> int:
        assert self.now_ms is not None, "a sweep needs now_ms"
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        cur = conn.execute("DELETE FROM q WHERE deadline <= ?", (self.now_ms,))
        conn.execute("COMMIT")
        return cur.rowcount

    def close(self) -> None:
        self.conn.close()

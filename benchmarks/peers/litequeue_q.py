"""litequeue's ``LiteQueue`` (two-phase: pop + done).

What the library sets: ``journal_mode=WAL`` and ``synchronous=NORMAL`` (plus
``temp_store=MEMORY`` and a 256 MB ``cache_size``) in its constructor. NORMAL
may lose the last commits on power loss, so the adapter sets
``PRAGMA synchronous=FULL`` on its connection right after construction and
reads it back. The library's ``data`` column is TEXT: payloads are passed as
the same ASCII characters, ``str``.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks.peers.base import QueueAdapter

__all__ = ["LiteQueueAdapter"]


class LiteQueueAdapter(QueueAdapter):
    """One ``LiteQueue`` in ``litequeue.db``, library defaults except ``synchronous``."""

    key = "litequeue"
    label = "litequeue"

    def __init__(self, directory: Path, *, now_ms: int | None = None) -> None:
        super().__init__(directory, now_ms=now_ms)
        from litequeue import LiteQueue

        directory.mkdir(parents=True, exist_ok=True)
        self.q = LiteQueue(str(directory / "litequeue.db"))
        self.q.conn.execute("PRAGMA synchronous=FULL")

    @staticmethod
    def version() -> str:
        from importlib.metadata import version

        return version("litequeue")

    def connections(self) -> Sequence[sqlite3.Connection]:
        return [self.q.conn]

    def fill(self, payloads: Sequence[bytes]) -> None:
        # The library's own INSERT (same columns, its uuid7 ids), in one transaction.
        from litequeue import uuid7

        now = time.time_ns()
        rows = [(p.decode("ascii"), uuid7(), now) for p in payloads]
        with self.q.transaction(mode="IMMEDIATE"):
            self.q.conn.executemany(
                f"INSERT INTO {self.q.table} (data, message_id, status, in_time, lock_time, done_time) "
                "VALUES (?, ?, 0, ?, NULL, NULL)",
                rows,
            )

    def put(self, payload: bytes) -> None:
        self.q.put(payload.decode("ascii"))

    def get_confirm(self) -> str | None:
        message = self.q.pop()
        if message is None:
            return None
        self.q.done(message.message_id)
        return str(message.data)

    def depth(self) -> int:
        return int(self.q.qsize())

    def close(self) -> None:
        self.q.close()

"""persist-queue's ``SQLiteAckQueue`` (two-phase: get + ack) and ``SQLiteQueue`` (get deletes).

What the library sets: ``PRAGMA journal_mode=WAL`` on each connection it opens
(``SQLiteBase._new_db_connection``) and nothing for ``synchronous``, so SQLite's
compiled-in default applies (FULL on CPython's and Debian's builds). The
adapter sets ``PRAGMA synchronous=FULL`` explicitly on the library's getter and
putter connections right after construction, and reads both back. Payloads go
through the library's default pickle serializer, as a user's would.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.peers.base import QueueAdapter

__all__ = ["AckQueueAdapter", "PlainQueueAdapter"]


class _PersistQueueAdapter(QueueAdapter):
    def __init__(self, directory: Path, *, now_ms: int | None = None) -> None:
        super().__init__(directory, now_ms=now_ms)
        directory.mkdir(parents=True, exist_ok=True)
        self.q = self._open(str(directory))
        for conn in self.connections():
            conn.execute("PRAGMA synchronous=FULL")

    def _open(self, path: str) -> Any:
        raise NotImplementedError

    @staticmethod
    def version() -> str:
        from importlib.metadata import version

        return version("persist-queue")

    def connections(self) -> Sequence[sqlite3.Connection]:
        conns = {id(c): c for c in (self.q._getter, self.q._putter) if c is not None}
        return list(conns.values())

    def fill(self, payloads: Sequence[bytes]) -> None:
        # The library's own INSERT statement and serializer, in one transaction.
        dumps = self.q._serializer.dumps
        now = time.time()
        conn = self.q._putter
        with conn:
            conn.executemany(self.q._sql_insert, [(dumps(p), now) for p in payloads])
        self.q.total = self.q._count()

    def put(self, payload: bytes) -> None:
        self.q.put(payload)

    def depth(self) -> int:
        return int(self.q.qsize())

    def close(self) -> None:
        self.q.close()
        self.q._getter = self.q._putter = None  # its __del__ would close them again


class AckQueueAdapter(_PersistQueueAdapter):
    """``persistqueue.SQLiteAckQueue`` with its defaults (``auto_resume=True``)."""

    key = "pq-ack"
    label = "persist-queue SQLiteAckQueue"

    def _open(self, path: str) -> Any:
        from persistqueue import SQLiteAckQueue

        return SQLiteAckQueue(path)

    def get_confirm(self) -> Any:
        from persistqueue.exceptions import Empty

        try:
            item = self.q.get(block=False, raw=True)
        except Empty:
            return None
        self.q.ack(id=item["pqid"])
        return item["data"]


class PlainQueueAdapter(_PersistQueueAdapter):
    """``persistqueue.SQLiteQueue``: ``get`` deletes at once (no confirm step)."""

    key = "pq-queue"
    label = "persist-queue SQLiteQueue"
    two_phase = False

    def _open(self, path: str) -> Any:
        from persistqueue import SQLiteQueue

        return SQLiteQueue(path)

    def get_confirm(self) -> Any:
        from persistqueue.exceptions import Empty

        try:
            return self.q.get(block=False)
        except Empty:
            return None

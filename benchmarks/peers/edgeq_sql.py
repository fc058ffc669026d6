"""edgeq's SQL without edgeq's Python: the floor of edgeq's schema, as a peer.

A put issues, from plain ``sqlite3``, exactly the statements ``QueueManager.put`` does (checked against
``QueueManager.tracer`` when the adapter opens), with a row edgeq stored, on edgeq's own schema and at
its durability (``synchronous=NORMAL`` and one ``fdatasync`` of the WAL per commit); a batch is the
one INSERT of ``put_many``. What edgeq costs over this row is its Python; what this row costs over raw
sqlite3 is the schema's (docs/storage.md, "What a put costs"). Checksums are the template row's: the
rows are for timing, not for reading back."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence
from pathlib import Path

from benchmarks.peers.base import QueueAdapter, Unsupported

__all__ = ["PUT_VERBS", "EdgeqSqlAdapter"]

_COLS = ("queue_id, origin, stamp, state, confirm_id, rank, seq, priority, created_ms, arrived_ms, "
         "expiry_kind, expiry_value, cap_at, deadline, correlation_id, reply_to, report, fields, data, "
         "key_id, crc")
_INSERT = f"INSERT INTO messages ({_COLS}) VALUES ({', '.join('?' for _ in _COLS.split(', '))})"
_DATA = _COLS.split(", ").index("data")
#: what a put issues, in order (the start of each statement); the adapter refuses to run on any other
PUT_VERBS = ["BEGIN IMMEDIATE", "PRAGMA data_version", "UPDATE edgeq_clock", "INSERT INTO messages",
             "UPDATE queues", "COMMIT"]


class EdgeqSqlAdapter(QueueAdapter):
    """edgeq's schema and statements on one plain ``sqlite3`` connection (``edgeq-sql.db``)."""

    key = "edgeq-sql"
    label = "edgeq's SQL alone"

    def __init__(self, directory: Path, *, now_ms: int | None = None) -> None:
        super().__init__(directory, now_ms=now_ms)
        from edgeq import Message, QueueManager

        directory.mkdir(parents=True, exist_ok=True)
        path = directory / "edgeq-sql.db"
        with QueueManager(path, name="BENCH") as qm:
            qm.define_queue("Q")
            qm.put("Q", Message(b"x"))  # the first put after a definition reads it; the next is a put's
            seen: list[str] = []
            with qm.tracer(seen.append):
                qm.put("Q", Message(b"x"))
        verbs = [next((v for v in PUT_VERBS if s.startswith(v)), s[:40]) for s in seen]
        if verbs != PUT_VERBS:
            raise RuntimeError(f"edgeq's put now issues {verbs}, not {PUT_VERBS}: update this adapter")
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute("PRAGMA synchronous=NORMAL")
        self.conn.execute("PRAGMA foreign_keys=ON")
        (self.qid,) = self.conn.execute("SELECT id FROM queues WHERE name = 'Q'").fetchone()
        last = f"SELECT {_COLS} FROM messages ORDER BY id DESC LIMIT 1"
        self.row = list(self.conn.execute(last).fetchone())
        self.conn.execute("DELETE FROM messages")
        self.conn.execute("UPDATE queues SET depth = 0, bytes = 0")
        (self.stamp,) = self.conn.execute("SELECT stamp FROM edgeq_clock WHERE id = 1").fetchone()
        self.wal = os.open(f"{path}-wal", os.O_RDONLY)

    @staticmethod
    def version() -> str:
        import edgeq

        return f"{edgeq.__version__} schema, sqlite3 {sqlite3.sqlite_version}"

    def connections(self) -> Sequence[sqlite3.Connection]:
        return [self.conn]

    def pragmas(self) -> dict[str, str]:
        found = super().pragmas()
        if found.get("synchronous") == "NORMAL":
            found["synchronous"] = "FULL"  # NORMAL + an fdatasync of the WAL after each commit, as edgeq
        return found

    def _rows(self, payloads: Sequence[bytes]) -> list[list[object]]:
        rows = []
        for payload in payloads:
            self.stamp += 1
            row = list(self.row)
            row[0], row[2], row[6], row[_DATA] = self.qid, self.stamp, self.stamp, payload
            rows.append(row)
        return rows

    def _write(self, payloads: Sequence[bytes]) -> None:
        rows = self._rows(payloads)
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("PRAGMA data_version").fetchone()
        conn.execute("UPDATE edgeq_clock SET stamp = ? WHERE id = 1", (self.stamp,))
        conn.executemany(_INSERT, rows)
        conn.execute("UPDATE queues SET depth = depth + ?, bytes = bytes + ? WHERE id = ?",
                     (len(rows), sum(len(p) for p in payloads), self.qid))
        conn.execute("COMMIT")
        os.fdatasync(self.wal)

    def put(self, payload: bytes) -> None:
        self._write([payload])

    def put_batch(self, payloads: Sequence[bytes]) -> None:
        self._write(payloads)

    def fill(self, payloads: Sequence[bytes]) -> None:
        self._write(payloads)

    def get_confirm(self) -> bytes | None:
        raise Unsupported(f"{self.label} measures puts only")

    def depth(self) -> int:
        (depth,) = self.conn.execute("SELECT depth FROM queues WHERE id = ?", (self.qid,)).fetchone()
        return int(depth)

    def close(self) -> None:
        os.close(self.wal)
        self.conn.close()

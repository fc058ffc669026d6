"""Real damage to real store files, for the tests of ``edgeq check``.

Bytes are flipped in the file itself, where SQLite keeps them (the WAL is
checkpointed into the file first, and no connection is open meanwhile), or rows are
changed through a plain sqlite3 connection that knows nothing of edgeq: no
checksum is recomputed, no counter moved, no foreign key checked.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from edgeq import ManualClock, Message, QueueManager
from tests.conftest import STORE_KEYS

PAYLOADS = [f"order {i:03d}: 42 widgets for the depot at the end of the road".encode() for i in range(30)]
LINES = [f"log line {i:03d}".encode() for i in range(10)]


def make_store(path: Path, clock: ManualClock, *, sealed: bool = False) -> None:
    """A real store to damage: ORDERS (priority order, the counters rule bound) with the
    30 PAYLOADS; LOG (FIFO) with the 10 LINES."""
    keys = {"keys": STORE_KEYS, "default_encryption": "aes-256-gcm"} if sealed else {}
    with QueueManager(path, name="DEV1", clock=clock, **keys) as qm:  # type: ignore[arg-type]
        qm.define_queue("ORDERS", rules=["counters"])
        qm.define_queue("LOG", ordering="fifo")
        qm.put_many("ORDERS", [Message(p) for p in PAYLOADS])
        qm.put_many("LOG", [Message(line) for line in LINES])


def settle(path: Path) -> None:
    """Checkpoint the WAL into the file, so every row is in the file's own pages."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


def page_size(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("PRAGMA page_size").fetchone()[0])
    finally:
        conn.close()


def pages_of(path: Path, name: str) -> list[int]:
    """The pages (numbered from 1) that hold table or index ``name`` (SQLite's dbstat)."""
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("SELECT pageno FROM dbstat WHERE name = ? ORDER BY pageno", (name,)).fetchall()
    finally:
        conn.close()
    assert rows, f"no pages for {name}"
    return [row[0] for row in rows]


def flip(path: Path, needle: bytes, *, at: int = 0, mask: int = 0x01, within: str | None = None) -> int:
    """XOR the byte ``at`` bytes into the one occurrence of ``needle`` in the file (or in
    the pages of table/index ``within``) with ``mask``; return its offset."""
    settle(path)
    data = bytearray(path.read_bytes())
    size = page_size(path)
    spans = [((p - 1) * size, p * size) for p in pages_of(path, within)] if within else [(0, len(data))]
    hits = [start + i for start, end in spans for i in _find_all(bytes(data[start:end]), needle)]
    assert len(hits) == 1, f"{needle!r} occurs {len(hits)} times, not once"
    offset = hits[0] + at
    data[offset] ^= mask
    path.write_bytes(bytes(data))
    return offset


def _find_all(haystack: bytes, needle: bytes) -> list[int]:
    out, start = [], 0
    while (i := haystack.find(needle, start)) >= 0:
        out.append(i)
        start = i + 1
    return out


def garble_schema_page(path: Path) -> None:
    """Overwrite the first page after the file header (the schema): SQLite can no longer read anything."""
    settle(path)
    data = bytearray(path.read_bytes())
    data[100:4096] = b"\xa5" * (4096 - 100)
    path.write_bytes(bytes(data))


def not_stores(directory: Path) -> tuple[Path, Path]:
    """A text file, and another application's SQLite database: files edgeq must not touch."""
    text = directory / "notes.txt"
    text.write_text("not a database\n" * 200)
    other = directory / "other.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE t (x)")
    conn.close()
    return text, other


def raw(path: Path) -> sqlite3.Connection:
    """A plain connection (autocommit, no foreign keys, no edgeq functions): damage by SQL."""
    return sqlite3.connect(path, isolation_level=None)


def execute(path: Path, sql: str, *args: object) -> None:
    """Run one statement on a plain connection, and close it."""
    conn = raw(path)
    try:
        conn.execute(sql, args)
    finally:
        conn.close()

"""The journal: what a queue manager accepted, expired and delivered, append-only.

A home server (``QueueManager(..., journal="server")``) records, in the same
transaction as the change itself:

* ``accepted``: an assured put was confirmed (uid, origin device, queue, size,
  created time on the device's clock, arrival and confirm times on the server's,
  and the device's clock offset);
* ``expired``: a message was discarded for expiry here (side ``server``, with its
  MQe check point), or a device reported one of its own (side ``device``, time
  rebased to the server's clock);
* ``delivered``: a message was got (or an assured get confirmed).

A device (``journal="device"``) records only its own expiries, as an outbox the
sync agent reports to the server and then trims. ``edgeq export`` turns a
server's journal into Parquet for the analytics pipeline.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, TypeAlias

__all__ = ["JOURNAL_COLUMNS", "JournalEntry", "JournalSide", "JournalTx"]

JournalSide: TypeAlias = Literal["server", "device"]
JournalKind: TypeAlias = Literal["accepted", "expired", "delivered"]

JOURNAL_COLUMNS = (
    "id", "kind", "side", "at_ms", "queue", "uid", "origin", "check_point", "size", "created_ms",
    "arrived_ms", "confirmed_ms", "clock_offset_ms", "device",
)


@dataclass(frozen=True, slots=True)
class JournalEntry:
    """One journal row. Times are epoch ms on the journal owner's clock, except
    ``created_ms`` (the origin's clock; correct it with ``clock_offset_ms``,
    the origin's clock minus the server's)."""

    id: int
    kind: str
    side: str
    at_ms: int
    queue: str
    uid: str
    origin: str
    check_point: str | None = None
    size: int | None = None
    created_ms: int | None = None
    arrived_ms: int | None = None
    confirmed_ms: int | None = None
    clock_offset_ms: int | None = None
    device: str | None = None


class JournalTx:
    """Journal verbs on one open transaction."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def add(self, rows: Iterable[tuple[object, ...]]) -> None:
        """Insert entries given as tuples in ``JOURNAL_COLUMNS`` order, without ``id``."""
        marks = ", ".join("?" for _ in JOURNAL_COLUMNS[1:])
        self.conn.executemany(
            f"INSERT OR IGNORE INTO journal ({', '.join(JOURNAL_COLUMNS[1:])}) VALUES ({marks})", rows
        )

    def since(self, after_id: int, limit: int) -> list[JournalEntry]:
        """Up to ``limit`` entries with ids above ``after_id``, in id order."""
        rows = self.conn.execute(
            f"SELECT {', '.join(JOURNAL_COLUMNS)} FROM journal WHERE id > ? ORDER BY id LIMIT ?",
            (after_id, limit),
        ).fetchall()
        return [JournalEntry(*row) for row in rows]

    def trim(self, up_to_id: int) -> int:
        """Delete the entries up to and including ``up_to_id``; return how many."""
        return self.conn.execute("DELETE FROM journal WHERE id <= ?", (up_to_id,)).rowcount

    def last_id(self) -> int:
        """The highest entry id held (0 if the journal is empty)."""
        (value,) = self.conn.execute("SELECT coalesce(max(id), 0) FROM journal").fetchone()
        return int(value)


def entry_row(
    kind: JournalKind, side: JournalSide, at_ms: int, queue: str, uid: str, origin: str, *,
    check_point: str | None = None, size: int | None = None, created_ms: int | None = None,
    arrived_ms: int | None = None, confirmed_ms: int | None = None, clock_offset_ms: int | None = None,
    device: str | None = None,
) -> tuple[object, ...]:
    """A journal row tuple (``JOURNAL_COLUMNS`` without ``id``)."""
    return (kind, side, at_ms, queue, uid, origin, check_point, size, created_ms, arrived_ms,
            confirmed_ms, clock_offset_ms, device)


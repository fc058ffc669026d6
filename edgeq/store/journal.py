"""The journal: what a queue manager accepted, expired and delivered, append-only, in the change's
transaction (docs/pipeline.md); a device's is an outbox its agent reports and trims."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, TypeAlias, get_args

from edgeq.names import origin_qmgr
from edgeq.store.damage import damaged

__all__ = [
    "DEVICE_KINDS",
    "JOURNAL_COLUMNS",
    "JournalEntry",
    "JournalKind",
    "JournalSide",
    "JournalTx",
    "RemoteExpiryResult",
    "RemoteExpiryStatus",
    "remote_expiry_refusal",
]

JournalSide: TypeAlias = Literal["server", "device"]
JournalKind: TypeAlias = Literal["accepted", "expired", "delivered", "dead-lettered", "discarded"]
#: The kinds a device journals, and reports to its home server (``/v1/expiries``).
DEVICE_KINDS: tuple[JournalKind, ...] = ("expired", "dead-lettered", "discarded")
#: What a server made of one expiry a device reported: ``recorded`` (new, kept),
#: ``already`` (kept before: a repeat is kept once), ``refused`` (see the detail).
RemoteExpiryStatus: TypeAlias = Literal["recorded", "already", "refused"]

JOURNAL_COLUMNS = (
    "id", "kind", "side", "at_ms", "queue", "uid", "origin", "check_point", "size", "created_ms",
    "arrived_ms", "confirmed_ms", "clock_offset_ms", "device",
)


@dataclass(frozen=True, slots=True)
class JournalEntry:
    """One journal row; times in epoch ms on the owner's clock, except ``created_ms`` (the origin's:
    ``clock_offset_ms`` is the origin's clock minus the server's)."""

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
    """The SQL of the journal: append, read, trim."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def add(self, rows: Iterable[tuple[object, ...]]) -> None:
        """Insert entries given as tuples in ``JOURNAL_COLUMNS`` order, without ``id``."""
        marks = ", ".join("?" for _ in JOURNAL_COLUMNS[1:])
        self.conn.executemany(
            f"INSERT OR IGNORE INTO journal ({', '.join(JOURNAL_COLUMNS[1:])}) VALUES ({marks})", rows
        )

    def add_each(self, rows: Iterable[tuple[object, ...]]) -> list[bool]:
        """Like :meth:`add`; whether each row was new (a device's repeated expiry is ignored)."""
        marks = ", ".join("?" for _ in JOURNAL_COLUMNS[1:])
        sql = f"INSERT OR IGNORE INTO journal ({', '.join(JOURNAL_COLUMNS[1:])}) VALUES ({marks})"
        return [self.conn.execute(sql, row).rowcount > 0 for row in rows]

    def since(self, after_id: int, limit: int) -> list[JournalEntry]:
        rows = self.conn.execute(
            f"SELECT {', '.join(JOURNAL_COLUMNS)} FROM journal WHERE id > ? ORDER BY id LIMIT ?",
            (after_id, limit),
        ).fetchall()
        return [_entry(row, self.conn) for row in rows]

    def trim(self, up_to_id: int) -> int:
        return self.conn.execute("DELETE FROM journal WHERE id <= ?", (up_to_id,)).rowcount

    def last_id(self) -> int:
        (value,) = self.conn.execute("SELECT coalesce(max(id), 0) FROM journal").fetchone()
        return int(value)


_KINDS = frozenset(get_args(JournalKind))
_SIDES = frozenset({"server", "device"})


def _entry(row: tuple[object, ...], conn: sqlite3.Connection) -> JournalEntry:
    """A journal row read back; an impossible value (no checksum here) is a damaged store."""
    (id_, kind, side, at_ms, queue, uid, origin, check_point, size, created_ms, arrived_ms,
     confirmed_ms, offset, device) = row
    ints = (size, created_ms, arrived_ms, confirmed_ms, offset)
    texts = (check_point, device)
    if not (
        type(id_) is int and kind in _KINDS and side in _SIDES and type(at_ms) is int
        and isinstance(queue, str) and isinstance(uid, str) and isinstance(origin, str)
        and all(v is None or type(v) is int for v in ints)
        and all(v is None or isinstance(v, str) for v in texts)
    ):
        raise damaged(f"journal entry {id_!r} holds a value no edgeq writes ({row!r})", conn)
    return JournalEntry(*row)  # type: ignore[arg-type]


def entry_row(
    kind: JournalKind, side: JournalSide, at_ms: int, queue: str, uid: str, origin: str, *,
    check_point: str | None = None, size: int | None = None, created_ms: int | None = None,
    arrived_ms: int | None = None, confirmed_ms: int | None = None, clock_offset_ms: int | None = None,
    device: str | None = None,
) -> tuple[object, ...]:
    """A journal row tuple (``JOURNAL_COLUMNS`` without ``id``)."""
    return (kind, side, at_ms, queue, uid, origin, check_point, size, created_ms, arrived_ms,
            confirmed_ms, clock_offset_ms, device)


@dataclass(frozen=True, slots=True)
class RemoteExpiryResult:
    """What happened to one expiry a device reported (``journal_remote_expiries_each``)."""

    uid: str
    queue: str
    status: RemoteExpiryStatus
    detail: str = ""


def remote_expiry_refusal(device: str, entry: JournalEntry) -> str | None:
    """Why a server refuses an expiry ``device`` reports, or None: a device reports its own
    messages (any incarnation) and those it pulled from ``<device>.<queue>``.

    >>> def reported(uid, queue):
    ...     return JournalEntry(0, "expired", "device", 5, queue, uid, uid.rpartition(".")[0])
    >>> remote_expiry_refusal("DEV1", reported("DEV1:k3x9qa.42", "ORDERS")) is None
    True
    >>> remote_expiry_refusal("DEV1", reported("HOME.43", "DEV1.INBOX")) is None
    True
    >>> remote_expiry_refusal("DEV1", reported("HOME.44", "ORDERS"))[:8]
    'foreign:'
    """
    if entry.kind not in DEVICE_KINDS:
        return f"not a kind a device reports: {entry.uid} is reported as {entry.kind!r}"
    origin = entry.uid.rpartition(".")[0]
    if origin_qmgr(origin) == device:
        return None
    prefix = f"{device}."
    if entry.queue.startswith(prefix) and len(entry.queue) > len(prefix):
        return None
    return (
        f"foreign: {entry.uid} was made by {origin_qmgr(origin) or '?'}, not {device}, "
        f"and {entry.queue!r} is not a queue the server holds for {device} ({prefix}<queue>)"
    )

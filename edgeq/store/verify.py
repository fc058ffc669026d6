"""Message rows that fail their check: a damaged index told from a damaged row, by reading the
row again from the table alone (docs/storage.md, "What is detected, and what is not").
"""

from __future__ import annotations

import functools
import re
import sqlite3
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from edgeq.store.damage import index_damaged
from edgeq.store.opening import is_damage
from edgeq.store.records import MessageRow, QueueRow, is_intact
from edgeq.store.tx import Tx
from edgeq.types import MAX_STAMP

__all__ = ["diagnose", "lenient", "locked_unindexed", "stripped", "tolerant"]

T = TypeVar("T")

_ORIGIN = re.compile(r"[A-Za-z0-9._-]{1,48}(?::[a-z0-9]{1,16})?")
# Text that is not UTF-8 reads with U+FFFD in its place: the row then fails its checksum.
_LENIENT = functools.partial(str, encoding="utf-8", errors="replace")


def tolerant(conn: sqlite3.Connection, read: Callable[[], T]) -> T:
    """``read()``, again with :func:`lenient` text if it met text that is not UTF-8 (so the row
    fails its checksum instead of the read). ``read`` must not write: it may run twice."""
    try:
        return read()
    except (sqlite3.OperationalError, UnicodeDecodeError) as exc:
        if not is_damage(exc):
            raise
        traceback.clear_frames(exc.__traceback__)  # the interrupted statement: let it go
    with lenient(conn):
        return read()


@contextmanager
def lenient(conn: sqlite3.Connection) -> Iterator[None]:
    """Within the block, text that is not UTF-8 reads with U+FFFD in its place."""
    before = conn.text_factory
    conn.text_factory = _LENIENT
    try:
        yield
    finally:
        conn.text_factory = before


def _owner(tx: Tx, row_id: int) -> tuple[QueueRow | None, MessageRow] | None:
    """The row with rowid ``row_id`` as the table holds it (no index), and its queue."""
    copies = tx.rows([row_id])
    if not copies:
        return None
    (queue_id,) = tx.conn.execute(
        "SELECT queue_id FROM messages WHERE id = ?", (row_id,)
    ).fetchone()
    named = tx.conn.execute("SELECT name FROM queues WHERE id = ?", (queue_id,)).fetchone()
    owner = tx.queue(named[0]) if named is not None and isinstance(named[0], str) else None
    return (owner if owner is not None and owner.id == queue_id else None), copies[0]


def diagnose(
    tx: Tx, q: QueueRow, row: MessageRow, *, same_tx: bool = True
) -> tuple[QueueRow, MessageRow] | None:
    """For ``row`` of ``q`` that failed its checksum: the queue and row (as the table holds it) to
    quarantine; None if gone since an earlier transaction (``same_tx=False``). Raises the
    index-damaged StoreError if the table's copy is intact: the index is damaged, not the row."""
    found = tolerant(tx.conn, lambda: _owner(tx, row.id))
    if found is None:
        if not same_tx:
            return None
        raise index_damaged(
            f"an index of queue {q.name!r} points at message row {row.id}, which does not exist",
            tx.conn,
        )
    owner, copy = found
    if owner is not None and is_intact(owner.name, copy):
        where = "" if owner.id == q.id else f" of queue {owner.name!r}"
        raise index_damaged(
            f"message {copy.origin}.{copy.stamp}{where} was read through an index of queue {q.name!r} "
            f"as {row.origin}.{row.stamp}", tx.conn,
        )
    return (owner or q), copy


def locked_unindexed(tx: Tx, queue_id: int, origin: str, stamp: int) -> bool:
    """Whether the queue holds the message locked, found through the lock index, not the uid
    index: tells a damaged uid index from a caller's mistake."""
    row = tx.conn.execute(
        "SELECT 1 FROM messages INDEXED BY messages_confirm WHERE queue_id = ? "
        "AND confirm_id IS NOT NULL AND origin = ? AND stamp = ? LIMIT 1", (queue_id, origin, stamp),
    ).fetchone()
    return row is not None


def stripped(row: MessageRow) -> MessageRow | None:
    """What a rule is told of a quarantined message: its uid alone, or None if even that is unreadable.

    >>> s = stripped(MessageRow(7, "DEV1", 5, 0, None, 68, 1, 1, 0, *[None] * 3, 0, *[None] * 3, b"f", b"x"))
    >>> s.origin, s.stamp, s.priority, s.fields, s.data
    ('DEV1', 5, 0, None, b'')
    """
    origin, stamp = row.origin, row.stamp
    if not (
        isinstance(origin, str) and _ORIGIN.fullmatch(origin) and type(stamp) is int
        and 0 < stamp <= MAX_STAMP
    ):
        return None
    return MessageRow(
        row.id, origin, stamp, 0, None, 0, 0, 0, 0, None, None, None, 0, None, None, None, None, b""
    )

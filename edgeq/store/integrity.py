"""Row checksums: a flipped bit in a message row reads as damage, never as data (what is
covered, and why not the state: docs/storage.md, "What is detected, and what is not"). Also the
SQL function ``edgeq_crc``, so migrations, ``retime`` and ``edgeq check`` compute what a put does.
"""

from __future__ import annotations

import sqlite3
import struct
from zlib import crc32

__all__ = ["CRC_SQL", "register", "row_crc"]

# The integer columns packed as int64s (None as the smallest int64): packing is
# several times cheaper than formatting big ints as text, and this runs once per put.
_INTS = struct.Struct("<10q").pack
_NONE = -(2**63)


def row_crc(
    queue: str, origin: str, stamp: int, priority: int, created_ms: int, arrived_ms: int,
    expiry_kind: int, expiry_value: int | None, cap_at: int | None, deadline: int | None,
    correlation_id: bytes | None, reply_to: str | None, report: str | None, key_id: str | None,
    fields: bytes | None, data: bytes,
) -> int:
    """The checksum of a message row of queue ``queue`` (a row moved to another queue fails).

    >>> row_crc("Q", "DEV1:abc", 5, 4, 1000, 1000, 0, None, None, None, None, None, None, None, None, b"hi")
    1330049484
    """
    crc = crc32(_INTS(
        stamp, priority, created_ms, arrived_ms, expiry_kind,
        _NONE if expiry_value is None else expiry_value, _NONE if cap_at is None else cap_at,
        _NONE if deadline is None else deadline,
        -1 if correlation_id is None else len(correlation_id), -1 if fields is None else len(fields),
    ))
    crc = crc32(f"{queue}|{origin}|{reply_to}|{report}|{key_id}".encode(), crc)
    if correlation_id:
        crc = crc32(correlation_id, crc)
    if fields:
        crc = crc32(fields, crc)
    return crc32(data, crc)


#: ``row_crc`` of a ``messages`` row in SQL (the queue's name looked up by id).
CRC_SQL = (
    "edgeq_crc((SELECT name FROM queues WHERE queues.id = messages.queue_id), origin, stamp, "
    "priority, created_ms, arrived_ms, expiry_kind, expiry_value, cap_at, deadline, correlation_id, "
    "reply_to, report, key_id, fields, data)"
)


def register(conn: sqlite3.Connection) -> None:
    """Make ``edgeq_crc(...)`` available in SQL on ``conn``."""
    conn.create_function("edgeq_crc", 16, _sql_crc, deterministic=True)


def _sql_crc(*values: object) -> int | None:
    # Damaged values (a text where an int belongs, a NULL data) have no checksum:
    # NULL never equals a stored crc, so the row reads as damaged, not as an error.
    try:
        return row_crc(*values)  # type: ignore[arg-type]
    except (TypeError, ValueError, struct.error):
        return None

"""The store's rows as Python values, and their checksums: code that reads rows need not know SQL."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import NamedTuple

from edgeq.store.integrity import row_crc
from edgeq.types import DEFAULT_MAX_REDELIVERY_DELAY_MS, DEFAULT_REDELIVERY_DELAY_MS

__all__ = ["MessageRow", "NewMessage", "QueueRow", "as_stored", "is_intact", "new_crc", "stored_size"]


class MessageRow(NamedTuple):
    """A message row as stored (``data`` and ``fields`` are sealed if ``key_id`` is set)."""
    id: int
    origin: str
    stamp: int
    state: int
    confirm_id: int | None
    priority: int
    created_ms: int
    arrived_ms: int
    expiry_kind: int
    expiry_value: int | None
    cap_at: int | None
    deadline: int | None
    backout_count: int
    correlation_id: bytes | None
    reply_to: str | None
    report: str | None
    fields: bytes | None
    data: bytes
    key_id: str | None = None  # the store key ``data`` and ``fields`` are sealed with (None: clear)
    crc: int | None = None  # edgeq.store.integrity.row_crc of the row as written


def stored_size(row: MessageRow | NewMessage) -> int:
    """The bytes a message takes against ``max_bytes`` budgets: data plus fields, as stored. A value
    of another type (damage) counts 0, so the row can still be quarantined (``edgeq check`` fixes the sum)."""
    data, fields = row.data, row.fields
    return (len(data) if type(data) is bytes else 0) + (len(fields) if type(fields) is bytes else 0)


@dataclass(frozen=True, slots=True)
class QueueRow:
    """A queue row as stored, with its current ``depth``."""
    id: int
    name: str
    expiry_ms: int | None
    cap_expiry_ms: int | None
    max_depth: int | None
    max_message_bytes: int | None
    default_priority: int
    ordering: str
    created_ms: int
    depth: int
    depth_threshold: int | None
    kind: str
    target_qmgr: str | None
    target_queue: str | None
    mode: str | None
    server: str | None
    encryption: str | None
    bytes: int = 0  # data plus fields of every message held, as stored (kept in step like depth)
    max_bytes: int | None = None
    on_full: str = "reject"
    refusal_limit: int | None = None
    backout_threshold: int | None = None  # v9: backouts before a message is moved, not redelivered
    backout_queue: str | None = None  # v9: where it is moved (None: kept, rules told)
    compression: str | None = None  # v10: the codec its batches cross the wire in (None: none)
    redelivery_delay_ms: int = DEFAULT_REDELIVERY_DELAY_MS  # v10: a backed-out message's first wait
    max_redelivery_delay_ms: int = DEFAULT_MAX_REDELIVERY_DELAY_MS  # v10: what it doubles up to


class NewMessage(NamedTuple):
    """The values of a row to insert (``id`` is assigned by SQLite)."""

    origin: str
    stamp: int
    state: int
    confirm_id: int | None
    rank: int
    seq: int
    priority: int
    created_ms: int
    arrived_ms: int
    expiry_kind: int
    expiry_value: int | None
    cap_at: int | None
    deadline: int | None
    correlation_id: bytes | None
    reply_to: str | None
    report: str | None
    fields: bytes | None
    data: bytes
    key_id: str | None = None


def new_crc(queue: str, r: NewMessage) -> int:
    """The checksum (``edgeq.store.integrity``) a new row of queue ``queue`` is stored with."""
    return row_crc(
        queue, r.origin, r.stamp, r.priority, r.created_ms, r.arrived_ms, r.expiry_kind, r.expiry_value,
        r.cap_at, r.deadline, r.correlation_id, r.reply_to, r.report, r.key_id, r.fields, r.data,
    )


def is_intact(queue: str, row: MessageRow) -> bool:
    """Whether ``row``, read for queue ``queue``, is what was written there (its checksum matches)."""
    if row.crc is None:
        return False
    try:
        crc = row_crc(
            queue, row.origin, row.stamp, row.priority, row.created_ms, row.arrived_ms, row.expiry_kind,
            row.expiry_value, row.cap_at, row.deadline, row.correlation_id, row.reply_to, row.report,
            row.key_id, row.fields, row.data,
        )
    except (TypeError, ValueError, struct.error):  # a value of the wrong type: a flip SQLite let through
        return False
    return crc == row.crc


def as_stored(queue: str, r: NewMessage) -> MessageRow:
    """The row a new message of queue ``queue`` is (for events made before it is inserted)."""
    return MessageRow(
        0, r.origin, r.stamp, r.state, r.confirm_id, r.priority, r.created_ms, r.arrived_ms, r.expiry_kind,
        r.expiry_value, r.cap_at, r.deadline, 0, r.correlation_id, r.reply_to, r.report, r.fields, r.data,
        r.key_id, new_crc(queue, r),
    )

"""Conversion between :class:`~edgeq.message.Message` and stored rows."""

from __future__ import annotations

from collections.abc import Mapping

from edgeq.crypto import SEAL_OVERHEAD
from edgeq.encoding.fields import decode_fields
from edgeq.message import Message
from edgeq.store.records import MessageRow
from edgeq.types import FieldValue, ReportOption
from edgeq.uid import MessageUID
from edgeq.values import Int32, Int64

__all__ = ["EXPIRY_KINDS", "is_expired", "matches", "plain_size", "reported_expiry", "to_message"]

_REPORTS: dict[str, ReportOption] = {"with-data": "with-data", "with-full-data": "with-full-data"}

#: ``messages.expiry_kind``: none, relative (Int32), absolute (Int64).
EXPIRY_KINDS = {type(None): 0, Int32: 1, Int64: 2}


def reported_expiry(row: MessageRow) -> Int32 | Int64 | None:
    """The expiry a got message carries onward: its own, or the cap as an absolute expiry if
    shorter, so the lowest cap along a forwarding path wins (IBM MQ CAPEXPRY)."""
    own: Int32 | Int64 | None = None
    own_deadline = None
    if row.expiry_kind == 1 and row.expiry_value is not None:
        own, own_deadline = Int32(row.expiry_value), row.created_ms + row.expiry_value
    elif row.expiry_kind == 2 and row.expiry_value is not None:
        own, own_deadline = Int64(row.expiry_value), row.expiry_value
    if row.cap_at is not None and (own_deadline is None or row.cap_at < own_deadline):
        return Int64(row.cap_at)
    return own


def to_message(row: MessageRow, now_ms: int, *, intact: bool = False) -> Message:
    """The message a row holds, as ``get``/``browse`` (or a rule) sees it at ``now_ms``; ``intact``:
    the row passed its checksum, so its uid needs no second check."""
    remaining = None if row.deadline is None else max(row.deadline - now_ms, 0)
    return Message(
        row.data,
        fields=decode_fields(row.fields),
        priority=row.priority,
        expiry=reported_expiry(row),
        correlation_id=row.correlation_id,
        reply_to=row.reply_to,
        expiry_report=_REPORTS.get(row.report or "", "none"),
        uid=MessageUID._trusted(row.origin, row.stamp) if intact else MessageUID(row.origin, row.stamp),
        created_ms=row.created_ms,
        backout_count=row.backout_count,
        remaining_expiry_ms=remaining,
    )


def is_expired(row: MessageRow, now_ms: int) -> bool:
    """Whether the row's deadline has come (MQe: expired at and after it)."""
    return row.deadline is not None and row.deadline <= now_ms


def plain_size(row: MessageRow) -> int:
    """The size of a message's data, sealed or not."""
    return len(row.data) - (SEAL_OVERHEAD if row.key_id is not None else 0)


def _same(a: object, b: object) -> bool:
    # True == 1 in Python; a bool field only matches a bool filter value.
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


def matches(row: MessageRow, wanted: Mapping[str, FieldValue]) -> bool:
    """Whether the (unsealed) row's fields equal every value of a ``filter``."""
    fields = decode_fields(row.fields)
    return all(name in fields and _same(fields[name], value) for name, value in wanted.items())

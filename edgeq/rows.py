"""Conversion between :class:`~edgeq.message.Message` and stored rows."""

from __future__ import annotations

from edgeq.codec import decode_fields
from edgeq.message import Message
from edgeq.store import MessageRow
from edgeq.types import ReportOption
from edgeq.uid import MessageUID
from edgeq.values import Int32, Int64

__all__ = ["EXPIRY_KINDS", "to_message"]

_REPORTS: dict[str, ReportOption] = {"with-data": "with-data", "with-full-data": "with-full-data"}

#: ``messages.expiry_kind``: none, relative (Int32), absolute (Int64).
EXPIRY_KINDS = {type(None): 0, Int32: 1, Int64: 2}


def _reported_expiry(row: MessageRow) -> Int32 | Int64 | None:
    """The expiry a got message carries onward: its own, unless a cap cut it shorter.

    A capped message carries the cap as an absolute expiry, so the lowest cap
    along a forwarding path wins (IBM MQ CAPEXPRY).
    """
    own: Int32 | Int64 | None = None
    own_deadline = None
    if row.expiry_kind == 1 and row.expiry_value is not None:
        own, own_deadline = Int32(row.expiry_value), row.created_ms + row.expiry_value
    elif row.expiry_kind == 2 and row.expiry_value is not None:
        own, own_deadline = Int64(row.expiry_value), row.expiry_value
    if row.cap_at is not None and (own_deadline is None or row.cap_at < own_deadline):
        return Int64(row.cap_at)
    return own


def to_message(row: MessageRow, now_ms: int) -> Message:
    """The message a row holds, as ``get``/``browse`` (or a rule) sees it at ``now_ms``."""
    remaining = None if row.deadline is None else max(row.deadline - now_ms, 0)
    return Message(
        row.data,
        fields=decode_fields(row.fields),
        priority=row.priority,
        expiry=_reported_expiry(row),
        correlation_id=row.correlation_id,
        reply_to=row.reply_to,
        expiry_report=_REPORTS.get(row.report or "", "none"),
        uid=MessageUID(row.origin, row.stamp),
        created_ms=row.created_ms,
        backout_count=row.backout_count,
        remaining_expiry_ms=remaining,
    )

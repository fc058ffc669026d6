"""How ``edgeq admin`` shows requests and replies as text (JSON is ``AdminRecord.as_dict``)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from edgeq.cli.format import format_time
from edgeq.cli.views import format_table
from edgeq.sync.server.admin.records import AdminRecord, plain_json

__all__ = ["format_fanout", "format_items", "format_pending", "format_record", "format_replies",
           "request_words", "value_text"]

_FIRST = ("object", "rc")
#: The values a queue's item usually has, in the order a table shows them (any other after).
_USUAL = ("kind", "depth", "bytes", "oldest_age_ms")


def value_text(value: object) -> str:
    """A reply value in a table cell: ``-`` for none, JSON for lists and maps."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (Mapping, list, tuple)):
        return json.dumps(plain_json(value), ensure_ascii=False, separators=(", ", ": "))
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


def format_items(items: Sequence[Mapping[str, object]]) -> str:
    """A reply's items as a table, or ``key: value`` lines for one item holding nested values.

    >>> print(format_items([{"object": "A", "rc": "success", "reason": None, "depth": 2},
    ...                     {"object": "B", "rc": "failed", "reason": "no such queue"}]))
    OBJECT  RC       DEPTH  REASON
    A       success  2      -
    B       failed   -      no such queue
    """
    if not items:
        return "(nothing to show)"
    if len(items) == 1 and any(isinstance(v, Mapping) for v in items[0].values()):
        return _vertical(items[0])
    keys = _keys(items)
    header = tuple(k.upper().replace("_", "-") for k in keys)
    return format_table(header, [tuple(value_text(item.get(k)) for k in keys) for item in items])


def _keys(items: Sequence[Mapping[str, object]]) -> list[str]:
    keys = [k for k in (*_FIRST, *_USUAL) if any(k in item for item in items)]
    keys += sorted({k for item in items for k in item} - {*keys, "reason"})
    if any(item.get("reason") is not None for item in items):
        keys.append("reason")
    return keys


def _vertical(item: Mapping[str, object], indent: str = "") -> str:
    lines = []
    for key in _keys([item]):
        value = item[key]
        if isinstance(value, Mapping):
            lines.append(f"{indent}{key}:")
            lines.append(_vertical(value, indent + "  "))
        else:
            lines.append(f"{indent}{key}: {value_text(value)}")
    return "\n".join(lines)


def request_words(record: AdminRecord) -> str:
    """``define-queue ALERTS``: the action and its target."""
    return f"{record.action} {record.target}" if record.target else record.action


def format_record(record: AdminRecord, now_ms: int) -> str:
    """A request and how it stands: one line, then the reply's items once it came."""
    head = f"{record.device} {request_words(record)}: {record.describe(now_ms)} (request {record.request_id})"
    reply = record.reply
    if reply is None:
        return head
    return "\n".join((f"{head}: {reply.message}", format_items(reply.results)))


def format_fanout(records: Sequence[AdminRecord], now_ms: int) -> str:
    """One line per device: its name, how its request stands, the reply's message."""
    rows = []
    for r in records:
        status = r.rc if r.rc is not None else r.describe(now_ms)
        message = r.reply.message if r.reply is not None else (
            f"no reply yet (request {r.request_id})" if r.status(now_ms) == "pending"
            else f"request {r.request_id}")
        rows.append((r.device, status, message))
    return format_table(("DEVICE", "STATUS", "MESSAGE"), rows)


def format_pending(records: Sequence[AdminRecord], now_ms: int) -> str:
    """Requests with no reply yet, one line each."""
    if not records:
        return "No admin request is waiting for a reply."
    rows = [(r.request_id, r.device, request_words(r), format_time(r.created_ms), r.describe(now_ms))
            for r in records]
    return format_table(("REQUEST", "DEVICE", "ACTION", "SENT", "STATUS"), rows)


def format_replies(records: Sequence[AdminRecord]) -> str:
    """Requests and their replies, newest first, one line each."""
    if not records:
        return "No admin reply yet."
    rows = [(r.request_id, r.device, request_words(r), format_time(r.replied_ms or 0), r.rc or "-",
             r.reply.message if r.reply is not None else "-") for r in records]
    return format_table(("REQUEST", "DEVICE", "ACTION", "REPLIED", "RC", "MESSAGE"), rows)

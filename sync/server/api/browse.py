"""A queue's stored messages as JSON-ready dicts, a page at a time or one whole: what the management API
answers and the console's queue page shows (and a device, as the API shows it). An encrypted queue's
data and fields are never shown."""

from __future__ import annotations

import base64
import math
import sqlite3
from dataclasses import asdict
from typing import Any, Final

from edgeq.encoding.fields import decode_fields
from edgeq.errors import EdgeqError, QueueNotFound
from edgeq.store.devices import DeviceRecord
from edgeq.store.records import MessageRow, is_intact
from edgeq.store.rows import plain_size
from edgeq.store.tx import Tx
from edgeq.sync.keys import fingerprint
from edgeq.types import FieldValue, MessageState
from edgeq.uid import MessageUID
from edgeq.values import Int32, Int64

__all__ = ["PREVIEW_BYTES", "device_json", "message_json", "message_page", "one_message"]

#: how much of each message's data a page shows (one message is shown whole)
PREVIEW_BYTES: Final = 256


def _field(value: FieldValue) -> dict[str, Any]:
    """A typed field as JSON: its type and a value JSON can hold (bytes as hex)."""
    out: Any = value
    if isinstance(value, (Int32, Int64)):
        out = int(value)
    elif isinstance(value, float) and not math.isfinite(value):
        out = str(value)
    elif isinstance(value, bytes):
        out = value.hex()
    return {"type": type(value).__name__.lower(), "value": out}


def _data(data: bytes, preview: int | None) -> dict[str, Any]:
    shown = data if preview is None else data[:preview]
    try:
        text: str | None = shown.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    return {"data_base64": base64.b64encode(shown).decode("ascii"), "data_text": text,
            "truncated": len(shown) < len(data)}


def message_json(queue: str, row: MessageRow, now_ms: int, preview: int | None) -> dict[str, Any]:
    """One stored message as the API shows it (``preview``: the data's first bytes only)."""
    out: dict[str, Any] = {
        "uid": f"{row.origin}.{row.stamp}", "state": MessageState(row.state).name.lower().replace("_", "-"),
        "priority": row.priority, "created_ms": row.created_ms, "arrived_ms": row.arrived_ms,
        "deadline_ms": row.deadline, "expired": row.deadline is not None and row.deadline <= now_ms,
        "backout_count": row.backout_count, "size": plain_size(row), "encrypted": row.key_id is not None,
        "correlation_id": None if row.correlation_id is None else row.correlation_id.hex(),
        "reply_to": row.reply_to, "intact": is_intact(queue, row)}
    if row.key_id is not None or not out["intact"]:
        return {**out, "fields": None, "data_base64": None, "data_text": None, "truncated": False}
    try:
        out["fields"] = {k: _field(v) for k, v in decode_fields(row.fields).items()}
    except EdgeqError:
        out["fields"] = None
    return {**out, **_data(row.data, preview)}


def _queue_id(tx: Tx, queue: str) -> int:
    found = tx.queue(queue)
    if found is None:
        raise QueueNotFound(f"no queue {queue!r}")
    return found.id


def message_page(conn: sqlite3.Connection, queue: str, *, after: int | None, size: int,
                 now_ms: int) -> dict[str, Any]:
    """Up to ``size`` of ``queue``'s messages after the cursor ``after``, in arrival order, any state, each
    data cut to :data:`PREVIEW_BYTES`; ``next``: the following page's cursor (None: this is the last)."""
    tx = Tx(conn)
    ids = [i for (i,) in conn.execute(
        "SELECT id FROM messages WHERE queue_id = ? AND id > ? ORDER BY id LIMIT ?",
        (_queue_id(tx, queue), after or 0, size))]
    rows = sorted(tx.rows(ids))
    return {"queue": queue, "messages": [message_json(queue, r, now_ms, PREVIEW_BYTES) for r in rows],
            "next": rows[-1].id if len(rows) == size else None}


def one_message(conn: sqlite3.Connection, queue: str, uid: MessageUID, *,
                now_ms: int) -> dict[str, Any] | None:
    """``queue``'s message ``uid``, whole (None: the queue holds no such message)."""
    tx = Tx(conn)
    row = tx.find(_queue_id(tx, queue), uid.origin, uid.stamp)
    return None if row is None else message_json(queue, row, now_ms, None)


def device_json(d: DeviceRecord, backlog: tuple[int, int] | None = None) -> dict[str, Any]:
    """A device as the API shows it: its key by fingerprint only; the backlog it last reported and when."""
    out = asdict(d)
    out["backlog"], out["backlog_reported_ms"] = backlog or (None, None)
    out["public_key"] = None if d.public_key is None else fingerprint(d.public_key)
    out["queues"] = None if d.queues is None else list(d.queues)
    out["registered"] = d.registered
    return out

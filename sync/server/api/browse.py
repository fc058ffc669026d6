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
from edgeq.store.rows import plain_size, reported_expiry
from edgeq.store.tx import Tx
from edgeq.sync.keys import fingerprint
from edgeq.types import FieldValue, MessageState
from edgeq.uid import MessageUID
from edgeq.values import Int32, Int64

__all__ = ["PREVIEW_BYTES", "device_json", "message_json", "message_page", "one_message", "ready_page"]

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


def _expiry(row: MessageRow) -> dict[str, Any] | None:
    """The expiry a got message carries (its own, or a shorter cap as absolute), as the CLI shows it."""
    expiry = reported_expiry(row)
    if isinstance(expiry, Int32):
        return {"type": "int32", "relative_ms": int(expiry)}
    return None if expiry is None else {"type": "int64", "at_ms": int(expiry)}


def message_json(queue: str, row: MessageRow, now_ms: int, preview: int | None) -> dict[str, Any]:
    """One stored message as the API shows it (``preview``: the data's first bytes only)."""
    out: dict[str, Any] = {
        "uid": f"{row.origin}.{row.stamp}", "state": MessageState(row.state).name.lower().replace("_", "-"),
        "priority": row.priority, "created_ms": row.created_ms, "arrived_ms": row.arrived_ms,
        "deadline_ms": row.deadline, "expired": row.deadline is not None and row.deadline <= now_ms,
        "backout_count": row.backout_count, "size": plain_size(row), "encrypted": row.key_id is not None,
        "correlation_id": None if row.correlation_id is None else row.correlation_id.hex(),
        "reply_to": row.reply_to, "intact": is_intact(queue, row)}
    out["expiry"] = _expiry(row) if out["intact"] else None  # a damaged row's columns may be anything
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


def ready_page(conn: sqlite3.Connection, queue: str, *, after: tuple[int, int] | None, size: int,
               now_ms: int) -> dict[str, Any]:
    """Like :func:`message_page`, but only the ready messages, in get order (what ``browse`` shows); the
    cursor is the last one's place in that order, ``RANK.SEQ``."""
    tx = Tx(conn)
    queue_id = _queue_id(tx, queue)
    sql = f"SELECT id, rank, seq FROM messages WHERE queue_id = ? AND state = {int(MessageState.READY)}"
    args: tuple[int, ...] = (queue_id,)
    if after is not None:  # keyset paging on the ready index, as a get walks it
        sql, args = f"{sql} AND (rank < ? OR (rank = ? AND seq > ?))", (queue_id, after[0], *after)
    keys = conn.execute(f"{sql} ORDER BY rank DESC, seq LIMIT ?", (*args, size))
    found = [(int(i), f"{rank}.{seq}") for i, rank, seq in keys]
    rows = {r.id: r for r in tx.rows([i for i, _ in found])}  # a row gone since is left out
    return {"queue": queue, "next": found[-1][1] if len(found) == size else None,
            "messages": [message_json(queue, rows[i], now_ms, PREVIEW_BYTES) for i, _ in found if i in rows]}


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

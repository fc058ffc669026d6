"""``/api/v1/queues/{name}/messages`` and ``/api/v1/dead-letters``: a queue's messages a page at a time
(in arrival order, any state), one message whole; re-sending or deleting a dead-lettered one.
An encrypted queue's data and fields are never shown, and nothing is decrypted."""

from __future__ import annotations

import base64
import math
from contextlib import closing
from typing import Any, Final

from starlette.requests import Request
from starlette.routing import Route

from edgeq.encoding.fields import decode_fields
from edgeq.errors import EdgeqError
from edgeq.store.opening import connect
from edgeq.store.records import MessageRow, is_intact
from edgeq.store.rows import plain_size
from edgeq.store.tx import Tx
from edgeq.sync.server.api.endpoints import Api
from edgeq.sync.server.api.http import ApiError, cursor, limit, queue_name, uid
from edgeq.types import FieldValue, MessageState
from edgeq.values import Int32, Int64

__all__ = ["PREVIEW_BYTES", "routes"]

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


def routes(api: Api) -> list[Route]:
    qm = api.qm

    def page(name: str, after: int | None, size: int) -> dict[str, Any]:
        with closing(connect(qm.path, read_only=True)) as conn:
            tx = Tx(conn)
            queue = tx.queue(name)
            if queue is None:
                raise ApiError(404, f"no queue {name!r}: GET /api/v1/queues lists them")
            ids = [i for (i,) in conn.execute(
                "SELECT id FROM messages WHERE queue_id = ? AND id > ? ORDER BY id LIMIT ?",
                (queue.id, after or 0, size))]
            rows = sorted(tx.rows(ids))
        now = api.clock()
        return {"queue": name, "messages": [message_json(name, r, now, PREVIEW_BYTES) for r in rows],
                "next": rows[-1].id if len(rows) == size else None}

    def one(name: str, text: str) -> dict[str, Any]:
        wanted = uid(text)
        with closing(connect(qm.path, read_only=True)) as conn:
            tx = Tx(conn)
            queue = tx.queue(name)
            if queue is None:
                raise ApiError(404, f"no queue {name!r}: GET /api/v1/queues lists them")
            row = tx.find(queue.id, wanted.origin, wanted.stamp)
        if row is None:
            raise ApiError(404, f"queue {name!r} holds no message {text}: it was got, expired or never there")
        return message_json(name, row, api.clock(), None)

    def messages(request: Request) -> dict[str, Any]:
        return page(queue_name(request.path_params["name"]), cursor(request), limit(request))

    def message(request: Request) -> dict[str, Any]:
        return one(queue_name(request.path_params["name"]), request.path_params["uid"])

    def dead_letters(request: Request) -> dict[str, Any]:
        after, size = cursor(request), limit(request)
        name = qm.dead_letter_queue()
        if name not in qm.queue_names():
            return {"queue": name, "messages": [], "next": None}
        return page(name, after, size)

    def dead_letter(request: Request) -> dict[str, Any]:
        return one(qm.dead_letter_queue(), request.path_params["uid"])

    def resend(request: Request) -> dict[str, Any]:
        wanted = uid(request.path_params["uid"])
        result = qm.dlq_resend([wanted])
        if result.kept:
            why = result.kept[0][1]
            raise ApiError(404 if why.startswith("not on") or why.startswith("there is no") else 409,
                           f"{wanted} was not re-sent: {why}")
        return {"resent": [str(u) for u in result.moved]}

    def delete(request: Request) -> dict[str, Any]:
        wanted = uid(request.path_params["uid"])
        return {"deleted": qm.dlq_delete([wanted]), "uid": str(wanted)}

    def target(request: Request) -> str:
        return str(request.path_params["uid"])

    return [
        Route("/queues/{name}/messages", api.read(messages), methods=["GET"]),
        Route("/queues/{name}/messages/{uid}", api.read(message), methods=["GET"]),
        Route("/dead-letters", api.read(dead_letters), methods=["GET"]),
        Route("/dead-letters/{uid}", api.read(dead_letter), methods=["GET"]),
        Route("/dead-letters/{uid}/resend", api.act("resend-dead-letter", target, resend), methods=["POST"]),
        Route("/dead-letters/{uid}/delete", api.act("delete-dead-letter", target, delete), methods=["POST"]),
    ]

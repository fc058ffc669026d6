"""``/api/v1/metrics``: the journal's counts per kind over time, in the buckets the console's charts draw
(:mod:`edgeq.sync.server.series`), for a queue, a device, or the whole server."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from dataclasses import asdict
from typing import Any

from starlette.requests import Request
from starlette.routing import Route

from edgeq.names import check_name
from edgeq.store.opening import connect
from edgeq.sync.server.api.endpoints import Api
from edgeq.sync.server.api.http import ApiError
from edgeq.sync.server.series import check_range, journal_series

__all__ = ["routes"]


def routes(api: Api) -> list[Route]:
    def metrics(request: Request) -> dict[str, Any]:
        span = check_range(request.query_params.get("range"))
        queue, device = (_name(request, key) for key in ("queue", "device"))
        with closing(connect(api.qm.path, read_only=True)) as conn:
            if queue is not None and not (queue in api.qm.queue_names() or _journaled(conn, "queue", queue)):
                raise ApiError(404, f"no queue {queue!r}, in the store or its journal: GET /api/v1/queues "
                                    "lists them")
            if device is not None and not (api.qm.device(device) or _journaled(conn, "device", device)):
                raise ApiError(404, f"no device {device!r} is known here: GET /api/v1/devices lists them")
            found = journal_series(conn, api.clock(), span, queue=queue, device=device)
        return {"range": span, "queue": queue, "device": device, **asdict(found.buckets),
                "end_ms": found.buckets.end_ms, "series": found.counts}

    return [Route("/metrics", api.read(metrics), methods=["GET"])]


def _name(request: Request, key: str) -> str | None:
    """``?queue=`` or ``?device=``: a name (400 if it cannot be one), or None."""
    text = request.query_params.get(key)
    return None if text is None else check_name(text, f"{key} name")


def _journaled(conn: sqlite3.Connection, column: str, name: str) -> bool:
    """Whether the journal holds a row of ``name`` (a queue deleted since, a device forgotten)."""
    return conn.execute(f"SELECT 1 FROM journal WHERE {column} = ? LIMIT 1", (name,)).fetchone() is not None

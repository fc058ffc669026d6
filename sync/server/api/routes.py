"""``/api/v1``: the management API's routes over a queue manager, mounted beside the console in its
process (``edgeq serve --console``; docs/management-api.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route

from edgeq.manager import QueueManager
from edgeq.sync.server.admin.client import OperatorKey
from edgeq.sync.server.api import (
    admin,
    audit,
    bridges,
    devices,
    held,
    messages,
    metrics,
    queues,
    records,
    registry,
)
from edgeq.sync.server.api.endpoints import Api
from edgeq.sync.server.api.http import ApiError, cursor, limit

__all__ = ["api_routes"]

_ALL = ["GET", "POST", "PUT", "PATCH", "DELETE"]


def api_routes(qm: QueueManager, *, clock: Callable[[], int], signer: OperatorKey | None = None
               ) -> list[BaseRoute]:
    """The routes of ``/api/v1`` over ``qm``; ``clock`` is the server's (epoch ms); ``signer`` the operator
    key admin requests are signed with (``edgeq serve --admin-key``; None: none is sent)."""
    api = Api(qm, clock, signer)

    def actions(request: Request) -> dict[str, Any]:
        size = limit(request)
        page = audit.recorded(qm.path, before=cursor(request, "before"), limit=size,
                              who=request.query_params.get("who"), action=request.query_params.get("action"))
        return {"actions": page, "next": page[-1]["id"] if len(page) == size else None}

    async def not_found(request: Request) -> Response:
        return ApiError(404, f"no endpoint {request.method} {request.url.path}: see docs/management-api.md"
                        ).response()

    return [Mount("/api/v1", routes=[
        *devices.routes(api), *registry.routes(api), *queues.routes(api), *messages.routes(api),
        *records.routes(api), *admin.routes(api), *bridges.routes(api), *metrics.routes(api),
        *held.routes(api),
        Route("/actions", api.read(actions), methods=["GET"]),
        Route("/{rest:path}", not_found, methods=_ALL),
    ]), *(Route(path, not_found, methods=_ALL) for path in ("/api", "/api/{rest:path}"))]

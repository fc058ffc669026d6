"""``/api/v1/bridges``: the store's bridges as operators see them (``edgeq bridge status``, the console's
Bridges table): kind, queue, topics, running, connected, last forward, counts, backlog, the last error."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.routing import Route

from edgeq.names import check_name
from edgeq.sync.bridges.views import BridgeView, bridge_views
from edgeq.sync.server.api.endpoints import Api
from edgeq.sync.server.api.http import ApiError

__all__ = ["routes"]


def routes(api: Api) -> list[Route]:
    def views() -> list[BridgeView]:
        return bridge_views(api.qm.path, {q.name: q.depth for q in api.qm.store_usage().queues})

    def listed(request: Request) -> dict[str, Any]:
        return {"bridges": [v.as_dict() for v in views()]}

    def shown(request: Request) -> dict[str, Any]:
        name = check_name(request.path_params["name"], "bridge name")
        for view in views():
            if view.name == name:
                return view.as_dict()
        raise ApiError(404, f"no bridge {name!r} is defined: GET /api/v1/bridges lists them "
                            "(edgeq bridge define adds one)")

    return [Route("/bridges", api.read(listed), methods=["GET"]),
            Route("/bridges/{name}", api.read(shown), methods=["GET"])]

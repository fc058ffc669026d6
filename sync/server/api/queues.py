"""``/api/v1/queues``: the queues, their attributes, usage and rule bindings; purging one."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.routing import Route

from edgeq.sync.server.api.endpoints import Api
from edgeq.sync.server.api.http import queue_name

__all__ = ["routes"]


def routes(api: Api) -> list[Route]:
    qm = api.qm

    def queue_json(name: str) -> dict[str, Any]:
        usage = qm.queue_usage(name)
        bindings = [{"name": b.name, "config": b.config, "persisted": b.persisted, "error": b.error}
                    for b in qm.queue_bindings(name)]
        return {**qm.queue_attributes(name).as_dict(), "depth": usage.depth, "bytes": usage.bytes,
                "bindings": bindings}

    def listed(request: Request) -> dict[str, Any]:
        return {"queues": [queue_json(name) for name in qm.queue_names()]}

    def shown(request: Request) -> dict[str, Any]:
        return queue_json(queue_name(request.path_params["name"]))

    def target(request: Request) -> str:
        return str(request.path_params["name"])

    return [
        Route("/queues", api.read(listed), methods=["GET"]),
        Route("/queues/{name}", api.read(shown), methods=["GET"]),
        Route("/queues/{name}/purge", api.act("purge-queue", target), methods=["POST"]),
    ]

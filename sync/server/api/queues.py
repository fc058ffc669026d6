"""``/api/v1/queues``: the queues, their attributes, usage and rule bindings (one queue: its counters too);
purging one."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import closing
from dataclasses import asdict
from typing import Any

from starlette.requests import Request
from starlette.routing import Route

from edgeq.store.opening import connect
from edgeq.sync.server.api.endpoints import Api
from edgeq.sync.server.api.http import queue_name
from edgeq.sync.server.backlog import QueueBacklog, queue_backlogs

__all__ = ["routes"]


def routes(api: Api) -> list[Route]:
    qm = api.qm

    def queue_json(name: str, backlogs: Mapping[str, QueueBacklog]) -> dict[str, Any]:
        usage = qm.queue_usage(name)
        bindings = [{"name": b.name, "config": b.config, "persisted": b.persisted, "error": b.error}
                    for b in qm.queue_bindings(name)]
        found = backlogs.get(name)
        backlog = None if found is None else {k: v for k, v in asdict(found).items() if k != "name"}
        return {**qm.queue_attributes(name).as_dict(), "depth": usage.depth, "bytes": usage.bytes,
                "bindings": bindings, "backlog": backlog}

    def backlogs(name: str | None = None) -> dict[str, QueueBacklog]:
        """The queues' backlog figures (docs/console.md, "Backlog"), read in one go."""
        with closing(connect(qm.path, read_only=True)) as conn:
            return {b.name: b for b in queue_backlogs(conn, api.clock(), name)}

    def listed(request: Request) -> dict[str, Any]:
        found = backlogs()
        return {"queues": [queue_json(name, found) for name in qm.queue_names()]}

    def shown(request: Request) -> dict[str, Any]:
        name = queue_name(request.path_params["name"])
        return {**queue_json(name, backlogs(name)), "counters": qm.queue_stats(name)}

    def target(request: Request) -> str:
        return str(request.path_params["name"])

    return [
        Route("/queues", api.read(listed), methods=["GET"]),
        Route("/queues/{name}", api.read(shown), methods=["GET"]),
        Route("/queues/{name}/purge", api.act("purge-queue", target), methods=["POST"]),
    ]

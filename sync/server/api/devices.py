"""``/api/v1/devices``: the devices this server knows; revoking one."""

from __future__ import annotations

from contextlib import closing
from typing import Any

from starlette.requests import Request
from starlette.routing import Route

from edgeq.store.devices import DeviceRecord
from edgeq.store.opening import connect
from edgeq.sync.server.api.browse import device_json
from edgeq.sync.server.api.endpoints import Api
from edgeq.sync.server.api.http import ApiError
from edgeq.sync.server.backlog import reported_backlogs

__all__ = ["device_json", "routes"]


def routes(api: Api) -> list[Route]:
    qm = api.qm

    def one(name: str) -> DeviceRecord:
        found = qm.device(name)
        if found is None:
            raise ApiError(404, f"no device {name[:60]!r}: GET /api/v1/devices lists them")
        return found

    def reported() -> dict[str, tuple[int, int]]:
        """The backlogs the devices last reported (docs/console.md, "Backlog")."""
        with closing(connect(qm.path, read_only=True)) as conn:
            return reported_backlogs(conn)

    def shown_json(d: DeviceRecord) -> dict[str, Any]:
        return device_json(d, reported().get(d.name))

    def listed(request: Request) -> dict[str, Any]:
        backlogs = reported()
        return {"devices": [device_json(d, backlogs.get(d.name)) for d in qm.devices()]}

    def shown(request: Request) -> dict[str, Any]:
        return shown_json(one(request.path_params["name"]))

    def name(request: Request) -> str:
        return str(request.path_params["name"])

    return [
        Route("/devices", api.read(listed), methods=["GET"]),
        Route("/devices/{name}", api.read(shown), methods=["GET"]),
        Route("/devices/{name}/revoke", api.act("revoke-device", name), methods=["POST"]),
    ]

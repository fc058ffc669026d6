"""``/api/v1/held``: the puts devices left unconfirmed, by device and queue; undoing them now, as the
server's hold would (the exchange's held_puts and undo_held_puts, as `edgeq server held` does)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from starlette.requests import Request
from starlette.routing import Route

from edgeq.manager import QueueManager
from edgeq.sync.server.api.audit import audited
from edgeq.sync.server.api.auth import Principal
from edgeq.sync.server.api.endpoints import Api, Done
from edgeq.sync.server.api.http import ApiError

__all__ = ["routes"]


def _age(value: object) -> int | None:
    """``older_than_ms`` as given: None, or a whole number of milliseconds, 0 or more (a 400 otherwise)."""
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 15:
        value = int(value)
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**53):
        return value
    raise ApiError(400, f"older_than_ms must be a whole number of milliseconds, 0 or more, not {value!r:.40}")


def _device(value: object) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise ApiError(400, f"device must be a device's name (a string) or null, not {type(value).__name__}")


def clear_held(qm: QueueManager, who: Principal, arguments: Mapping[str, Any]) -> Done:
    """Undo the held puts (of ``device``; held ``older_than_ms`` or longer): an operator's, recorded."""
    device, age = arguments.get("device"), arguments.get("older_than_ms")

    def do() -> dict[str, Any]:
        wanted, held_ms = _device(device), _age(age) or 0
        return {"undone": qm.exchange.undo_held_puts(wanted, older_than_ms=held_ms), "device": wanted,
                "older_than_ms": held_ms}

    target = f"{device if isinstance(device, str) else '*'} older than {age or 0} ms"
    return audited(qm.path, who, "clear-held", target[:120], do, clock=qm.now_ms)


def routes(api: Api) -> list[Route]:
    qm = api.qm

    def held(request: Request) -> dict[str, Any]:
        wanted = request.query_params
        groups = qm.exchange.held_puts(wanted.get("device"), older_than_ms=_age(wanted.get("older_than_ms")))
        return {"held": [asdict(g) for g in groups], "now_ms": qm.now_ms()}

    return [
        Route("/held", api.read(held), methods=["GET"]),
        Route("/held/clear", api.act_on(clear_held), methods=["POST"]),
    ]

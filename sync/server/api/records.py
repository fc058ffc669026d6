"""``/api/v1/admin-requests``, ``/api/v1/refusals`` and ``/api/v1/rule-events``: the admin requests sent
to devices (with their replies), what this server refused of the devices' puts, and the rule
deliveries that failed (waiting for a retry, or parked): retrying or dropping a parked one."""

from __future__ import annotations

import re
from contextlib import closing
from dataclasses import asdict
from typing import Any

from starlette.requests import Request
from starlette.routing import Route

from edgeq.errors import InvalidArgument
from edgeq.names import check_name
from edgeq.store.opening import connect
from edgeq.store.rules import RuleTx
from edgeq.sync.server.admin.records import page, page_cursor, read_cursor
from edgeq.sync.server.api.admin import collect_replies
from edgeq.sync.server.api.endpoints import Api
from edgeq.sync.server.api.http import ApiError, limit

__all__ = ["routes"]

_REPLIED = {"pending": False, "replied": True}
_RULE_CURSOR = re.compile(r"(\d{1,18}):(.{1,200})", re.DOTALL)
_PARKED = {"true": True, "false": False}


def _device(request: Request) -> str | None:
    """The ``?device=`` filter, checked."""
    device = request.query_params.get("device")
    if device is not None:
        try:
            check_name(device, "device name")
        except InvalidArgument as exc:
            raise ApiError(400, str(exc)) from None
    return device


def routes(api: Api) -> list[Route]:
    qm = api.qm

    def admin_requests(request: Request) -> dict[str, Any]:
        status = request.query_params.get("status")
        if status is not None and status not in _REPLIED:
            raise ApiError(400, f"status must be pending or replied, not {status[:20]!r}")
        before = read_cursor(request.query_params.get("after"))
        size, now = limit(request), api.clock()
        collect_replies(qm)  # replies that came show as such
        with closing(connect(qm.path, read_only=True)) as conn:
            found = page(conn, device=_device(request), replied=None if status is None else _REPLIED[status],
                         before=before, limit=size)
        return {"admin_requests": [r.as_dict(now) for r in found], "next": page_cursor(found, size)}

    def refusals(request: Request) -> dict[str, Any]:
        return {"refusals": [asdict(r) for r in qm.exchange.device_refusals(_device(request))]}

    def rule_events(request: Request) -> dict[str, Any]:
        parked, text = request.query_params.get("parked"), request.query_params.get("after")
        if parked is not None and parked not in _PARKED:
            raise ApiError(400, f"parked must be true or false, not {parked[:20]!r}")
        match = None if not text else _RULE_CURSOR.fullmatch(text)
        if text and match is None:
            raise ApiError(400, f"after must be the 'next' of the page before, not {text[:40]!r}")
        size = limit(request)
        with closing(connect(qm.path, read_only=True)) as conn:
            found = RuleTx(conn).failures(parked=None if parked is None else _PARKED[parked], limit=size,
                                          after=None if match is None else (int(match[1]), match[2]))
        last = found[-1] if len(found) == size else None
        return {"rule_events": [asdict(f) for f in found],
                "next": None if last is None else f"{last.event_id}:{last.binding}"}

    def event(request: Request) -> str:
        return str(request.path_params["id"])

    return [
        Route("/rule-events", api.read(rule_events), methods=["GET"]),
        Route("/rule-events/{id}/retry", api.act("retry-rule-event", event), methods=["POST"]),
        Route("/rule-events/{id}/drop", api.act("drop-rule-event", event), methods=["POST"]),
        Route("/admin-requests", api.read(admin_requests), methods=["GET"]),
        Route("/refusals", api.read(refusals), methods=["GET"]),
    ]

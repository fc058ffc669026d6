"""``/api/v1/admin-requests``: sending a signed admin request to a device (with the server's operator
key, ``edgeq serve --admin-key``), showing one with its reply, re-sending one. The actions take
``(qm, who, arguments)`` and return :data:`.endpoints.Done`, like the others (the console calls them so
too); docs/management-api.md."""

from __future__ import annotations

import re
from collections.abc import Mapping
from contextlib import closing
from functools import partial
from typing import Any, Final

from starlette.requests import Request
from starlette.routing import Route

from edgeq.admin.wire import ACTIONS, ADMIN_REPLY_QUEUE
from edgeq.manager import QueueManager
from edgeq.store.opening import connect
from edgeq.store.tx import Tx
from edgeq.sync.server.admin.client import AdminClient, OperatorKey
from edgeq.sync.server.admin.records import AdminRecord
from edgeq.sync.server.api.audit import audited
from edgeq.sync.server.api.auth import Principal
from edgeq.sync.server.api.endpoints import Api, Done
from edgeq.sync.server.api.http import ApiError

__all__ = ["collect_replies", "resend_admin_request", "routes", "send_admin_request"]

_REQUEST_ID: Final = re.compile(r"(?:[0-9a-f]{2}){8,32}")
NO_KEY: Final = ("this server has no operator key to sign admin requests with: start it with edgeq serve "
                 "--console --admin-key FILE (or $EDGEQ_SERVE_ADMIN_KEY), a key from edgeq admin keygen that "
                 "the devices trust (edgeq keys trust-admin)")


def send_admin_request(qm: QueueManager, who: Principal, arguments: Mapping[str, Any], *,
                       signer: OperatorKey | None) -> Done:
    """Sign ``action`` (on ``target``, with ``params``) for ``device`` with ``signer`` and queue it for the
    device's next pull, as ``edgeq admin`` does; ``expires_in_ms``: not taken by then, it never runs."""
    def do() -> dict[str, Any]:
        device, action = _text(arguments, "device"), _text(arguments, "action")
        if action not in ACTIONS:
            raise ApiError(400, f"action {action[:40]!r} is not an admin action: one of {', '.join(ACTIONS)}")
        target, params = arguments.get("target"), arguments.get("params") or {}
        if target is not None and not isinstance(target, str):
            raise ApiError(400, "\"target\" must be a queue name, or null for the queue manager")
        if not isinstance(params, dict):
            raise ApiError(400, "\"params\" must be an object (the action's parameters, docs/admin.md)")
        lifetime = arguments.get("expires_in_ms")
        if lifetime is not None and (type(lifetime) is not int or lifetime < 1):
            raise ApiError(400, f"\"expires_in_ms\" must be a whole number of ms (at least 1), "
                                f"not {lifetime!r:.40}")
        if signer is None:
            raise ApiError(409, NO_KEY)
        _not_revoked(qm, device)
        with AdminClient(qm, operator_key=signer) as client:
            now = client.clock()
            handle = client.request(device, action, target, params,
                                    expires_ms=None if lifetime is None else now + lifetime)
            return _shown(client.records.get(handle.request_id), now)
    target = str(arguments.get("device"))[:100]
    return audited(qm.path, who, "send-admin-request", target, do, clock=qm.now_ms)


def resend_admin_request(qm: QueueManager, who: Principal, arguments: Mapping[str, Any]) -> Done:
    """Put request ``id``'s signed bytes on its device's admin queue again (same id: a device that ran it
    answers from its remembered reply, never running it twice); ``AdminClient.resend``'s refusals: 409."""
    def do() -> dict[str, Any]:
        request_id = _request_id(str(arguments.get("id")))
        with AdminClient(qm) as client:
            _found(client, request_id)
            client.resend(request_id)  # refuses (409) an expired request, a revoked device
            return {**_shown(_found(client, request_id), client.clock()), "resent": True}
    target = str(arguments.get("id"))[:100]
    return audited(qm.path, who, "resend-admin-request", target, do, clock=qm.now_ms)


def collect_replies(qm: QueueManager) -> None:
    """Record the replies waiting on ``SYSTEM.ADMIN.REPLY`` for their requests (as ``edgeq admin``
    does before it shows anything); with none waiting, nothing is written (not even a check point)."""
    with closing(connect(qm.path, read_only=True)) as conn:
        replies = Tx(conn).queue(ADMIN_REPLY_QUEUE)
    if replies is not None and replies.depth:
        with AdminClient(qm) as client:
            client.collect()


def routes(api: Api) -> list[Route]:
    def shown(request: Request) -> dict[str, Any]:
        request_id = _request_id(request.path_params["id"])
        collect_replies(api.qm)
        with AdminClient(api.qm) as client:
            return _shown(_found(client, request_id), api.clock())

    return [
        Route("/admin-requests", api.act_on(partial(send_admin_request, signer=api.signer)),
              methods=["POST"]),
        Route("/admin-requests/{id}", api.read(shown), methods=["GET"]),
        Route("/admin-requests/{id}/resend", api.act_on(resend_admin_request), methods=["POST"]),
    ]


def _shown(record: AdminRecord | None, now_ms: int) -> dict[str, Any]:
    if record is None:
        raise ApiError(409, "the request was not recorded: run edgeq check on the server's store")
    return record.as_dict(now_ms)


def _found(client: AdminClient, request_id: str) -> AdminRecord:
    found = client.records.get(request_id)
    if found is None:
        raise ApiError(404, f"no admin request {request_id} was sent from this server: GET "
                            "/api/v1/admin-requests lists them")
    return found


def _not_revoked(qm: QueueManager, device: str) -> None:
    record = qm.device(device)
    if record is not None and record.revoked_ms is not None:
        raise ApiError(409, f"device {device} is revoked (since {record.revoked_at}): it no longer syncs, "
                            "so it would never take the request; re-key it first (POST .../devices/NAME/key)")


def _request_id(text: str) -> str:
    if not _REQUEST_ID.fullmatch(text):
        raise ApiError(400, f"{text[:80]!r} is not an admin request id (16 to 64 lowercase hex digits)")
    return text


def _text(arguments: Mapping[str, Any], key: str) -> str:
    value = arguments.get(key)
    if not isinstance(value, str) or not value:
        raise ApiError(400, f"give \"{key}\" (text): see docs/management-api.md, POST /api/v1/admin-requests")
    return value

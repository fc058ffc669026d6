"""The API's endpoints: :class:`Api` wraps each: who asks (401), may they (403, recorded), and
errors as JSON."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from edgeq.errors import EdgeqError
from edgeq.manager import QueueManager
from edgeq.sync.server.admin.client import OperatorKey
from edgeq.sync.server.api.actions import perform
from edgeq.sync.server.api.auth import Principal, authenticate
from edgeq.sync.server.api.http import ApiError, answer, refusal

__all__ = ["Api", "BodyAction", "Done"]

_Endpoint = Callable[[Request], Awaitable[Response]]
#: an action done: its record's id (``api_actions``) and its answer
Done = tuple[int, dict[str, Any]]
#: an action whose arguments are a JSON body: (the queue manager, who asks, the arguments) -> :data:`Done`
BodyAction = Callable[[QueueManager, Principal, Mapping[str, Any]], Done]


@dataclass(frozen=True)
class Api:
    """The queue manager the API serves, its clock (epoch ms), and the operator key it signs admin requests
    with (None: it sends none)."""

    qm: QueueManager
    clock: Callable[[], int]
    signer: OperatorKey | None = None

    def read(self, fn: Callable[[Request], Any]) -> _Endpoint:
        """A GET endpoint: any role; ``fn`` (run in a thread) returns the JSON body."""
        async def endpoint(request: Request) -> Response:
            try:
                await authenticate(request, self.qm.path, self.clock)
                return answer(await run_in_threadpool(fn, request))
            except EdgeqError as exc:
                return refusal(exc).response()
        return endpoint

    def act(self, action: str, target: Callable[[Request], str]) -> _Endpoint:
        """A POST endpoint doing ``action`` (:data:`.actions.ACTIONS`) on ``target``: the operator's role;
        recorded, however it ends (:func:`.actions.perform`, which the console's forms call too)."""
        async def endpoint(request: Request) -> Response:
            try:
                who = await authenticate(request, self.qm.path, self.clock)
                what = target(request)
                _, body = await run_in_threadpool(lambda: perform(self.qm, action, what, who=who,
                                                                  clock=self.clock))
            except EdgeqError as exc:
                return refusal(exc).response()
            return answer(body)
        return endpoint

    def act_on(self, fn: BodyAction) -> _Endpoint:
        """A POST (or PUT) endpoint calling ``fn(qm, who, arguments)``: the arguments are the JSON body's
        (an object; none: ``{}``) and the path's; ``fn`` checks the role and records (``audit.audited``)."""
        async def endpoint(request: Request) -> Response:
            try:
                who = await authenticate(request, self.qm.path, self.clock)
                try:
                    body = _json_object(await request.body())
                except ApiError:
                    if who.role == "operator":
                        raise
                    body = {}  # a viewer is refused (403, recorded) whatever the body
                _, done = await run_in_threadpool(fn, self.qm, who, {**body, **request.path_params})
                return answer(done)
            except EdgeqError as exc:
                return refusal(exc).response()
        return endpoint


def _json_object(body: bytes) -> dict[str, Any]:
    """A request's JSON body: an object (an empty body: ``{}``); a 400 :class:`ApiError` otherwise."""
    if not body.strip():
        return {}
    try:
        value = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"the body is not JSON ({exc}): send a JSON object, see docs/management-api.md"
                       ) from None
    if not isinstance(value, dict):
        raise ApiError(400, f"the body must be a JSON object, not {type(value).__name__}")
    return value


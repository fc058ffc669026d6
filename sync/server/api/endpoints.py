"""The API's endpoints: :class:`Api` wraps each: who asks (401), may they (403, recorded), and
errors as JSON."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from edgeq.errors import EdgeqError, InvalidArgument, InvalidType
from edgeq.manager import QueueManager
from edgeq.sync.server.api import audit
from edgeq.sync.server.api.auth import Principal, authenticate
from edgeq.sync.server.api.http import ApiError, answer

__all__ = ["Api"]

_Endpoint = Callable[[Request], Awaitable[Response]]


@dataclass(frozen=True)
class Api:
    """The queue manager the API serves, and its clock (epoch ms)."""

    qm: QueueManager
    clock: Callable[[], int]

    def read(self, fn: Callable[[Request], Any]) -> _Endpoint:
        """A GET endpoint: any role; ``fn`` (run in a thread) returns the JSON body."""
        async def endpoint(request: Request) -> Response:
            try:
                await authenticate(request, self.qm.path, self.clock)
                return answer(await run_in_threadpool(fn, request))
            except EdgeqError as exc:
                return _refusal(exc).response()
        return endpoint

    def act(self, action: str, target: Callable[[Request], str],
            fn: Callable[[Request], Any]) -> _Endpoint:
        """A POST endpoint doing ``action`` on ``target``: the operator's role; recorded, however it ends."""
        async def endpoint(request: Request) -> Response:
            try:
                who = await authenticate(request, self.qm.path, self.clock)
                what = target(request)
            except EdgeqError as exc:
                return _refusal(exc).response()
            try:
                if who.role != "operator":
                    raise ApiError(403, f"{action} needs the operator role; {who.who} is a {who.role}")
                body = await run_in_threadpool(fn, request)
            except EdgeqError as exc:
                error = _refusal(exc)
                outcome = "refused" if error.status == 403 else "failed"
                await self._record(who, action, what, outcome, str(exc))
                return error.response()
            await self._record(who, action, what, "done", json.dumps(body)[:500])
            return answer(body)
        return endpoint

    async def _record(self, who: Principal, action: str, target: str, outcome: str, detail: str) -> None:
        await run_in_threadpool(lambda: audit.record(
            self.qm.path, at_ms=self.clock(), who=who.who, role=who.role, action=action, target=target,
            outcome=outcome, detail=detail))


def _refusal(exc: EdgeqError) -> ApiError:
    """``exc`` as the API answers it: its own status, 404 for what is not there, 400 for a bad argument,
    409 for anything else refused."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, LookupError):
        return ApiError(404, str(exc))
    return ApiError(400 if isinstance(exc, (InvalidArgument, InvalidType)) else 409, str(exc))

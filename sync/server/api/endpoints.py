"""The API's endpoints: :class:`Api` wraps each: who asks (401), may they (403, recorded), and
errors as JSON."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from edgeq.errors import EdgeqError
from edgeq.manager import QueueManager
from edgeq.sync.server.api.actions import perform
from edgeq.sync.server.api.auth import authenticate
from edgeq.sync.server.api.http import answer, refusal

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
                return refusal(exc).response()
        return endpoint

    def act(self, action: str, target: Callable[[Request], str]) -> _Endpoint:
        """A POST endpoint doing ``action`` (:data:`.actions.ACTIONS`) on ``target``: the operator's role;
        recorded, however it ends (:func:`.actions.perform`, which the console's forms call too)."""
        async def endpoint(request: Request) -> Response:
            try:
                who = await authenticate(request, self.qm.path, self.clock)
                what = target(request)
                _, body = await run_in_threadpool(lambda: perform(
                    self.qm, action, what, who=who.who, role=who.role, at_ms=self.clock()))
            except EdgeqError as exc:
                return refusal(exc).response()
            return answer(body)
        return endpoint

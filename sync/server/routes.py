"""The home server's routes: small handlers over :class:`~edgeq.sync.server.home.HomeService`;
every HTTP concern is middleware around them (:mod:`edgeq.sync.server.middleware`)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from edgeq.encoding.compression import Codec
from edgeq.sync import protocol as p
from edgeq.sync.bridges.views import bridge_views
from edgeq.sync.framing import H_ACCEPT, answer_codec, frame, negotiate
from edgeq.sync.server.auth import AuthGate
from edgeq.sync.server.backlog import read_backlog
from edgeq.sync.server.home import HomeService
from edgeq.sync.server.middleware import BodyDecoder, error_response, protocol_middleware

__all__ = ["HomeRoutes", "http_error", "protocol_route"]

#: A service endpoint: a decoded request body in, a response body out.
Handler = Callable[[Mapping[str, Any]], dict[str, Any]]


def protocol_route(path: str, handler: Handler, *, middleware: Sequence[Middleware] | None = None,
                   decoder: BodyDecoder | None = None) -> Route:
    """``POST path``: ``handler`` on the decoded body, in the thread pool (SQLite work blocks); the
    answer compressed with a codec the request accepts and the decoder takes."""
    bodies = decoder or BodyDecoder()

    def answer(message: dict[str, Any], codec: Codec | None) -> tuple[bytes, dict[str, str]]:
        return frame(codec, p.encode_body(handler(message)))

    async def serve(request: Request) -> Response:
        body = await bodies.read(request)
        codec = answer_codec(request.headers.get(H_ACCEPT), bodies.codecs)
        raw, headers = await run_in_threadpool(answer, body.message, codec)
        return Response(raw, media_type=p.CONTENT_TYPE, headers=headers)

    return Route(path, serve, methods=["POST"], middleware=middleware)


class HomeRoutes:
    """The protocol's endpoints under ``/v1``, ``/healthz`` and ``/metrics``; ``gate``: None, never
    authenticate."""

    def __init__(self, service: HomeService, *, gate: AuthGate | None = None,
                 decoder: BodyDecoder | None = None) -> None:
        self.service = service
        self.gate = gate
        self.decoder = decoder or BodyDecoder()
        #: every route, for :class:`~starlette.applications.Starlette`
        self.routes = self._build()

    def _build(self) -> list[BaseRoute]:
        s = self.service
        endpoints: dict[str, Handler] = {
            p.PATH_HELLO: self.hello,
            p.PATH_PUT: s.put,
            p.PATH_CONFIRM: s.confirm,
            p.PATH_PULL: s.pull,
            p.PATH_PULL_CONFIRM: s.pull_confirm,
            p.PATH_EXPIRIES: s.expiries,
        }
        routes: list[BaseRoute] = [
            protocol_route(path, handler, decoder=self.decoder, middleware=protocol_middleware(
                endpoint=path, metrics=s.metrics, max_body_bytes=s.limits.max_body_bytes,
                gate=self.gate, decoder=self.decoder))
            for path, handler in endpoints.items()
        ]
        routes += [Route("/healthz", self.healthz, methods=["GET"]),
                   Route("/metrics", self.metrics, methods=["GET"])]
        return routes

    def hello(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """The service's hello, with the codecs taken of those the agent offered (if it offered any)."""
        out = self.service.hello(body)
        if "compression" in body:
            out["compression"] = negotiate(body["compression"], self.decoder.codecs)
        return out

    async def healthz(self, request: Request) -> Response:
        """``GET /healthz``: JSON, or 503 if the store cannot be read; ``X-Edgeq-Worker``: the process."""
        qm, gate = self.service.qm, self.gate

        def check() -> tuple[int, bool]:
            return len(qm.queue_names()), gate is not None and gate.required()

        try:
            queues, required = await run_in_threadpool(check)
        except Exception as exc:
            return JSONResponse({"status": "error", "detail": str(exc)}, status_code=503)
        return JSONResponse({"status": "ok", "qmgr": qm.name, "queues": queues,
                             "protocol": p.PROTOCOL_VERSION, "auth": "required" if required else "open"},
                            headers={"X-Edgeq-Worker": str(os.getpid())})  # which process (serve --workers)

    async def metrics(self, request: Request) -> Response:
        qm = self.service.qm
        usage, refusals = await run_in_threadpool(lambda: (qm.store_usage(), qm.exchange.device_refusals()))
        bridges = await run_in_threadpool(bridge_views, qm.path, {q.name: q.depth for q in usage.queues})
        backlog = await run_in_threadpool(lambda: read_backlog(qm.path, now_ms=self.service.clock()))
        text = self.service.metrics.render(self.service.sessions, usage, refusals, bridges, backlog)
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4")


async def http_error(request: Request, exc: Exception) -> Response:
    """Answer an HTTP exception (404, 405, ...) as a protocol error body."""
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    code: p.ErrorCode = ("not-found" if status == 404 else
                         "method-not-allowed" if status == 405 else "internal")
    return error_response(code, f"{request.method} {request.url.path}: {code}")

"""The home server's routes: small handlers that decode a body, call the
:class:`~edgeq.sync.home.HomeService`, and encode its answer. Every HTTP concern
(size, media type, authentication, error bodies, counting) is middleware around
the protocol routes (:mod:`edgeq.sync.middleware`), so a handler is three lines.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from edgeq.sync import protocol as p
from edgeq.sync.auth import Authenticator
from edgeq.sync.home import HomeService
from edgeq.sync.middleware import error_response, protocol_middleware, read_cbor
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

__all__ = ["HomeRoutes", "http_error", "protocol_route"]

#: A service endpoint: a decoded request body in, a response body out.
Handler = Callable[[Mapping[str, Any]], dict[str, Any]]


def protocol_route(path: str, handler: Handler, *, middleware: Sequence[Middleware] | None = None) -> Route:
    """``POST path``: decode the CBOR body, run ``handler`` on it in the thread pool
    (SQLite work blocks), encode its answer."""

    async def serve(request: Request) -> Response:
        """Serve one request through ``handler``."""
        body = await read_cbor(request)
        out = await run_in_threadpool(handler, body.message)
        return Response(p.encode_body(out), media_type=p.CONTENT_TYPE)

    return Route(path, serve, methods=["POST"], middleware=middleware)


class HomeRoutes:
    """The home server's routes over ``service``: the protocol's endpoints under
    ``/v1`` (each wrapped in :func:`~edgeq.sync.middleware.protocol_middleware`),
    ``/healthz`` and ``/metrics``."""

    def __init__(self, service: HomeService, *, authenticate: Authenticator | None = None) -> None:
        self.service = service
        #: every route, for :class:`~starlette.applications.Starlette`
        self.routes = self._build(authenticate)

    def _build(self, authenticate: Authenticator | None) -> list[BaseRoute]:
        s = self.service
        endpoints: dict[str, Handler] = {
            p.PATH_HELLO: s.hello,
            p.PATH_PUT: s.put,
            p.PATH_CONFIRM: s.confirm,
            p.PATH_PULL: s.pull,
            p.PATH_PULL_CONFIRM: s.pull_confirm,
            p.PATH_EXPIRIES: s.expiries,
        }
        routes: list[BaseRoute] = [
            protocol_route(path, handler, middleware=protocol_middleware(
                endpoint=path, metrics=s.metrics, max_body_bytes=s.limits.max_body_bytes,
                authenticate=authenticate))
            for path, handler in endpoints.items()
        ]
        routes += [Route("/healthz", self.healthz, methods=["GET"]),
                   Route("/metrics", self.metrics, methods=["GET"])]
        return routes

    async def healthz(self, request: Request) -> Response:
        """``GET /healthz``: ok with the queue count as JSON, or 503 if the store cannot be read."""
        qm = self.service.qm
        try:
            queues = await run_in_threadpool(qm.queue_names)
        except Exception as exc:
            return JSONResponse({"status": "error", "detail": str(exc)}, status_code=503)
        return JSONResponse({"status": "ok", "qmgr": qm.name, "queues": len(queues),
                             "protocol": p.PROTOCOL_VERSION})

    async def metrics(self, request: Request) -> Response:
        """``GET /metrics``: the counters and per-device gauges in the Prometheus text format."""
        text = self.service.metrics.render(self.service.sessions)
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4")


async def http_error(request: Request, exc: Exception) -> Response:
    """Answer an HTTP exception (404, 405, ...) as a protocol error body."""
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    code: p.ErrorCode = "not-found" if status == 404 else "method-not-allowed" if status == 405 else "internal"
    return error_response(code, f"{request.method} {request.url.path}: {code}")

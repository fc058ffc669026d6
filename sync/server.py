"""The home server: a Starlette ASGI app over a :class:`~edgeq.QueueManager`.

>>> import tempfile, os
>>> from edgeq import QueueManager
>>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "home.db"), name="HOME")
>>> app = create_app(qm)
>>> sorted(r.path for r in app.routes)  # doctest: +NORMALIZE_WHITESPACE
['/healthz', '/metrics', '/v1/confirm', '/v1/expiries', '/v1/hello', '/v1/pull', '/v1/pull/confirm', '/v1/put']
>>> qm.close()

Run it with ``edgeq serve --db home.db --name HOME`` (uvicorn), or mount
``create_app(qm)`` in any ASGI server. Every endpoint under ``/v1`` takes and
returns ``application/cbor`` (see ``docs/protocol.md``); the request body is
size-checked before it is decoded, decoded and validated before anything is
stored, and each stage is one transaction, so a bad or failed request stores
nothing. SQLite work runs in Starlette's thread pool.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from edgeq.sync import protocol as p
from edgeq.sync.auth import Authenticator, AuthRequest, Forbidden
from edgeq.sync.home import DEFAULT_MAX_BATCH, DEFAULT_MAX_BODY_BYTES, HomeService, ServerLimits
from edgeq.sync.metrics import Metrics
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from edgeq.errors import StoreBusy
from edgeq.manager import QueueManager
from edgeq.types import Clock

__all__ = ["AuthRequest", "Authenticator", "create_app"]

log = logging.getLogger("edgeq.sync.server")


def _error(code: p.ErrorCode, detail: str) -> Response:
    return Response(p.error_body(code, detail), status_code=p.HTTP_STATUS[code], media_type=p.CONTENT_TYPE)


def create_app(
    qm: QueueManager,
    *,
    clock: Clock | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_batch: int = DEFAULT_MAX_BATCH,
    authenticate: Authenticator | None = None,
    metrics: Metrics | None = None,
) -> Starlette:
    """The ASGI app serving ``qm`` as a home server.

    ``clock`` should be the queue manager's clock (tests inject a ManualClock
    into both). ``max_body_bytes`` bounds a request body (413 beyond it, before
    decoding); ``max_batch`` bounds messages or uids per request (422).
    """
    service = HomeService(
        qm, limits=ServerLimits(max_body_bytes, max_batch), clock=clock, metrics=metrics or Metrics()
    )

    async def read_body(request: Request) -> bytes:
        """The request body; ``too-large`` beyond ``max_body_bytes`` (declared or streamed)."""
        length = request.headers.get("content-length")
        if length is not None:
            if not length.isdigit():
                raise p.ProtocolError("malformed", f"bad Content-Length {length!r}")
            if int(length) > max_body_bytes:
                raise p.ProtocolError(
                    "too-large", f"body of {length} bytes exceeds this server's limit of {max_body_bytes}"
                )
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > max_body_bytes:
                raise p.ProtocolError(
                    "too-large", f"body exceeds this server's limit of {max_body_bytes} bytes"
                )
            chunks.append(chunk)
        return b"".join(chunks)

    def endpoint(path: str, handler: Callable[[Mapping[str, Any]], dict[str, Any]]) -> Route:
        """A POST route at ``path`` running ``handler`` on the decoded body, counted and logged."""
        async def serve(request: Request) -> Response:
            """Serve one request through ``handler``; count it, and log an error answer."""
            started = time.perf_counter()
            response = await _serve(request, handler)
            service.metrics.request(path, response.status_code)
            if response.status_code >= 400:
                log.warning(
                    "%s -> %d", path, response.status_code,
                    extra={"event": "request-error", "path": path, "status": response.status_code,
                           "client": request.client.host if request.client else None,
                           "ms": round((time.perf_counter() - started) * 1000, 2)},
                )
            return response

        return Route(path, serve, methods=["POST"])

    async def _authenticate(request: Request, raw: bytes, body: Mapping[str, Any]) -> None:
        device = body.get("qmgr")
        auth = AuthRequest(device if isinstance(device, str) else None, request.url.path, request.headers, raw,
                           body, request.method)
        assert authenticate is not None
        try:
            await run_in_threadpool(authenticate, auth)  # it may read the store (device keys, nonces)
        except p.ProtocolError:
            raise
        except Exception as exc:
            code: p.ErrorCode = "forbidden" if isinstance(exc, Forbidden) else "unauthorized"
            detail = str(exc) or "refused by the authenticator"
            log.warning("%s %s: %s", code, request.url.path, detail,
                        extra={"event": "auth-refused", "path": request.url.path, "code": code,
                               "device": request.headers.get("x-edgeq-device"), "detail": detail,
                               "client": request.client.host if request.client else None})
            raise p.ProtocolError(code, detail) from exc

    async def _serve(request: Request, handler: Callable[[Mapping[str, Any]], dict[str, Any]]) -> Response:
        try:
            media = request.headers.get("content-type", "").split(";")[0].strip().lower()
            if media != p.CONTENT_TYPE:
                raise p.ProtocolError(
                    "unsupported-media-type", f"send Content-Type: {p.CONTENT_TYPE}, not {media or 'nothing'}"
                )
            raw = await read_body(request)
            body = p.decode_body(raw)
            if authenticate is not None:
                await _authenticate(request, raw, body)
            out = await run_in_threadpool(handler, body)
            return Response(p.encode_body(out), media_type=p.CONTENT_TYPE)
        except p.ProtocolError as exc:
            return _error(exc.code, exc.detail)
        except StoreBusy as exc:
            return _error("busy", f"the server's store is busy, retry later ({exc})")
        except Exception as exc:  # never crash, never leave partial state (each stage is one transaction)
            log.exception("internal error on %s", request.url.path,
                          extra={"event": "internal-error", "path": request.url.path})
            return _error("internal", f"{type(exc).__name__}: nothing was stored; retry later")

    async def healthz(request: Request) -> Response:
        """``GET /healthz``: ok with the queue count as JSON, or 503 if the store cannot be read."""
        try:
            queues = await run_in_threadpool(qm.queue_names)
        except Exception as exc:
            return JSONResponse({"status": "error", "detail": str(exc)}, status_code=503)
        return JSONResponse({"status": "ok", "qmgr": qm.name, "queues": len(queues),
                             "protocol": p.PROTOCOL_VERSION})

    async def metrics_endpoint(request: Request) -> Response:
        """``GET /metrics``: the counters in the Prometheus text format."""
        return PlainTextResponse(service.metrics.render(), media_type="text/plain; version=0.0.4")

    async def http_error(request: Request, exc: Exception) -> Response:
        """Answer an HTTP exception (404, 405, ...) as a protocol error body."""
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        code: p.ErrorCode = "not-found" if status == 404 else "method-not-allowed" if status == 405 else "internal"
        return _error(code, f"{request.method} {request.url.path}: {code}")

    routes = [
        endpoint(p.PATH_HELLO, service.hello),
        endpoint(p.PATH_PUT, service.put),
        endpoint(p.PATH_CONFIRM, service.confirm),
        endpoint(p.PATH_PULL, service.pull),
        endpoint(p.PATH_PULL_CONFIRM, service.pull_confirm),
        endpoint(p.PATH_EXPIRIES, service.expiries),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/metrics", metrics_endpoint, methods=["GET"]),
    ]
    app = Starlette(routes=routes, exception_handlers={HTTPException: http_error})
    app.state.service = service
    return app

"""The home server's HTTP concerns, one pure-ASGI middleware each (streaming-safe: none
buffers a response), wrapped around every protocol route (``POST /v1/...``).

Outermost first, as :func:`protocol_middleware` lists them:

1. :class:`RequestLog` counts every answer in :class:`~edgeq.sync.metrics.Metrics`
   by endpoint and status, and logs an error answer (event ``request-error``);
2. :class:`ErrorBodies` answers whatever went wrong inside as the protocol's CBOR
   error body: a :class:`~edgeq.sync.protocol.ProtocolError` with its own code, a busy
   store ``busy`` (503), anything else ``internal`` (500; each stage is one
   transaction, so nothing was stored);
3. :class:`MediaType` refuses any ``Content-Type`` but ``application/cbor`` (415);
4. :class:`BodyLimit` refuses a body beyond the limit (413) from its
   ``Content-Length`` before reading it, and while it streams in (chunked), always
   before it is decoded;
5. :class:`Authentication` (only with an ``authenticate=``) decodes the body and asks
   the authenticator in the thread pool before any route runs (401, 403).

The inner ones raise :class:`~edgeq.sync.protocol.ProtocolError`; :class:`ErrorBodies`
is the one place that turns an exception into an answer. A route reads its body with
:func:`read_cbor`, which decodes it once per request (the authenticator's copy is reused).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from edgeq.sync import protocol as p
from edgeq.sync.auth import Authenticator, AuthRequest, Forbidden
from edgeq.sync.metrics import Metrics
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.requests import HTTPConnection, Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from edgeq.errors import StoreBusy

__all__ = [
    "BODY_SCOPE_KEY",
    "Authentication",
    "BodyLimit",
    "CborBody",
    "ErrorBodies",
    "MediaType",
    "RequestLog",
    "error_response",
    "protocol_middleware",
    "read_cbor",
]

# The server's log: these events are the server's, whichever module raises them.
log = logging.getLogger("edgeq.sync.server")

#: Where :func:`read_cbor` keeps a request's decoded body in the ASGI scope.
BODY_SCOPE_KEY = "edgeq.sync.body"


def error_response(code: p.ErrorCode, detail: str) -> Response:
    """The protocol's error answer: a CBOR ``error`` body with the code's HTTP status."""
    return Response(p.error_body(code, detail), status_code=p.HTTP_STATUS[code], media_type=p.CONTENT_TYPE)


def _client(scope: Scope) -> str | None:
    client = scope.get("client")
    return client[0] if client else None


@dataclass(frozen=True, slots=True)
class CborBody:
    """A request body as sent (``raw``, what a signature covers) and decoded (``message``)."""

    raw: bytes
    message: dict[str, Any]


async def read_cbor(request: Request) -> CborBody:
    """The request's body, read (within :class:`BodyLimit`) and decoded once per request;
    raises :class:`~edgeq.sync.protocol.ProtocolError` (``malformed``, ``too-large``, ...)."""
    cached = request.scope.get(BODY_SCOPE_KEY)
    if isinstance(cached, CborBody):
        return cached
    raw = await request.body()
    body = request.scope[BODY_SCOPE_KEY] = CborBody(raw, p.decode_body(raw))
    return body


class RequestLog:
    """Count every answer of ``endpoint`` by status; log the error answers."""

    def __init__(self, app: ASGIApp, *, metrics: Metrics, endpoint: str) -> None:
        self.app = app
        self.metrics = metrics
        self.endpoint = endpoint

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 0

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        # Only what was answered is counted: an error raised here (inside ErrorBodies, so
        # only once an answer had begun) or a cancelled request is the ASGI server's to log.
        await self.app(scope, receive, send_status)
        self.metrics.request(self.endpoint, status)
        if status >= 400:
            log.warning(
                "%s -> %d", self.endpoint, status,
                extra={"event": "request-error", "path": self.endpoint, "status": status,
                       "client": _client(scope), "ms": round((time.perf_counter() - started) * 1000, 2)},
            )


class ErrorBodies:
    """Answer an exception from inside as the protocol's CBOR error body (never crash)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def send_tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, send_tracked)
        except Exception as exc:
            if started:
                raise  # half an answer went out: nothing can be said any more
            await self._answer(exc, scope)(scope, receive, send)

    @staticmethod
    def _answer(exc: Exception, scope: Scope) -> Response:
        if isinstance(exc, p.ProtocolError):
            return error_response(exc.code, exc.detail)
        if isinstance(exc, StoreBusy):
            return error_response("busy", f"the server's store is busy, retry later ({exc})")
        path = HTTPConnection(scope).url.path
        log.error("internal error on %s", path, exc_info=exc, extra={"event": "internal-error", "path": path})
        return error_response("internal", f"{type(exc).__name__}: nothing was stored; retry later")


class MediaType:
    """Refuse a request whose ``Content-Type`` is not ``media_type`` (415)."""

    def __init__(self, app: ASGIApp, *, media_type: str = p.CONTENT_TYPE) -> None:
        self.app = app
        self.media_type = media_type

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            media = Headers(scope=scope).get("content-type", "").split(";")[0].strip().lower()
            if media != self.media_type:
                raise p.ProtocolError(
                    "unsupported-media-type", f"send Content-Type: {self.media_type}, not {media or 'nothing'}"
                )
        await self.app(scope, receive, send)


class BodyLimit:
    """Refuse a body beyond ``max_bytes`` (413 ``too-large``): at once from a declared
    ``Content-Length``, and while it streams in: the chunk that passes the limit is the
    last one read."""

    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = Headers(scope=scope).get("content-length")
        if length is not None:
            if not length.isdigit():
                raise p.ProtocolError("malformed", f"bad Content-Length {length!r}")
            if int(length) > self.max_bytes:
                raise p.ProtocolError(
                    "too-large", f"body of {length} bytes exceeds this server's limit of {self.max_bytes}"
                )
        size = 0

        async def receive_limited() -> Message:
            nonlocal size
            message = await receive()
            if message["type"] == "http.request":
                size += len(message.get("body", b""))
                if size > self.max_bytes:
                    raise p.ProtocolError(
                        "too-large", f"body exceeds this server's limit of {self.max_bytes} bytes"
                    )
            return message

        await self.app(scope, receive_limited, send)


class Authentication:
    """Ask ``authenticate`` about each request before its route runs: it sees the
    claimed device (the body's ``qmgr``), method, path, headers, raw and decoded body
    (:class:`~edgeq.sync.auth.AuthRequest`), in the thread pool (it may read the
    store: device keys, nonces). It refuses by raising: :class:`~edgeq.sync.auth.Forbidden`
    is 403 ``forbidden``, a :class:`~edgeq.sync.protocol.ProtocolError` keeps its code,
    anything else is 401 ``unauthorized``."""

    def __init__(self, app: ASGIApp, *, authenticate: Authenticator) -> None:
        self.app = app
        self.authenticate = authenticate

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        body = await read_cbor(request)
        device = body.message.get("qmgr")
        auth = AuthRequest(device if isinstance(device, str) else None, request.url.path, request.headers,
                           body.raw, body.message, request.method)
        try:
            await run_in_threadpool(self.authenticate, auth)
        except p.ProtocolError:
            raise
        except Exception as exc:
            code: p.ErrorCode = "forbidden" if isinstance(exc, Forbidden) else "unauthorized"
            detail = str(exc) or "refused by the authenticator"
            log.warning("%s %s: %s", code, request.url.path, detail,
                        extra={"event": "auth-refused", "path": request.url.path, "code": code,
                               "device": request.headers.get("x-edgeq-device"), "detail": detail,
                               "client": _client(scope)})
            raise p.ProtocolError(code, detail) from exc
        await self.app(scope, _replay(body.raw, receive), send)


def _replay(raw: bytes, receive: Receive) -> Callable[[], Awaitable[Message]]:
    """A ``receive`` that gives the body already read once more, then defers to ``receive``
    (for the disconnect), so an inner app may read the body again."""
    pending = True

    async def replay() -> Message:
        nonlocal pending
        if pending:
            pending = False
            return {"type": "http.request", "body": raw, "more_body": False}
        return await receive()

    return replay


def protocol_middleware(
    *, endpoint: str, metrics: Metrics, max_body_bytes: int, authenticate: Authenticator | None
) -> list[Middleware]:
    """The middleware of one protocol route at ``endpoint``, outermost first."""
    stack = [
        Middleware(RequestLog, metrics=metrics, endpoint=endpoint),
        Middleware(ErrorBodies),
        Middleware(MediaType),
        Middleware(BodyLimit, max_bytes=max_body_bytes),
    ]
    if authenticate is not None:
        stack.append(Middleware(Authentication, authenticate=authenticate))
    return stack

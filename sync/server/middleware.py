"""The home server's HTTP concerns, one pure-ASGI middleware each (none buffers a response),
around every protocol route. Their order: docs/protocol.md, "The middleware"."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, TypeVar

import anyio.to_thread
from anyio import CapacityLimiter
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.middleware.exceptions import ExceptionMiddleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import ASGIApp, ExceptionHandler, Message, Receive, Scope, Send

from edgeq.encoding.cbor import DecodeLimits
from edgeq.encoding.compression import Codec, available
from edgeq.errors import StoreBusy
from edgeq.sync import protocol as p
from edgeq.sync.framing import H_ENCODING, unframe
from edgeq.sync.server.auth import AuthGate, AuthRequest, Forbidden
from edgeq.sync.server.home import DEFAULT_MAX_BATCH, DEFAULT_MAX_BODY_BYTES
from edgeq.sync.server.metrics import Metrics
from edgeq.sync.signing import H_DEVICE

__all__ = [
    "DECODE_THREADS",
    "ERROR_HANDLERS",
    "LIMIT_SCOPE_KEY",
    "Authentication",
    "BodyDecoder",
    "BodyLimit",
    "CborBody",
    "ErrorBodies",
    "MediaType",
    "RequestLog",
    "error_response",
    "protocol_middleware",
]

# The server's log: these events are the server's, whichever module raises them.
log = logging.getLogger("edgeq.sync.server")

#: Where :class:`BodyLimit` says how large a request's body may be, decompressed too.
LIMIT_SCOPE_KEY = "edgeq.sync.max_body"
#: Bodies decoded at once: decoding holds the GIL, so more threads would only hold more in memory.
DECODE_THREADS = 4

_T = TypeVar("_T")


def error_response(code: p.ErrorCode, detail: str) -> Response:
    """The protocol's error answer: a CBOR ``error`` body with the code's HTTP status."""
    return Response(p.error_body(code, detail), status_code=p.HTTP_STATUS[code],
                    media_type=p.CONTENT_TYPE)


def _client(scope: Scope) -> str | None:
    client = scope.get("client")
    return client[0] if client else None


@dataclass(frozen=True, slots=True)
class CborBody:
    """A request body as sent (``raw``, what a signature covers) and decoded (``message``)."""

    raw: bytes
    message: dict[str, Any]


class BodyDecoder:
    """Decode request bodies off the event loop, at most ``threads`` at a time, each within ``limits``;
    ``codecs``: those a compressed body may come in (default: all available)."""

    def __init__(self, limits: DecodeLimits | None = None, *, threads: int = DECODE_THREADS,
                 codecs: Sequence[Codec] | None = None) -> None:
        self.limits = p.body_limits(DEFAULT_MAX_BATCH) if limits is None else limits
        self.codecs: tuple[Codec, ...] = available() if codecs is None else tuple(codecs)
        self._threads = CapacityLimiter(threads)

    async def decode(self, raw: bytes, encoding: str | None = None,
                     max_bytes: int = DEFAULT_MAX_BODY_BYTES) -> dict[str, Any]:
        """``raw`` decompressed (to at most ``max_bytes``), decoded and checked, in a worker thread."""
        return await anyio.to_thread.run_sync(self._decode, raw, encoding, max_bytes,
                                              limiter=self._threads)

    def _decode(self, raw: bytes, encoding: str | None, max_bytes: int) -> dict[str, Any]:
        return p.decode_body(unframe(encoding, raw, max_bytes=max_bytes, supported=self.codecs),
                             self.limits)

    async def read(self, request: Request) -> CborBody:
        """The body :class:`Authentication` checked, else read and decoded; raises ProtocolError."""
        verified = getattr(request.state, "cbor_body", None)  # Authentication's, if it ran
        if isinstance(verified, CborBody):
            return verified
        raw = await request.body()
        limit = request.scope.get(LIMIT_SCOPE_KEY, DEFAULT_MAX_BODY_BYTES)
        return CborBody(raw, await self.decode(raw, request.headers.get(H_ENCODING), limit))


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

        # Only what was answered is counted (and a client that hung up first): an error
        # raised here (inside ErrorBodies, so only once an answer had begun) or a
        # cancelled request is the ASGI server's to log.
        try:
            await self.app(scope, receive, send_status)
        except ClientDisconnect:
            # Nobody is left to answer: the client's doing (a dropped link, a timeout), not ours.
            self.metrics.request(self.endpoint, "disconnected")
            log.info("%s: the client hung up before it was answered", self.endpoint,
                     extra={"event": "client-disconnect", "path": self.endpoint,
                            "client": _client(scope),
                            "ms": round((time.perf_counter() - started) * 1000, 2)})
            return
        self.metrics.request(self.endpoint, status)
        if status >= 400:
            log.warning(
                "%s -> %d", self.endpoint, status,
                extra={"event": "request-error", "path": self.endpoint, "status": status,
                       "client": _client(scope), "ms": round((time.perf_counter() - started) * 1000, 2)},
            )


async def _protocol_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, p.ProtocolError)  # registered for ProtocolError only
    return error_response(exc.code, exc.detail)


async def _busy(request: Request, exc: Exception) -> Response:
    return error_response("busy", f"the server's store is busy, retry later ({exc})")


async def _hung_up(request: Request, exc: Exception) -> Response:
    raise exc  # no one to answer: RequestLog counts it


async def _internal(request: Request, exc: Exception) -> Response:
    path = request.url.path
    log.error("internal error on %s", path, exc_info=exc,
              extra={"event": "internal-error", "path": path})
    return error_response("internal", f"{type(exc).__name__}: nothing was stored; retry later")


#: What went wrong inside a protocol route, as the protocol's CBOR error body (Starlette
#: answers with the handler of the nearest class in the exception's MRO).
ERROR_HANDLERS: Mapping[Any, ExceptionHandler] = MappingProxyType({
    p.ProtocolError: _protocol_error, StoreBusy: _busy, ClientDisconnect: _hung_up, Exception: _internal,
})


class ErrorBodies(ExceptionMiddleware):
    """Starlette's exception middleware with :data:`ERROR_HANDLERS`, inside each route's stack so
    :class:`RequestLog` counts its answers."""

    def __init__(self, app: ASGIApp) -> None:
        super().__init__(app, handlers=ERROR_HANDLERS)


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
                    "unsupported-media-type",
                    f"send Content-Type: {self.media_type}, not {media or 'nothing'}",
                )
        await self.app(scope, receive, send)


class BodyLimit:
    """Refuse a body beyond ``max_bytes`` (413): from ``Content-Length``, and while it streams in.
    The same limit (in the scope) bounds what a compressed body decompresses to."""

    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        scope[LIMIT_SCOPE_KEY] = self.max_bytes
        length = Headers(scope=scope).get("content-length")
        if length is not None:
            # int() of 4,301 digits raises
            if not (length.isascii() and length.isdigit()) or len(length) > 19:
                raise p.ProtocolError("malformed", f"bad Content-Length {length[:20]!r}")
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
    """Authenticate each request before its route runs, as ``gate`` says, in the thread pool: headers,
    then raw body, then the decoded one. Forbidden is 403, a ProtocolError keeps its code, else 401."""

    def __init__(self, app: ASGIApp, *, gate: AuthGate, decoder: BodyDecoder) -> None:
        self.app = app
        self.gate = gate
        self.decoder = decoder

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        path, headers = request.url.path, request.headers
        heads = AuthRequest(None, path, headers, b"", None, request.method)
        await self._ask(self.gate.check_headers, heads, scope, inline=self.gate.settled)
        raw = await request.body()
        then = await self._ask(self.gate.admit,
                               AuthRequest(None, path, headers, raw, None, request.method), scope)
        body = await self.decoder.read(request)
        if then is not None:
            device = body.message.get("qmgr")
            await self._ask(then, AuthRequest(device if isinstance(device, str) else None, path, headers,
                                              raw, body.message, request.method), scope)
        request.state.cbor_body = body  # the route's, verified: it reads no body of its own
        await self.app(scope, receive, send)

    @staticmethod
    async def _ask(stage: Callable[[AuthRequest], _T], auth: AuthRequest, scope: Scope, *,
                   inline: bool = False) -> _T:
        """Run one stage in the thread pool (``inline``: here); its refusal as a ProtocolError (logged)."""
        try:
            return stage(auth) if inline else await run_in_threadpool(stage, auth)
        except p.ProtocolError:
            raise
        except Exception as exc:
            code: p.ErrorCode = "forbidden" if isinstance(exc, Forbidden) else "unauthorized"
            detail = str(exc) or "refused by the authenticator"
            log.warning("%s %s: %s", code, auth.path, detail,
                        extra={"event": "auth-refused", "path": auth.path, "code": code,
                               "device": auth.headers.get(H_DEVICE), "detail": detail,
                               "client": _client(scope)})
            raise p.ProtocolError(code, detail) from exc


def protocol_middleware(
    *, endpoint: str, metrics: Metrics, max_body_bytes: int, gate: AuthGate | None, decoder: BodyDecoder
) -> list[Middleware]:
    """The middleware of one protocol route, outermost first."""
    stack = [
        Middleware(RequestLog, metrics=metrics, endpoint=endpoint),
        Middleware(ErrorBodies),
        Middleware(MediaType),
        Middleware(BodyLimit, max_bytes=max_body_bytes),
    ]
    if gate is not None and gate.mode != "off":
        stack.append(Middleware(Authentication, gate=gate, decoder=decoder))
    return stack

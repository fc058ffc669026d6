"""The home server's HTTP middleware, one concern at a time: each is driven as plain ASGI
(so a test sees exactly which request chunks were read) or through a one-route app."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

import cbor2
import httpx
import pytest
from edgeq.sync import protocol as p
from edgeq.sync.auth import AuthRequest, Forbidden
from edgeq.sync.metrics import Metrics
from edgeq.sync.middleware import (
    Authentication,
    BodyLimit,
    ErrorBodies,
    MediaType,
    protocol_middleware,
    read_cbor,
)
from edgeq.sync.routes import protocol_route
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from edgeq.errors import StoreBusy

CBOR = {"content-type": p.CONTENT_TYPE}
PATH = "/v1/hello"
HELLO = {"type": "hello", "qmgr": "DEV1", "now_ms": 1}


class Call:
    """One POST through a bare ASGI app: which request chunks it read, what it answered."""

    def __init__(self, app: ASGIApp, chunks: list[bytes], headers: Mapping[str, str]) -> None:
        self.read = 0
        self.sent: list[Message] = []
        scope: Scope = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
            "scheme": "http", "path": PATH, "raw_path": PATH.encode(), "root_path": "", "query_string": b"",
            "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
            "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 8470),
        }

        async def receive() -> Message:
            if self.read < len(chunks):
                self.read += 1
                return {"type": "http.request", "body": chunks[self.read - 1], "more_body": self.read < len(chunks)}
            return {"type": "http.disconnect"}

        async def send(message: Message) -> None:
            self.sent.append(message)

        asyncio.run(app(scope, receive, send))

    @property
    def status(self) -> int:
        return int(self.sent[0]["status"])

    @property
    def body(self) -> dict[str, Any]:
        return dict(cbor2.loads(b"".join(m.get("body", b"") for m in self.sent[1:])))


class Inner:
    """The app inside the middleware under test: reads and decodes the body, answers it."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await read_cbor(Request(scope, receive))
        self.bodies.append(body.message)
        await Response(p.encode_body({"type": "ok"}), media_type=p.CONTENT_TYPE)(scope, receive, send)


@pytest.fixture
def decoded(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Every body :func:`edgeq.sync.protocol.decode_body` is asked to decode."""
    seen: list[bytes] = []
    real = p.decode_body

    def spy(raw: bytes) -> dict[str, Any]:
        seen.append(raw)
        return real(raw)

    monkeypatch.setattr(p, "decode_body", spy)
    return seen


# -- body size ---------------------------------------------------------------------------------


def test_a_declared_oversized_body_is_refused_before_any_of_it_is_read(decoded: list[bytes]) -> None:
    inner = Inner()
    raw = p.encode_body({**HELLO, "pad": b"x" * 5000})
    call = Call(ErrorBodies(BodyLimit(inner, max_bytes=4096)), [raw], {**CBOR, "content-length": str(len(raw))})
    assert (call.status, call.body["code"]) == (413, "too-large")
    assert f"body of {len(raw)} bytes" in call.body["detail"]
    assert call.read == 0 and decoded == [] and inner.bodies == []


def test_a_streamed_body_is_refused_as_soon_as_it_passes_the_limit(decoded: list[bytes]) -> None:
    """Without a Content-Length (chunked), the limit holds while the body streams in: the
    chunk that passes it is the last one read, and nothing is decoded."""
    inner = Inner()
    call = Call(ErrorBodies(BodyLimit(inner, max_bytes=4096)), [b"x" * 3000] * 3, CBOR)
    assert (call.status, call.body["code"]) == (413, "too-large")
    assert call.read == 2 and decoded == [] and inner.bodies == []


def test_a_body_within_the_limit_goes_through_whole() -> None:
    inner = Inner()
    raw = p.encode_body(HELLO)
    call = Call(ErrorBodies(BodyLimit(inner, max_bytes=len(raw))), [raw[:5], raw[5:]], CBOR)
    assert call.status == 200 and inner.bodies == [{"v": 1, **HELLO}]


def test_a_bad_content_length_is_malformed() -> None:
    call = Call(ErrorBodies(BodyLimit(Inner(), max_bytes=4096)), [b""], {**CBOR, "content-length": "-1"})
    assert (call.status, call.body["code"]) == (400, "malformed")


# -- media type --------------------------------------------------------------------------------


@pytest.mark.parametrize("media", ["application/json", "text/plain", ""])
def test_a_wrong_media_type_is_415_before_the_body_is_read(media: str) -> None:
    headers = {"content-type": media} if media else {}
    call = Call(ErrorBodies(MediaType(Inner())), [p.encode_body(HELLO)], headers)
    assert (call.status, call.body["code"]) == (415, "unsupported-media-type")
    assert call.read == 0 and (media or "nothing") in call.body["detail"]


def test_the_media_type_ignores_case_and_parameters() -> None:
    call = Call(ErrorBodies(MediaType(Inner())), [p.encode_body(HELLO)],
                {"content-type": "Application/CBOR; charset=binary"})
    assert call.status == 200


# -- authentication ----------------------------------------------------------------------------


class Authenticator:
    """Refuses with ``refuse`` (if set), and records what it was shown."""

    def __init__(self, refuse: Exception | None = None) -> None:
        self.refuse = refuse
        self.seen: list[AuthRequest] = []

    def __call__(self, request: AuthRequest) -> None:
        self.seen.append(request)
        if self.refuse is not None:
            raise self.refuse


@pytest.mark.parametrize(("refuse", "status", "code"), [
    (PermissionError("bad token"), 401, "unauthorized"),
    (Forbidden("not yours"), 403, "forbidden"),
    (p.ProtocolError("busy", "too many recent requests"), 503, "busy"),
])
def test_a_refusal_answers_before_the_route_runs(
    refuse: Exception, status: int, code: str, caplog: pytest.LogCaptureFixture
) -> None:
    inner, auth = Inner(), Authenticator(refuse)
    with caplog.at_level(logging.WARNING, logger="edgeq.sync.server"):
        call = Call(ErrorBodies(Authentication(inner, authenticate=auth)), [p.encode_body(HELLO)], CBOR)
    assert (call.status, call.body["code"], call.body["detail"]) == (status, code, str(refuse).split(": ")[-1])
    assert inner.bodies == []
    logged = [getattr(r, "code", None) for r in caplog.records if getattr(r, "event", None) == "auth-refused"]
    assert logged == ([] if code == "busy" else [code])  # a busy store is no refusal


def test_the_authenticator_sees_the_claimed_device_and_both_bodies(decoded: list[bytes]) -> None:
    inner, auth = Inner(), Authenticator()
    raw = p.encode_body(HELLO)
    call = Call(Authentication(inner, authenticate=auth), [raw], {**CBOR, "x-token": "t"})
    assert call.status == 200
    (seen,) = auth.seen
    assert (seen.device, seen.path, seen.method, seen.body) == ("DEV1", PATH, "POST", raw)
    assert seen.message == {"v": 1, **HELLO} and seen.headers["x-token"] == "t"
    assert inner.bodies == [{"v": 1, **HELLO}] and decoded == [raw]  # decoded once for both


def test_a_malformed_body_is_refused_before_the_authenticator_is_asked() -> None:
    """The authenticator is only ever shown a decoded body (the seam's contract)."""
    auth = Authenticator(PermissionError("never asked"))
    call = Call(ErrorBodies(Authentication(Inner(), authenticate=auth)), [b"\xff junk"], CBOR)
    assert (call.status, call.body["code"]) == (400, "malformed") and auth.seen == []


# -- the whole stack, through a one-route app ----------------------------------------------------


@pytest.fixture
def metrics() -> Metrics:
    return Metrics()


def post_all(handler: Any, metrics: Metrics, requests: list[tuple[bytes, dict[str, str]]],
             authenticate: Any = None) -> list[httpx.Response]:
    """POST each ``(content, headers)`` to a one-route app with the protocol middleware."""
    middleware = protocol_middleware(endpoint=PATH, metrics=metrics, max_body_bytes=4096, authenticate=authenticate)
    app = Starlette(routes=[protocol_route(PATH, handler, middleware=middleware)])

    async def run() -> list[httpx.Response]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://home") as client:
            return [await client.post(PATH, content=content, headers=headers) for content, headers in requests]

    return asyncio.run(run())


@pytest.mark.parametrize(("error", "status", "code"), [
    (p.ProtocolError("invalid", "'queue' must be a name"), 422, "invalid"),
    (StoreBusy("database is locked"), 503, "busy"),
    (RuntimeError("disk on fire"), 500, "internal"),
])
def test_errors_become_cbor_error_bodies(
    error: Exception, status: int, code: str, metrics: Metrics, caplog: pytest.LogCaptureFixture
) -> None:
    def handler(body: Mapping[str, Any]) -> dict[str, Any]:
        raise error

    with caplog.at_level(logging.WARNING, logger="edgeq.sync.server"):
        (response,) = post_all(handler, metrics, [(p.encode_body(HELLO), CBOR)])
    body = cbor2.loads(response.content)
    assert (response.status_code, response.headers["content-type"], body["code"]) == (status, p.CONTENT_TYPE, code)
    assert body["type"] == "error" and body["supported"] == [1]
    if code == "internal":
        assert body["detail"] == "RuntimeError: nothing was stored; retry later"
    events = [getattr(r, "event", None) for r in caplog.records]
    assert events == (["internal-error"] if code == "internal" else []) + ["request-error"]


def test_every_answer_is_counted_by_endpoint_and_status(metrics: Metrics, caplog: pytest.LogCaptureFixture) -> None:
    def handler(body: Mapping[str, Any]) -> dict[str, Any]:
        return {"type": "hello", "got": body["qmgr"]}

    with caplog.at_level(logging.WARNING, logger="edgeq.sync.server"):
        ok, _, _ = post_all(handler, metrics, [(p.encode_body(HELLO), CBOR), (b"junk", CBOR), (b"x" * 5000, CBOR)])
    assert ok.status_code == 200 and cbor2.loads(ok.content) == {"v": 1, "type": "hello", "got": "DEV1"}
    text = metrics.render()
    for status, n in ((200, 1), (400, 1), (413, 1)):
        assert f'edgeq_sync_requests_total{{endpoint="{PATH}",status="{status}"}} {n}' in text
    errors = [(getattr(r, "path", None), getattr(r, "status", None))
              for r in caplog.records if getattr(r, "event", None) == "request-error"]
    assert errors == [(PATH, 400), (PATH, 413)]


def test_the_limit_and_media_type_come_before_the_authenticator(metrics: Metrics) -> None:
    auth = Authenticator(PermissionError("unsigned"))
    answers = post_all(lambda body: {}, metrics, [
        (b"x" * 5000, CBOR), (b"{}", {"content-type": "application/json"}), (p.encode_body(HELLO), CBOR)
    ], authenticate=auth)
    assert [r.status_code for r in answers] == [413, 415, 401]
    assert len(auth.seen) == 1

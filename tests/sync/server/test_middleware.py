"""The home server's HTTP middleware, one concern at a time, around the real hello route of
a real HomeService over a real store: each is driven as plain ASGI (so a test sees exactly
which request chunks were read) or as the whole app (``create_app``, in-process). Whether
the route ran is read from the service's sessions; authentication is the real
SignatureAuthenticator over registered device keys, watched (never replaced); decoding is
the real decoder, watched."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import cbor2
import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from starlette.applications import Starlette
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Scope

from edgeq import ManualClock, QueueManager
from edgeq.store.devices import DeviceRecord
from edgeq.sync import protocol as p
from edgeq.sync.keys import public_bytes
from edgeq.sync.server.app import create_app
from edgeq.sync.server.auth import AuthGate, AuthRequest, SignatureAuthenticator
from edgeq.sync.server.home import HomeService
from edgeq.sync.server.middleware import (
    Authentication,
    BodyDecoder,
    BodyLimit,
    ErrorBodies,
    MediaType,
    RequestLog,
)
from edgeq.sync.server.nonces import MemoryNonces
from edgeq.sync.server.routes import protocol_route
from edgeq.sync.signing import sign_headers
from tests.sync.conftest import T0

CBOR = {"content-type": p.CONTENT_TYPE}
PATH = p.PATH_HELLO
HELLO = {"type": "hello", "qmgr": "DEV1", "now_ms": T0}


class Call:
    """One POST through a bare ASGI app: which request chunks it read, what it answered."""

    def __init__(self, app: ASGIApp, chunks: list[bytes], headers: Mapping[str, str], *,
                 hang_up: bool = False) -> None:
        """``hang_up``: the client goes away after the chunks, before the body is complete."""
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
                more = hang_up or self.read < len(chunks)
                return {"type": "http.request", "body": chunks[self.read - 1], "more_body": more}
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


@pytest.fixture
def home(tmp_path: Path, server_clock: ManualClock) -> Iterator[QueueManager]:
    """The server's store (waiting at most 0.05 s for a write lock, so a test can make it busy)."""
    qm = QueueManager(tmp_path / "home.db", name="HOME", clock=server_clock, timeout=0.05)
    qm.define_queue("ORDERS")
    yield qm
    qm.close()


@pytest.fixture
def service(home: QueueManager, server_clock: ManualClock) -> HomeService:
    return HomeService(home, clock=server_clock)


@pytest.fixture
def route(service: HomeService) -> Route:
    """What runs inside the middleware under test: the service's real hello route."""
    return protocol_route(PATH, service.hello)


def hellos(service: HomeService) -> int:
    """How many hellos of DEV1 the service handled (whether the route ran)."""
    state = service.sessions.get("DEV1")
    return 0 if state is None else state.hellos


@pytest.fixture
def decode_threads() -> list[threading.Thread]:
    """The threads the bodies of :func:`decoded` were decoded in, in order."""
    return []


@pytest.fixture
def decoded(monkeypatch: pytest.MonkeyPatch, decode_threads: list[threading.Thread]) -> list[bytes]:
    """Every body :func:`edgeq.sync.protocol.decode_body` is asked to decode (the real one decodes it)."""
    seen: list[bytes] = []
    real = p.decode_body

    def spy(raw: bytes, *args: Any) -> dict[str, Any]:
        seen.append(raw)
        decode_threads.append(threading.current_thread())
        return real(raw, *args)

    monkeypatch.setattr(p, "decode_body", spy)
    return seen


# -- body size ---------------------------------------------------------------------------------


def test_a_declared_oversized_body_is_refused_before_any_of_it_is_read(
    route: Route, service: HomeService, decoded: list[bytes]
) -> None:
    raw = p.encode_body({**HELLO, "pad": b"x" * 5000})
    call = Call(ErrorBodies(BodyLimit(route, max_bytes=4096)), [raw],
                {**CBOR, "content-length": str(len(raw))})
    assert (call.status, call.body["code"]) == (413, "too-large")
    assert f"body of {len(raw)} bytes" in call.body["detail"]
    assert call.read == 0 and decoded == [] and hellos(service) == 0


def test_a_streamed_body_is_refused_as_soon_as_it_passes_the_limit(
    route: Route, service: HomeService, decoded: list[bytes]
) -> None:
    """Without a Content-Length (chunked), the limit holds while the body streams in: the
    chunk that passes it is the last one read, and nothing is decoded."""
    call = Call(ErrorBodies(BodyLimit(route, max_bytes=4096)), [b"x" * 3000] * 3, CBOR)
    assert (call.status, call.body["code"]) == (413, "too-large")
    assert call.read == 2 and decoded == [] and hellos(service) == 0


def test_a_body_within_the_limit_goes_through_whole(route: Route, service: HomeService) -> None:
    raw = p.encode_body(HELLO)
    call = Call(ErrorBodies(BodyLimit(route, max_bytes=len(raw))), [raw[:5], raw[5:]], CBOR)
    assert call.status == 200 and (call.body["type"], call.body["server"]) == ("hello", "HOME")
    assert hellos(service) == 1


@pytest.mark.parametrize("length", ["-1", "1e3", "\u0663", "9" * 5_000])
def test_a_bad_content_length_is_malformed(route: Route, service: HomeService, length: str) -> None:
    """(uvicorn refuses these itself; another ASGI server might pass them on.)"""
    call = Call(ErrorBodies(BodyLimit(route, max_bytes=4096)), [b""], {**CBOR, "content-length": length})
    assert (call.status, call.body["code"]) == (400, "malformed") and hellos(service) == 0


# -- media type --------------------------------------------------------------------------------


@pytest.mark.parametrize("media", ["application/json", "text/plain", ""])
def test_a_wrong_media_type_is_415_before_the_body_is_read(
    route: Route, service: HomeService, media: str
) -> None:
    headers = {"content-type": media} if media else {}
    call = Call(ErrorBodies(MediaType(route)), [p.encode_body(HELLO)], headers)
    assert (call.status, call.body["code"]) == (415, "unsupported-media-type")
    assert call.read == 0 and (media or "nothing") in call.body["detail"] and hellos(service) == 0


def test_the_media_type_ignores_case_and_parameters(route: Route, service: HomeService) -> None:
    call = Call(ErrorBodies(MediaType(route)), [p.encode_body(HELLO)],
                {"content-type": "Application/CBOR; charset=binary"})
    assert call.status == 200 and hellos(service) == 1


# -- authentication ----------------------------------------------------------------------------


@pytest.fixture
def keys(home: QueueManager) -> dict[str, Ed25519PrivateKey]:
    """DEV1's and DEV2's keys, both registered on the server."""
    made = {name: Ed25519PrivateKey.generate() for name in ("DEV1", "DEV2")}
    for name, key in made.items():
        home.register_device(name, public_bytes(key))
    return made


class Watched:
    """The real authenticator, recording every request each of its stages was shown:
    ``authenticate`` (before the body is decoded) and ``authorize`` (after)."""

    def __init__(self, real: SignatureAuthenticator) -> None:
        self.real = real
        self.seen: list[tuple[str, AuthRequest]] = []

    def __call__(self, request: AuthRequest) -> None:  # both stages at once, as the seam is called
        self.seen.append(("call", request))
        self.real(request)

    def authenticate(self, request: AuthRequest) -> DeviceRecord:
        self.seen.append(("authenticate", request))
        return self.real.authenticate(request)

    def authorize(self, device: DeviceRecord, request: AuthRequest) -> None:
        self.seen.append(("authorize", request))
        self.real.authorize(device, request)


@pytest.fixture
def make_auth(home: QueueManager, keys: dict[str, Ed25519PrivateKey],
              server_clock: ManualClock) -> Iterator[Any]:
    stores: list[MemoryNonces] = []

    def _make(max_nonces: int = 1_000) -> Watched:
        stores.append(MemoryNonces(max_entries=max_nonces))
        return Watched(SignatureAuthenticator(home, stores[-1], clock=server_clock))

    yield _make
    for store in stores:
        store.close()


def authenticating(route: Route, auth: Any) -> Authentication:
    return Authentication(route, gate=AuthGate(auth, mode="required"), decoder=BodyDecoder())


def signed_by(key: Ed25519PrivateKey, device: str, raw: bytes) -> dict[str, str]:
    return {**CBOR, **sign_headers(key, device, "POST", PATH, raw, T0)}


@pytest.mark.parametrize(("attempt", "status", "code", "words", "stages"), [
    ("unsigned", 401, "unauthorized", "missing X-Edgeq-Device", ["authenticate"]),
    ("signed by another device", 403, "forbidden", "signed by DEV2 but sent as qmgr 'DEV1'",
     ["authenticate", "authorize"]),
    ("nonce store full", 503, "busy", "too many recent requests", ["authenticate"]),
])
def test_a_refusal_answers_before_the_route_runs(
    attempt: str, status: int, code: str, words: str, stages: list[str], route: Route, service: HomeService,
    make_auth: Any, keys: dict[str, Ed25519PrivateKey], decoded: list[bytes],
    caplog: pytest.LogCaptureFixture,
) -> None:
    auth = make_auth(max_nonces=0 if attempt == "nonce store full" else 1_000)
    raw = p.encode_body(HELLO)
    headers = CBOR if attempt == "unsigned" else signed_by(
        keys["DEV2"] if attempt == "signed by another device" else keys["DEV1"],
        "DEV2" if attempt == "signed by another device" else "DEV1", raw)
    with caplog.at_level(logging.WARNING, logger="edgeq.sync.server"):
        call = Call(ErrorBodies(authenticating(route, auth)), [raw], headers)
    assert (call.status, call.body["code"]) == (status, code) and words in call.body["detail"]
    assert [stage for stage, _ in auth.seen] == stages and hellos(service) == 0
    assert decoded == ([raw] if "authorize" in stages else [])  # decoded only once authenticated
    logged = [getattr(r, "code", None) for r in caplog.records if getattr(r, "event", None) == "auth-refused"]
    assert logged == ([] if code == "busy" else [code])  # a busy store is no refusal


def test_the_signature_is_checked_on_the_raw_body_then_the_decoded_one_is_authorised(
    route: Route, service: HomeService, make_auth: Any, keys: dict[str, Ed25519PrivateKey],
    decoded: list[bytes], decode_threads: list[threading.Thread],
) -> None:
    auth = make_auth()
    raw = p.encode_body(HELLO)
    call = Call(authenticating(route, auth), [raw], signed_by(keys["DEV1"], "DEV1", raw))
    assert call.status == 200
    (first, before), (second, after) = auth.seen
    assert (first, before.device, before.path, before.method, before.body, before.message) == (
        "authenticate", None, PATH, "POST", raw, None)  # nothing decoded yet: only the headers claim a device
    assert before.headers["x-edgeq-device"] == "DEV1"
    assert (second, after.device, after.body, after.message) == ("authorize", "DEV1", raw, {"v": 1, **HELLO})
    assert hellos(service) == 1 and decoded == [raw]  # decoded once for both
    assert decode_threads[0] is not threading.main_thread()  # off the event loop (asyncio.run: main thread)


@pytest.mark.parametrize("body", [b"\xff junk", cbor2.dumps({"v": 1, "qmgr": cbor2.CBORTag(30, [1, 3])})])
def test_an_unauthenticated_body_is_never_decoded(
    body: bytes, route: Route, service: HomeService, make_auth: Any, decoded: list[bytes]
) -> None:
    auth = make_auth()
    call = Call(ErrorBodies(authenticating(route, auth)), [body], CBOR)
    assert ((call.status, call.body["code"]) == (401, "unauthorized") and decoded == []
            and hellos(service) == 0)


def test_a_plain_authenticator_is_shown_decoded_bodies_only(
    route: Route, service: HomeService, keys: dict[str, Ed25519PrivateKey], decoded: list[bytes]
) -> None:
    """The seam for any callable: it sees the decoded body (a malformed one never reaches it)."""
    seen: list[AuthRequest] = []
    authenticating_all = authenticating(route, seen.append)
    bad = Call(ErrorBodies(authenticating_all), [b"\xff junk"], CBOR)
    good = Call(ErrorBodies(authenticating_all), [p.encode_body(HELLO)], CBOR)
    assert (bad.status, bad.body["code"], good.status) == (400, "malformed", 200)
    assert [(r.device, r.message) for r in seen] == [("DEV1", {"v": 1, **HELLO})] and hellos(service) == 1


def test_an_auto_gate_turns_authentication_on_when_a_device_is_registered(
    route: Route, service: HomeService, home: QueueManager, server_clock: ManualClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``auto``: open while the store has no registered device, which every request reads
    again; on from the request after one is registered, and for good (revoking it does
    not open the server again)."""
    gate = AuthGate(SignatureAuthenticator(home, MemoryNonces(), clock=server_clock), mode="auto", qm=home)
    stack = ErrorBodies(Authentication(route, gate=gate, decoder=BodyDecoder()))
    raw, key = p.encode_body(HELLO), Ed25519PrivateKey.generate()
    assert Call(stack, [raw], CBOR).status == 200 and hellos(service) == 1  # open
    home.register_device("DEV1", public_bytes(key))
    with caplog.at_level(logging.WARNING, logger="edgeq.sync.server"):
        refused = Call(stack, [raw], CBOR)
        assert Call(stack, [raw], signed_by(key, "DEV1", raw)).status == 200
    assert (refused.status, refused.body["code"], hellos(service)) == (401, "unauthorized", 2)
    assert [getattr(r, "event", None) for r in caplog.records] == ["auth-on", "auth-refused"]
    home.revoke_device("DEV1")
    assert Call(stack, [raw], CBOR).status == 401 and gate.required()


# -- client disconnects ------------------------------------------------------------------------------


def test_a_client_hanging_up_mid_body_is_counted_and_logged_as_a_disconnect(
    route: Route, service: HomeService, decoded: list[bytes], caplog: pytest.LogCaptureFixture
) -> None:
    raw = p.encode_body(HELLO)
    stack = RequestLog(ErrorBodies(BodyLimit(route, max_bytes=4096)), metrics=service.metrics, endpoint=PATH)
    with caplog.at_level(logging.DEBUG, logger="edgeq.sync.server"):
        call = Call(stack, [raw[:10]], CBOR, hang_up=True)
    assert call.sent == [] and decoded == [] and hellos(service) == 0  # nobody to answer
    assert (f'edgeq_sync_requests_total{{endpoint="{PATH}",status="disconnected"}} 1'
            in service.metrics.render())
    assert ([(r.levelname, getattr(r, "event", None)) for r in caplog.records]
            == [("INFO", "client-disconnect")])


# -- the whole stack: the real app, in-process -----------------------------------------------------


def post_all(app: Starlette, requests: list[tuple[bytes, dict[str, str]]]) -> list[httpx.Response]:
    """POST each ``(content, headers)`` to the app's hello route."""

    async def run() -> list[httpx.Response]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://home") as client:
            return [await client.post(PATH, content=content, headers=headers)
                    for content, headers in requests]

    return asyncio.run(run())


@pytest.mark.parametrize(("fault", "status", "code"), [
    ("a bad device name", 422, "invalid"),
    ("another writer holds the store", 503, "busy"),
    ("the store is closed", 500, "internal"),
])
def test_errors_become_cbor_error_bodies(
    fault: str, status: int, code: str, home: QueueManager, server_clock: ManualClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = create_app(home, clock=server_clock, max_body_bytes=4096)
    body = {**HELLO, "qmgr": "bad name!"} if fault == "a bad device name" else HELLO
    writer = sqlite3.connect(home.path, isolation_level=None)
    if fault == "another writer holds the store":
        writer.execute("BEGIN IMMEDIATE")
    if fault == "the store is closed":
        home.close()
    try:
        with caplog.at_level(logging.WARNING, logger="edgeq.sync.server"):
            (response,) = post_all(app, [(p.encode_body(body), CBOR)])
    finally:
        writer.close()
    answer = cbor2.loads(response.content)
    assert ((response.status_code, response.headers["content-type"], answer["code"])
            == (status, p.CONTENT_TYPE, code))
    assert answer["type"] == "error" and answer["supported"] == [1]
    if code == "internal":
        assert answer["detail"] == "QueueManagerClosed: nothing was stored; retry later"
    events = [getattr(r, "event", None) for r in caplog.records]
    assert events == (["internal-error"] if code == "internal" else []) + ["request-error"]


def test_every_answer_is_counted_by_endpoint_and_status(
    home: QueueManager, server_clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    app = create_app(home, clock=server_clock, max_body_bytes=4096)
    with caplog.at_level(logging.WARNING, logger="edgeq.sync.server"):
        ok, _, _ = post_all(app, [(p.encode_body(HELLO), CBOR), (b"junk", CBOR), (b"x" * 5000, CBOR)])
    assert ok.status_code == 200 and cbor2.loads(ok.content)["server"] == "HOME"
    text = app.state.service.metrics.render()
    for status, n in ((200, 1), (400, 1), (413, 1)):
        assert f'edgeq_sync_requests_total{{endpoint="{PATH}",status="{status}"}} {n}' in text
    errors = [(getattr(r, "path", None), getattr(r, "status", None))
              for r in caplog.records if getattr(r, "event", None) == "request-error"]
    assert errors == [(PATH, 400), (PATH, 413)]


def test_the_limit_and_media_type_come_before_the_authenticator(
    home: QueueManager, server_clock: ManualClock, make_auth: Any
) -> None:
    auth = make_auth()
    app = create_app(home, clock=server_clock, max_body_bytes=4096, authenticate=auth)
    answers = post_all(app, [
        (b"x" * 5000, CBOR), (b"{}", {"content-type": "application/json"}), (p.encode_body(HELLO), CBOR)
    ])
    assert [r.status_code for r in answers] == [413, 415, 401]
    assert len(auth.seen) == 1 and app.state.service.sessions.get("DEV1") is None

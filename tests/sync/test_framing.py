"""edgeq.sync.framing over a real loopback server: each codec both ways (push and pull),
the negotiation at hello with peers that do not know compression (an agent or a server
without the capability), bombs refused before they are decompressed (signed or not),
signatures over the compressed bytes, and damaged bodies and answers refused with
nothing lost."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import random
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
import uvicorn
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from starlette.applications import Starlette
from starlette.exceptions import HTTPException

from edgeq import ManualClock, Message, QueueManager
from edgeq.encoding.compression import CODECS, Codec, compress
from edgeq.sync import protocol as p
from edgeq.sync.agent.agent import SyncAgent
from edgeq.sync.agent.signer import DeviceSigner
from edgeq.sync.framing import H_ACCEPT, H_ENCODING, MIN_BYTES, answer_codec, unframe
from edgeq.sync.keys import public_bytes
from edgeq.sync.server.auth import SignatureAuthenticator
from edgeq.sync.server.home import HomeService
from edgeq.sync.server.middleware import BodyDecoder
from edgeq.sync.server.nonces import MemoryNonces
from edgeq.sync.server.routes import HomeRoutes, http_error
from edgeq.sync.signing import H_NONCE, H_SIGNATURE, H_TIMESTAMP, canonical
from tests.sync.conftest import T0, LiveServer, Network, _Server, free_port

PUT, CONFIRM, PULL, PULL_CONFIRM = p.PATH_PUT, p.PATH_CONFIRM, p.PATH_PULL, p.PATH_PULL_CONFIRM


def telemetry(n: int, seed: int = 7) -> list[Message]:
    """Sensor readings as JSON, ~200 bytes each, with the variety real ones have."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        reading = {"ts": T0 + i * 1000 + rng.randrange(50), "device": f"pump-{rng.randrange(40):03d}",
                   "seq": i, "temp_c": round(rng.gauss(21, 3), 2),
                   "pressure_kpa": round(rng.gauss(101.3, 0.8), 3),
                   "vibration_mm_s": round(abs(rng.gauss(2, 1)), 3),
                   "state": rng.choice(["run", "idle", "run"])}
        out.append(Message(json.dumps(reading).encode(), fields={"site": "north", "n": i}))
    return out


class Wire(Network):
    """:class:`Network` that also keeps every exchange's headers and raw bodies, and damages
    the next request body or answer on a path when asked (a byte flipped mid-body)."""

    def __init__(self) -> None:
        super().__init__()
        self.exchanges: list[tuple[str, httpx.Headers, bytes, httpx.Headers, bytes]] = []
        self.damage_request: set[str] = set()
        self.damage_answer: set[str] = set()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path in self.damage_request:
            self.damage_request.discard(path)
            request = httpx.Request(request.method, request.url, headers=request.headers,
                                    content=_flip(request.read()))
        response = super().handle_request(request)
        raw = response.read()
        if path in self.damage_answer:
            self.damage_answer.discard(path)
            raw = _flip(raw)
            response = httpx.Response(response.status_code, headers=response.headers, content=raw)
        self.exchanges.append((path, request.headers, request.read(), response.headers, raw))
        return response

    def on(self, path: str) -> list[tuple[httpx.Headers, bytes, httpx.Headers, bytes]]:
        return [(qh, qb, ah, ab) for seen, qh, qb, ah, ab in self.exchanges if seen == path]


def _flip(raw: bytes) -> bytes:
    middle = len(raw) // 2
    return raw[:middle] + bytes([raw[middle] ^ 0x5A]) + raw[middle + 1 :]


@pytest.fixture
def wire() -> Iterator[Wire]:
    net = Wire()
    yield net
    net.close()


@pytest.fixture
def on_wire(wire: Wire, make_agent: Callable[..., SyncAgent]) -> Iterator[Callable[..., SyncAgent]]:
    """Agents whose HTTP goes through :class:`Wire`."""
    clients: list[httpx.Client] = []

    def _make(qm: QueueManager, url: str, **options: Any) -> SyncAgent:
        client = httpx.Client(transport=wire, timeout=10)
        clients.append(client)
        return make_agent(qm, url, client=client, **options)

    yield _make
    for client in clients:
        client.close()


@contextmanager
def serving(app: Any) -> Iterator[str]:
    """``app`` served by uvicorn on a loopback port in a thread; yields its URL."""
    port = free_port()
    ready = threading.Event()
    server = _Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, lifespan="off",
                                    access_log=False), ready)
    thread = threading.Thread(target=lambda: asyncio.run(server.serve()), daemon=True)
    thread.start()
    assert ready.wait(10) and server.started
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.exit()
        thread.join(10)


def home_app(qm: QueueManager, clock: ManualClock, codecs: tuple[Codec, ...]) -> Starlette:
    """The home server's app (as ``create_app`` builds it) whose decoder takes ``codecs``."""
    routes = HomeRoutes(HomeService(qm, clock=clock), decoder=BodyDecoder(codecs=codecs))
    return Starlette(routes=routes.routes, exception_handlers={HTTPException: http_error})


def fill_device(qm: QueueManager, messages: list[Message], compression: str | None) -> None:
    qm.alter_queue("ORDERS", compression=compression)
    qm.put_many("ORDERS", messages)


def assert_arrived(home: QueueManager, queue: str, sent: list[Message]) -> None:
    got = list(home.browse(queue))
    assert sorted(m.data for m in got) == sorted(m.data for m in sent)
    assert len({m.uid for m in got}) == len(sent)


def assert_plain(wire: Wire) -> None:
    """Nothing crossed the wire compressed, nor was asked to."""
    for path, asked, _, answered, _ in wire.exchanges:
        assert H_ENCODING not in asked and H_ACCEPT not in asked, path
        assert H_ENCODING not in answered, path


# -- each codec, both directions ----------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_each_codec_pushes_and_pulls_compressed(
    codec: Codec, device_qm: QueueManager, home_qm: QueueManager, server: LiveServer, wire: Wire,
    on_wire: Callable[..., SyncAgent],
) -> None:
    sent = telemetry(300)
    fill_device(device_qm, sent, codec)
    home_qm.define_queue("DEV1.INBOX")
    inbound = telemetry(300, seed=8)
    home_qm.put_many("DEV1.INBOX", inbound)
    device_qm.define_home_server_queue("INBOX", server="HOME", compression=codec)
    agent = on_wire(device_qm, server.url)
    pushed, pulled = agent.sync_once()
    assert pushed.complete and pushed.transmitted == 300 and pulled is not None and pulled.received == 300
    assert_arrived(home_qm, "ORDERS", sent)
    assert device_qm.depth("ORDERS") == 0 and home_qm.depth("DEV1.INBOX") == 0
    assert sorted(m.data for m in device_qm.browse("INBOX")) == sorted(m.data for m in inbound)
    hello = p.decode_body(wire.on(p.PATH_HELLO)[0][1])
    assert hello["compression"] == ["zstd", "zlib"]
    assert p.decode_body(wire.on(p.PATH_HELLO)[0][3])["compression"] == ["zstd", "zlib"]
    for path in (PUT, CONFIRM, PULL, PULL_CONFIRM):
        exchanges = wire.on(path)
        assert exchanges, path
        for asked, body, answered, answer in exchanges:
            assert asked[H_ACCEPT] == codec, path
            if len(p.encode_body(p.decode_body(unframe(asked.get(H_ENCODING), body, max_bytes=1 << 24)))) \
                    >= MIN_BYTES:
                assert asked[H_ENCODING] == codec, path
            assert answered[H_ENCODING] == codec, path
            plain = unframe(codec, answer, max_bytes=1 << 24)
            assert len(answer) < len(plain) / 2, path  # results and messages shrink a lot
    put_body = wire.on(PUT)[0][1]
    assert len(put_body) < len(unframe(codec, put_body, max_bytes=1 << 24)) / 2


def test_a_queue_without_compression_stays_plain_beside_one_with(
    device_qm: QueueManager, home_qm: QueueManager, server: LiveServer, wire: Wire,
    on_wire: Callable[..., SyncAgent],
) -> None:
    home_qm.define_queue("AUDIT")
    fill_device(device_qm, telemetry(50), "zlib")
    device_qm.define_remote_queue("AUDIT", target_qmgr="HOME")
    device_qm.put_many("AUDIT", telemetry(50, seed=3))
    assert on_wire(device_qm, server.url).push_once().transmitted == 100
    queues = {p.decode_body(unframe(q.get(H_ENCODING), b, max_bytes=1 << 24))["queue"]: q
              for q, b, _, _ in wire.on(PUT)}
    assert queues["ORDERS"][H_ENCODING] == "zlib"
    assert H_ENCODING not in queues["AUDIT"] and H_ACCEPT not in queues["AUDIT"]


# -- peers that do not know compression --------------------------------------------------------------


def test_an_agent_that_offers_nothing_gets_plain_answers(
    device_qm: QueueManager, home_qm: QueueManager, server: LiveServer, wire: Wire,
    on_wire: Callable[..., SyncAgent],
) -> None:
    """An older agent: its hello has no ``compression``; the server says nothing of it."""
    sent = telemetry(120)
    fill_device(device_qm, sent, "zstd")
    home_qm.define_queue("DEV1.INBOX")
    home_qm.put_many("DEV1.INBOX", telemetry(40, seed=2))
    device_qm.define_home_server_queue("INBOX", server="HOME", compression="zstd")
    agent = on_wire(device_qm, server.url)
    agent._link.codecs = ()  # the capability off: what an agent from before compression sends
    pushed, pulled = agent.sync_once()
    assert pushed.transmitted == 120 and pulled is not None and pulled.received == 40
    assert_arrived(home_qm, "ORDERS", sent)
    assert "compression" not in p.decode_body(wire.on(p.PATH_HELLO)[0][1])
    assert "compression" not in p.decode_body(wire.on(p.PATH_HELLO)[0][3])
    assert_plain(wire)


@pytest.mark.parametrize("server_kind", ["takes-none", "says-nothing"])
def test_a_server_without_compression_gets_plain_bodies(
    server_kind: str, device_qm: QueueManager, home_qm: QueueManager, server_clock: ManualClock,
    make_server: Callable[..., LiveServer], wire: Wire, on_wire: Callable[..., SyncAgent],
) -> None:
    """``takes-none``: a server whose decoder takes no codec answers ``compression: []``;
    ``says-nothing``: an older server's hello answer, without the key (it ignores keys it
    does not know). Either way the agent sends and asks for nothing compressed."""
    sent = telemetry(150)
    fill_device(device_qm, sent, "zlib")
    home_qm.define_queue("DEV1.INBOX")
    home_qm.put_many("DEV1.INBOX", telemetry(60, seed=5))
    device_qm.define_home_server_queue("INBOX", server="HOME", compression="zstd")

    def drop(answer: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in answer.items() if k != "compression"}

    with contextlib_for(server_kind, home_qm, server_clock, make_server) as (url, live):
        agent = on_wire(device_qm, url)
        if live is not None:
            live.faults.rewrite_next(p.PATH_HELLO, drop)
        pushed, pulled = agent.sync_once()
    assert pushed.transmitted == 150 and pulled is not None and pulled.received == 60
    assert_arrived(home_qm, "ORDERS", sent)
    assert agent._link.server_codecs == ()
    assert len(wire.on(p.PATH_HELLO)) == 1
    assert_plain(wire)


@contextmanager
def contextlib_for(kind: str, qm: QueueManager, clock: ManualClock,
                   make_server: Callable[..., LiveServer]) -> Iterator[tuple[str, LiveServer | None]]:
    if kind == "takes-none":
        with serving(home_app(qm, clock, ())) as url:
            yield url, None
    else:
        live = make_server(qm)
        yield live.url, live


def test_a_server_taking_only_zlib_gets_a_zstd_queue_plain(
    device_qm: QueueManager, home_qm: QueueManager, server_clock: ManualClock, wire: Wire,
    on_wire: Callable[..., SyncAgent],
) -> None:
    home_qm.define_queue("AUDIT")
    fill_device(device_qm, telemetry(80), "zstd")
    device_qm.define_remote_queue("AUDIT", target_qmgr="HOME", compression="zlib")
    device_qm.put_many("AUDIT", telemetry(80, seed=4))
    with serving(home_app(home_qm, server_clock, ("zlib",))) as url:
        agent = on_wire(device_qm, url)
        assert agent.push_once().transmitted == 160
    assert agent._link.server_codecs == ("zlib",)
    seen = {p.decode_body(unframe(q.get(H_ENCODING), b, max_bytes=1 << 24))["queue"]: q.get(H_ENCODING)
            for q, b, _, _ in wire.on(PUT)}
    assert seen == {"ORDERS": None, "AUDIT": "zlib"}


def test_the_hello_answers_what_it_takes_of_what_is_offered(server: LiveServer, http: httpx.Client) -> None:
    def offer(**extra: object) -> dict[str, Any]:
        body = p.encode_body({"type": "hello", "qmgr": "DEV1", "now_ms": T0, **extra})
        answer = http.post(server.url + p.PATH_HELLO, content=body, headers={"content-type": p.CONTENT_TYPE})
        assert answer.status_code == 200
        return p.decode_body(answer.content)

    assert offer(compression=["br", "zlib"])["compression"] == ["zlib"]
    assert offer(compression=["zlib", "zstd"])["compression"] == ["zstd", "zlib"]
    assert offer(compression="zstd")["compression"] == []
    assert "compression" not in offer()
    assert answer_codec("br, zlib", ("zstd", "zlib")) == "zlib" and answer_codec("br", ("zlib",)) is None


# -- bombs, damage, unknown codecs -----------------------------------------------------------------------


def _bomb(codec: Codec, decompressed: int) -> bytes:
    """A put whose one message holds ``decompressed`` zero bytes, compressed."""
    body = {"type": "put", "qmgr": "DEV1", "now_ms": T0, "queue": "ORDERS",
            "messages": [{"u": "DEV1.1", "d": bytes(decompressed)}]}
    return compress(codec, p.encode_body(body))


@pytest.mark.parametrize("codec", CODECS)
def test_a_bomb_is_refused_before_it_is_decoded(
    codec: Codec, home_qm: QueueManager, make_server: Callable[..., LiveServer], http: httpx.Client,
    device_qm: QueueManager, make_agent: Callable[..., SyncAgent],
) -> None:
    live = make_server(home_qm, max_body_bytes=1 << 20)
    bomb = _bomb(codec, 64 << 20)
    assert len(bomb) < 100_000  # far under the limit as sent: only what it decompresses to is over
    answer = http.post(live.url + PUT, content=bomb,
                       headers={"content-type": p.CONTENT_TYPE, H_ENCODING: codec})
    assert answer.status_code == 413, answer.text
    error = p.decode_body(answer.content)
    assert error["code"] == "too-large" and "1048576" in error["detail"] and codec in error["detail"]
    assert home_qm.depth("ORDERS") == 0
    fill_device(device_qm, telemetry(20), codec)  # the server is unharmed: a real push goes through
    assert make_agent(device_qm, live.url).push_once().transmitted == 20


def test_an_unknown_codec_is_refused(server: LiveServer, http: httpx.Client) -> None:
    body = p.encode_body({"type": "hello", "qmgr": "DEV1", "now_ms": T0})
    answer = http.post(server.url + p.PATH_HELLO, content=body,
                       headers={"content-type": p.CONTENT_TYPE, H_ENCODING: "br"})
    assert answer.status_code == 415
    assert ("'br' is not a codec this end decodes (it takes: zstd, zlib)"
            in p.decode_body(answer.content)["detail"])


@pytest.mark.parametrize("codec", CODECS)
def test_a_damaged_compressed_put_is_refused_and_nothing_is_lost(
    codec: Codec, device_qm: QueueManager, home_qm: QueueManager, server: LiveServer, wire: Wire,
    on_wire: Callable[..., SyncAgent],
) -> None:
    sent = telemetry(200)
    fill_device(device_qm, sent, codec)
    agent = on_wire(device_qm, server.url)
    wire.damage_request.add(PUT)
    first = agent.push_once()
    assert first.stopped and "malformed" in (first.error or "") and "decompress" in (first.error or "")
    assert home_qm.depth("ORDERS") == 0 and device_qm.depth("ORDERS") == 200
    again = agent.push_once()
    assert again.complete and again.transmitted == 200
    assert_arrived(home_qm, "ORDERS", sent)
    assert device_qm.depth("ORDERS") == 0


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("path", [PUT, CONFIRM, PULL])
def test_a_damaged_compressed_answer_is_refused_and_nothing_is_lost(
    codec: Codec, path: str, device_qm: QueueManager, home_qm: QueueManager, server: LiveServer, wire: Wire,
    on_wire: Callable[..., SyncAgent],
) -> None:
    sent = telemetry(150)
    fill_device(device_qm, sent, codec)
    home_qm.define_queue("DEV1.INBOX")
    inbound = telemetry(90, seed=11)
    home_qm.put_many("DEV1.INBOX", inbound)
    device_qm.define_home_server_queue("INBOX", server="HOME", compression=codec)
    agent = on_wire(device_qm, server.url)
    wire.damage_answer.add(path)
    pushed, pulled = agent.sync_once()
    assert not (pushed.complete and pulled is not None and pulled.complete)  # the damage was noticed
    failure = pushed.error if path != PULL else pulled.error if pulled is not None else None
    assert failure is not None and "bad" in failure, failure
    for _ in range(3):  # what was in flight is sorted out by the protocol's repeats
        pushed, pulled = agent.sync_once()
        if pushed.complete and pulled is not None and pulled.complete and device_qm.depth("INBOX") == 90:
            break
    assert_arrived(home_qm, "ORDERS", sent)
    assert device_qm.depth("ORDERS") == 0 and home_qm.depth("DEV1.INBOX") == 0
    assert sorted(m.data for m in device_qm.browse("INBOX")) == sorted(m.data for m in inbound)


# -- signatures cover the compressed bytes ----------------------------------------------------------------


def test_signatures_cover_the_bytes_sent_and_are_checked_before_decompressing(
    home_qm: QueueManager, device_qm: QueueManager, server_clock: ManualClock, device_clock: ManualClock,
    make_server: Callable[..., LiveServer], wire: Wire, on_wire: Callable[..., SyncAgent], http: httpx.Client,
) -> None:
    key = Ed25519PrivateKey.generate()
    home_qm.register_device("DEV1", public_bytes(key), queues=["ORDERS"])
    nonces = MemoryNonces()
    live = make_server(home_qm, authenticate=SignatureAuthenticator(home_qm, nonces, clock=server_clock),
                       max_body_bytes=1 << 20)
    try:
        # An unsigned bomb: refused as unsigned (401) before anything is decompressed.
        answer = http.post(live.url + PUT, content=_bomb("zstd", 64 << 20),
                           headers={"content-type": p.CONTENT_TYPE, H_ENCODING: "zstd"})
        assert answer.status_code == 401 and p.decode_body(answer.content)["code"] == "unauthorized"
        sent = telemetry(100)
        fill_device(device_qm, sent, "zstd")
        agent = on_wire(device_qm, live.url, auth=DeviceSigner("DEV1", key, clock=device_clock))
        assert agent.push_once().transmitted == 100
        assert_arrived(home_qm, "ORDERS", sent)
        asked, body, _, _ = wire.on(PUT)[0]
        assert asked[H_ENCODING] == "zstd" and body[:4] == b"\x28\xb5\x2f\xfd"  # a zstd frame, as signed
        signed = canonical("POST", PUT, "DEV1", int(asked[H_TIMESTAMP]), asked[H_NONCE], body)
        assert signed.decode().endswith(hashlib.sha256(body).hexdigest())
        key.public_key().verify(base64.b64decode(asked[H_SIGNATURE]), signed)  # raises if not
    finally:
        nonces.close()

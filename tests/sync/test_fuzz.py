"""Thousands of hostile bodies against every endpoint of two live home servers (uvicorn on
loopback, one requiring signatures, one open) over one real store: malformed, truncated,
oversized, deeply nested, tag-laden, type-confused, huge-integer CBOR and plain garbage,
signed, unsigned and badly signed, from several clients at once. Every answer must be a
4xx protocol error, nothing may be stored, and /healthz must keep answering throughout.

Every body is invalid by construction (a strict prefix of a CBOR item, a tag, a required
field of the wrong type...), so any 2xx is a bug, as is any 5xx. The generator is seeded:
a failure names its case, and the same seed makes the same cases.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cbor2
import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from edgeq import ManualClock, Message, QueueManager
from edgeq.encoding.cbor import DecodeLimits
from edgeq.sync import protocol as p
from edgeq.sync.keys import public_bytes
from edgeq.sync.server.auth import SignatureAuthenticator
from edgeq.sync.server.nonces import MemoryNonces
from edgeq.sync.signing import sign_headers
from tests.sync.conftest import T0, LiveServer
from tests.sync.test_hostile import Prober

SEED = 15
CASES = 3_000
CLIENTS = 4
MAX_BODY = 64 * 1024
LIMITS = DecodeLimits(max_depth=16, max_items=8_000)  # small, so dense bodies reach the item count
ENDPOINTS = [p.PATH_HELLO, p.PATH_PUT, p.PATH_CONFIRM, p.PATH_PULL, p.PATH_PULL_CONFIRM, p.PATH_EXPIRIES]
UID = f"DEV1.{T0 * 1000 + 7}"


def enc(value: Any) -> bytes:
    return cbor2.dumps(value)


def raw_map(pairs: list[tuple[bytes, bytes]]) -> bytes:
    """A definite-length CBOR map of already-encoded keys and values (any bytes at all)."""
    n = len(pairs)
    head = (bytes([0xA0 | n]) if n < 24 else b"\xb8" + bytes([n]) if n < 256
            else b"\xb9" + n.to_bytes(2, "big"))
    return head + b"".join(k + v for k, v in pairs)


def valid(path: str) -> dict[str, Any]:
    """A body the server would accept at ``path`` (every case breaks one of these)."""
    base = {"v": 1, "qmgr": "DEV1", "now_ms": T0}
    message = {"u": UID, "d": b"\x00data", "p": 4, "x": 60_000, "f": {"n": ["i", 5], "s": ["s", "t"]}}
    return {
        p.PATH_HELLO: {**base, "type": "hello", "agent": "fuzz"},
        p.PATH_PUT: {**base, "type": "put", "queue": "ORDERS", "messages": [message], "server_ms": T0},
        p.PATH_CONFIRM: {**base, "type": "confirm", "queue": "ORDERS", "uids": [UID]},
        p.PATH_PULL: {**base, "type": "pull", "queue": "INBOX", "max": 5},
        p.PATH_PULL_CONFIRM: {**base, "type": "pull-confirm", "queue": "INBOX", "uids": [UID]},
        p.PATH_EXPIRIES: {**base, "type": "expiries",
                          "entries": [{"u": UID, "q": "ORDERS", "t": T0, "w": "get"}]},
    }[path]


#: For each checked field, values it can never take (wrong type, out of range, a bad name).
WRONG: dict[str, list[Any]] = {
    "v": [None, True, 0, 2, -1, 2**64 - 1, -(2**64), 1.0, "1", b"\x01", [1], {"v": 1}],
    "type": [None, 1, True, b"hello", ["hello"], {}, "x" * 2_000, "error", ""],
    "qmgr": [None, 5, b"DEV1", "", "bad name!", "D" * 49, ["DEV1"], 1.5, math.nan],
    "now_ms": [None, -1, 2**62 + 1, 2**64 - 1, -(2**64), 1.5, math.inf, -math.inf, math.nan, "0", True, []],
    "queue": [None, 0, b"ORDERS", "", "no spaces", "Q" * 49, {"q": 1}, -0.0],
    "messages": [None, {}, "m", 7, b"", [{"d": b"no uid"}], [{"u": UID}], [{"u": UID, "d": "text"}],
                 [{"u": "DEV1." + "9" * 5_000, "d": b""}], [{"u": UID, "d": b"", "x": 2**64 - 1}],
                 [{"u": UID, "d": b"", "f": {"n": ["i", 2**40]}}],
                 [{"u": UID, "d": b"", "f": {"n": ["f", "x"]}}], [{"u": UID, "d": b"", "p": 10}],
                 [{"u": UID, "d": b""}, {"u": UID, "d": b""}], [7]],
    "uids": [None, {}, "u", [7], [b"DEV1.1"], ["nodot"], ["DEV1." + "1" * 5_000], [None]],
    "max": [None, 0, -1, 2**64 - 1, 1.5, "5", True],
    "entries": [None, {}, "e", 3, b"\x00"],
}
CHECKED = {
    p.PATH_HELLO: ["v", "type", "qmgr", "now_ms"],
    p.PATH_PUT: ["v", "type", "qmgr", "now_ms", "queue", "messages"],
    p.PATH_CONFIRM: ["v", "type", "qmgr", "now_ms", "queue", "uids"],
    p.PATH_PULL: ["v", "type", "qmgr", "now_ms", "queue", "max"],
    p.PATH_PULL_CONFIRM: ["v", "type", "qmgr", "now_ms", "queue", "uids"],
    p.PATH_EXPIRIES: ["v", "type", "qmgr", "now_ms", "entries"],
}


@dataclass(frozen=True)
class Case:
    """One hostile request: what kind, where, its body, and how it is signed."""

    n: int
    kind: str
    path: str
    body: bytes
    signing: str  # "signed", "unsigned", "forged" (a valid signature of another body)
    media: str = p.CONTENT_TYPE

    def __str__(self) -> str:
        return (f"case {self.n} ({self.kind}, {self.signing}, {self.path}, {len(self.body)} bytes): "
                f"{self.body[:60]!r}")


class Hostile:
    """Seeded generator of bodies that no endpoint may accept."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def _hostile_value(self) -> bytes:
        """Encoded CBOR the decoder must refuse wherever it appears (even under an unknown key)."""
        r = self.rng
        choice = r.randrange(9)
        if choice == 0:  # a tag: bignums, rationals, decimals, dates, shared refs, sets, any number
            tag = r.choice([0, 1, 2, 3, 4, 5, 28, 29, 30, 35, 36, 37, 258, 55799, r.randrange(2**64)])
            inner = r.choice([b"\x01", enc([1, 3]), b"\x5a\x00\x00\x10\x00" + b"\xff" * 4096,
                              enc("2020-01-01")])
            return enc(cbor2.CBORTag(tag, 0))[:-1] + inner
        if choice == 1:  # too deep
            depth = r.randrange(LIMITS.max_depth + 1, 300)
            return r.choice([b"\x81", b"\xa1\x61k", b"\x9f"]) * depth + b"\x00"
        if choice == 2:  # invalid UTF-8 in a text string
            return b"\x62\xc3\x28"
        if choice == 3:  # reserved initial bytes and simple-value encodings
            return bytes([r.choice([0x1C, 0x1D, 0x1E, 0x3C, 0x5C, 0x7C, 0x9C, 0xBC, 0xDC, 0xFC, 0xFD, 0xFE])])
        if choice == 4:  # a map keyed by something other than a string
            return raw_map([(r.choice([enc(1), enc(-1), enc(1.5), enc(None), enc(True), enc([1]), enc({})]),
                             enc(0))])
        if choice == 5:  # the same key twice
            return raw_map([(enc("k"), enc(1)), (enc("k"), enc(2))])
        if choice == 6:  # more items than the limit, in a body within the size limit
            n = r.randrange(LIMITS.max_items + 1, MAX_BODY - 100)
            return b"\x9a" + n.to_bytes(4, "big") + r.choice([b"\x00", b"\x80", b"\xa0", b"\xf6"]) * n
        if choice == 7:  # a stray break code
            return b"\xff"
        return b"\x5f\x41a\x61b\xff"  # an indefinite byte string with a text chunk

    def case(self, n: int) -> Case:
        r = self.rng
        path = r.choice(ENDPOINTS)
        body = valid(path)
        signing = r.choices(["signed", "unsigned", "forged"], [8, 1, 1])[0]
        kind = r.choice(["garbage", "truncated", "trailing", "hostile-extra", "hostile-field", "confused",
                         "not-a-map", "oversized", "wrong-media", "wrong-path", "indefinite"])
        raw = enc(body)
        if kind == "garbage":
            out = r.randbytes(r.randrange(0, 2_000))
        elif kind == "truncated":
            out = raw[:r.randrange(0, len(raw))]
        elif kind == "trailing":
            out = raw + r.randbytes(r.randrange(1, 20))
        elif kind == "hostile-extra":  # a valid body plus a key whose value cannot be decoded
            pairs = [(enc(k), enc(v)) for k, v in body.items()]
            pairs.insert(r.randrange(len(pairs) + 1),
                         (enc(r.choice(["zz", "pad", "x"])), self._hostile_value()))
            out = raw_map(pairs)
        elif kind == "hostile-field":  # a required field replaced by something undecodable
            pairs = [(enc(k), self._hostile_value() if k == r.choice(CHECKED[path]) else enc(v))
                     for k, v in body.items()]
            pairs.append((enc("zz"), self._hostile_value()))
            out = raw_map(pairs)
        elif kind == "confused":  # one checked field of a wrong type or out of range
            field = r.choice(CHECKED[path])
            body[field] = r.choice(WRONG[field])
            if r.random() < 0.3:
                del body[field]
            out = enc(body)
        elif kind == "not-a-map":
            out = enc(r.choice([[body], "body", 1, None, b"\xa1", [], 2**64 - 1]))
        elif kind == "oversized":
            out = enc({**body, "pad": r.randbytes(MAX_BODY + r.randrange(1, 10_000))})
        elif kind == "indefinite":  # an indefinite-length map never closed, or closed after a key
            items = b"".join(enc(k) + enc(v) for k, v in body.items())
            out = b"\xbf" + items + r.choice([b"", enc("dangling") + b"\xff"])
        else:
            out = raw
        if kind == "wrong-media":
            return Case(n, kind, path, out, signing, r.choice(["application/json", "text/plain", ""]))
        if kind == "wrong-path":
            return Case(n, kind, r.choice(["/v1/nope", "/v1", "/v1/put/", "/healthz/x"]), out, signing)
        return Case(n, kind, path, out, signing)


def snapshot(qm: QueueManager) -> tuple[Any, ...]:
    """Everything a request could have stored: depths (locked puts included), the journal,
    the message held for DEV1 (and its lock), the device rows."""
    depths = tuple((q, qm.depth(q)) for q in sorted(qm.queue_names()))
    journal = tuple((e.kind, e.uid, e.side) for e in qm.journal_since(0))
    inbox = tuple(str(m.uid) for m in qm.browse("DEV1.INBOX"))
    devices = tuple((d.name, d.last_seen_ms, d.clock_offset_ms, d.agent) for d in qm.devices())
    return depths, journal, inbox, devices


@pytest.fixture
def key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


@pytest.fixture
def home(tmp_path: Path, server_clock: ManualClock, key: Ed25519PrivateKey) -> Iterator[QueueManager]:
    qm = QueueManager(tmp_path / "home.db", name="HOME", clock=server_clock, journal="server")
    qm.define_queue("ORDERS")
    qm.define_queue("DEV1.INBOX")
    qm.put("DEV1.INBOX", Message(b"for DEV1"))
    qm.register_device("DEV1", public_bytes(key))
    yield qm
    qm.close()


def test_hostile_bodies_get_only_4xx_store_nothing_and_stall_nothing(
    home: QueueManager, key: Ed25519PrivateKey, server_clock: ManualClock,
    make_server: Callable[..., LiveServer],
) -> None:
    nonces = MemoryNonces()
    secure = make_server(home, authenticate=SignatureAuthenticator(home, nonces, clock=server_clock),
                         max_body_bytes=MAX_BODY, decode_limits=LIMITS)
    open_ = make_server(home, max_body_bytes=MAX_BODY, decode_limits=LIMITS)

    def sign(path: str, body: bytes) -> dict[str, str]:
        return sign_headers(key, "DEV1", "POST", path, body, T0)

    with httpx.Client(timeout=10) as http:  # both servers know DEV1's clock: puts, pulls... reach validation
        hello = p.encode_body({"type": "hello", "qmgr": "DEV1", "now_ms": T0})
        for server, headers in ((secure, sign(p.PATH_HELLO, hello)), (open_, {})):
            response = http.post(server.url + p.PATH_HELLO, content=hello,
                                 headers={"content-type": p.CONTENT_TYPE, **headers})
            assert response.status_code == 200, response.content
    before = snapshot(home)
    generator = Hostile(SEED)
    cases = [generator.case(n) for n in range(CASES)]

    def send(batch: list[Case]) -> list[tuple[Case, str, int, str]]:
        answers = []
        with httpx.Client(timeout=30) as client:
            for case in batch:
                for name, server in (("secure", secure), ("open", open_)):
                    headers = {"content-type": case.media} if case.media else {}
                    if name == "secure" and case.signing == "signed":
                        headers.update(sign(case.path, case.body))
                    elif name == "secure" and case.signing == "forged":
                        headers.update(sign(case.path, case.body + b"\x00"))
                    response = client.post(server.url + case.path, content=case.body, headers=headers)
                    code = cbor2.loads(response.content).get("code", "") if response.content else ""
                    answers.append((case, name, response.status_code, code))
        return answers

    with Prober(secure.url, open_.url).running() as prober, ThreadPoolExecutor(CLIENTS) as pool:
        results = [a for batch in pool.map(send, [cases[i::CLIENTS] for i in range(CLIENTS)]) for a in batch]

    bad = [f"{server} {status} {code}: {case}" for case, server, status, code in results
           if not 400 <= status < 500]
    assert bad == [], "\n".join(bad[:20])
    assert snapshot(home) == before
    assert prober.failures == [] and prober.answers and set(prober.answers) == {200}
    # The cases reached every stage: the signature check, the media and size checks, the
    # decoder, the validators (so a 4xx from an early stage did not hide the later ones).
    seen = {(server, code) for _, server, _, code in results}
    for server in ("secure", "open"):
        for code in ("malformed", "unsupported-version", "invalid", "too-large", "unsupported-media-type",
                     "not-found"):
            assert (server, code) in seen, (server, code)
    assert ("secure", "unauthorized") in seen and ("open", "unauthorized") not in seen
    nonces.close()

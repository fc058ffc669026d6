"""Hostile and broken requests against a real ``edgeq serve`` (a subprocess on a loopback
port; once, a real server in this process, to hold its decoder): a server that fails
open, a body that freezes the event loop, integers that crash the error path, a client
that hangs up mid-body (issue 15, defects 1-4).

Every wait is bounded: a stalled server fails these tests by a probe's timeout, never by
hanging the suite.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import cbor2
import httpx
import pytest

from edgeq import QueueManager
from edgeq.clock import system_clock
from edgeq.sync import protocol as p
from edgeq.sync.keys import KeyPair, load_private_key, new_key_pair
from edgeq.sync.signing import sign_headers
from tests.sync.conftest import LiveServer, edgeq_serve, free_port

CBOR = {"content-type": p.CONTENT_TYPE}
EDGEQ = [sys.executable, "-m", "edgeq"]
#: A healthy server answers /healthz in milliseconds; a stalled one not at all. Generous
#: for a loaded CI machine, far below the seconds a hostile body used to stall the server.
PROBE_TIMEOUT_S = 3.0


def home_store(tmp_path: Path) -> Path:
    home = tmp_path / "home.db"
    with QueueManager(home, name="HOME", journal="server") as qm:
        qm.define_queue("ORDERS")
    return home


def stored(home: Path) -> tuple[int, int]:
    """The home store's depth of ORDERS (locked puts included) and journal length."""
    with QueueManager(home) as qm:
        return qm.depth("ORDERS"), len(qm.journal_since(0))


def events(lines: list[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in lines if line.startswith("{")]


def hello(device: str = "DEV1") -> dict[str, Any]:
    return {"type": "hello", "qmgr": device, "now_ms": system_clock()}


def put(device: str = "DEV1", **message: Any) -> dict[str, Any]:
    wire = {"u": f"{device}.{system_clock() * 1000}", "d": b"payload", **message}
    return {"type": "put", "qmgr": device, "now_ms": system_clock(), "queue": "ORDERS", "messages": [wire]}


def post(http: httpx.Client, url: str, path: str, body: dict[str, Any] | bytes,
         headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    raw = body if isinstance(body, bytes) else p.encode_body(body)
    response = http.post(url + path, content=raw, headers={**CBOR, **(headers or {})})
    return response.status_code, cbor2.loads(response.content)


def signed(pair: KeyPair, path: str, body: dict[str, Any] | bytes, device: str = "DEV1") -> dict[str, str]:
    raw = body if isinstance(body, bytes) else p.encode_body(body)
    return sign_headers(load_private_key(pair.private_path), device, "POST", path, raw, system_clock())


def rational_bomb(size: int) -> bytes:
    """A body whose ``type`` is a CBOR rational (tag 30) of two ``size``/2-byte integers:
    cbor2 reduces the fraction as it decodes, in time quadratic in ``size``."""
    half = size // 2
    numerator = int.from_bytes(os.urandom(half), "big") | 1
    denominator = int.from_bytes(os.urandom(half), "big") | 1
    return cbor2.dumps({"v": 1, "type": cbor2.CBORTag(30, [numerator, denominator]), "qmgr": "DEV1"})


class Prober:
    """GET /healthz of each server over and over, each with a bounded timeout, until
    stopped: what a monitoring probe (or any other client) sees while something else is
    in flight. ``answers`` are the statuses; a probe that timed out or failed ends it."""

    def __init__(self, *urls: str) -> None:
        self.urls = urls
        self.answers: list[int] = []
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._first = threading.Event()
        self._thread = threading.Thread(target=self._run, name="healthz-prober", daemon=True)

    def _run(self) -> None:
        with httpx.Client(timeout=PROBE_TIMEOUT_S) as http:
            while not self._stop.is_set():
                for url in self.urls:
                    try:
                        self.answers.append(http.get(url + "/healthz").status_code)
                    except httpx.HTTPError as exc:
                        self.failures.append(f"{url}: {type(exc).__name__}: {exc}")
                        return
                    finally:
                        self._first.set()

    @contextmanager
    def running(self) -> Iterator[Prober]:
        """Probing from its first answer on (so there is one) until the block ends."""
        self._thread.start()
        self._first.wait(PROBE_TIMEOUT_S + 5)
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join(PROBE_TIMEOUT_S + 5)


# -- defect 1: authentication fails open -------------------------------------------------------------


def test_registering_a_device_while_the_server_runs_turns_authentication_on(tmp_path: Path) -> None:
    """`edgeq serve` started with no device registered serves anyone, and says so loudly at
    start and in /healthz; `edgeq server devices add` on the running server turns
    authentication on from the next request: unsigned requests are refused, nothing stored."""
    home = home_store(tmp_path)
    pair = new_key_pair(tmp_path / "dev1.key")
    url = f"http://127.0.0.1:{free_port()}"
    with edgeq_serve(home, int(url.rsplit(":", 1)[1])) as lines, httpx.Client(timeout=10) as http:
        assert post(http, url, p.PATH_HELLO, hello())[0] == 200  # open: anyone may say hello
        before = http.get(url + "/healthz").json()
        added = subprocess.run([*EDGEQ, "server", "devices", "add", "DEV1", "--public-key",
                                str(pair.public_path),
                                "--db", str(home)], capture_output=True, text=True, timeout=60)
        assert added.returncode == 0, added.stderr

        status, body = post(http, url, p.PATH_PUT, put())
        assert (status, body.get("code")) == (401, "unauthorized"), body  # it was 200: stored
        assert "takes only signed requests" in body["detail"]
        assert post(http, url, p.PATH_HELLO, hello())[0] == 401
        assert (before.get("auth"), http.get(url + "/healthz").json().get("auth")) == ("open", "required")
        status, body = post(http, url, p.PATH_HELLO, hello(), signed(pair, p.PATH_HELLO, hello()))
        assert status == 200, body  # the refusal's detail, if it is refused
    assert stored(home) == (0, 0)
    logged = events(lines)
    insecure = [e for e in logged if e["event"] == "insecure"]
    assert insecure and insecure[0]["level"] == "warning" and "AUTHENTICATION IS OFF" in insecure[0]["msg"]
    assert [e["auth"] for e in logged if e["event"] == "serve"] == ["open"]
    assert [e["level"] for e in logged if e["event"] == "auth-on"] == ["warning"]


def test_a_server_with_a_registered_device_requires_signatures_from_the_start(tmp_path: Path) -> None:
    home = home_store(tmp_path)
    pair = new_key_pair(tmp_path / "dev1.key")
    with QueueManager(home) as qm:
        qm.register_device("DEV1", pair.public_key)
    port = free_port()
    with edgeq_serve(home, port) as lines, httpx.Client(timeout=10) as http:
        assert http.get(f"http://127.0.0.1:{port}/healthz").json()["auth"] == "required"
        assert post(http, f"http://127.0.0.1:{port}", p.PATH_HELLO, hello())[0] == 401
    logged = events(lines)
    assert not [e for e in logged if e["event"] == "insecure"]
    assert [e["auth"] for e in logged if e["event"] == "serve"] == ["required"]


def test_no_auth_serves_anyone_even_with_devices_registered_and_says_so(tmp_path: Path) -> None:
    home = home_store(tmp_path)
    with QueueManager(home) as qm:
        qm.register_device("DEV1", new_key_pair(tmp_path / "dev1.key").public_key)
    port = free_port()
    with edgeq_serve(home, port, "--no-auth") as lines, httpx.Client(timeout=10) as http:
        assert http.get(f"http://127.0.0.1:{port}/healthz").json()["auth"] == "open"
        assert post(http, f"http://127.0.0.1:{port}", p.PATH_HELLO, hello())[0] == 200
    insecure = [e for e in events(lines) if e["event"] == "insecure"]
    assert len(insecure) == 1 and "--no-auth" in insecure[0]["msg"] and insecure[0]["auth"] == "open"


# -- defect 2: one request could freeze the server before authentication ------------------------------


def test_a_hostile_body_neither_stalls_the_server_nor_is_decoded(tmp_path: Path) -> None:
    """A CBOR rational of 600 KB used to hold the event loop for seconds (cbor2 reduces it
    quadratically as it decodes): no other request, /healthz included, was answered. Tags
    the protocol never uses are refused as they are met, in a worker thread."""
    home = home_store(tmp_path)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    bomb = rational_bomb(600_000)
    with edgeq_serve(home, port), httpx.Client(timeout=60) as http, Prober(url).running() as prober:
        status, body = post(http, url, p.PATH_PUT, bomb)
    assert prober.failures == [] and prober.answers and set(prober.answers) == {200}
    assert (status, body["code"]) == (400, "malformed") and "CBOR tag" in body["detail"]
    assert stored(home) == (0, 0)


def test_a_body_is_decoded_off_the_event_loop(
    home_qm: QueueManager, make_server: Callable[..., LiveServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """While one body is being decoded (held here until /healthz has answered) the server
    answers others: decoding runs in a worker thread. (A real server in this process:
    the decoder is the real one, watched and held.)"""
    decoding, probed = threading.Event(), threading.Event()
    real = p.decode_body

    def held(raw: bytes, *args: Any) -> dict[str, Any]:
        decoding.set()
        probed.wait(PROBE_TIMEOUT_S * 3)  # bounded: a stalled server fails the test, never hangs it
        return real(raw, *args)

    monkeypatch.setattr(p, "decode_body", held)
    server = make_server(home_qm)
    with httpx.Client(timeout=30) as http, ThreadPoolExecutor(1) as pool:
        answer = pool.submit(post, http, server.url, p.PATH_HELLO, hello())
        assert decoding.wait(10)
        try:
            health = httpx.get(server.url + "/healthz", timeout=PROBE_TIMEOUT_S)
        finally:
            probed.set()
        assert (health.status_code, answer.result(30)[0]) == (200, 200)


def test_an_unsigned_body_is_refused_before_it_is_decoded(tmp_path: Path) -> None:
    """With a device registered the signature (over the body's hash) is checked first: an
    unsigned or badly signed body is refused without being decoded, whatever it holds; a
    properly signed hostile one is then refused by the decoder."""
    home = home_store(tmp_path)
    pair = new_key_pair(tmp_path / "dev1.key")
    with QueueManager(home) as qm:
        qm.register_device("DEV1", pair.public_key)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    bomb, junk = rational_bomb(600_000), b"\xff\x00 not CBOR at all"
    forged = {**signed(pair, p.PATH_PUT, junk), "X-Edgeq-Signature": "A" * 86 + "=="}
    with edgeq_serve(home, port), httpx.Client(timeout=60) as http, Prober(url).running() as prober:
        answers = [post(http, url, p.PATH_PUT, bomb), post(http, url, p.PATH_PUT, junk),
                   post(http, url, p.PATH_PUT, junk, forged),
                   post(http, url, p.PATH_PUT, bomb, signed(pair, p.PATH_PUT, bomb))]
    assert prober.failures == [] and set(prober.answers) == {200}
    assert [(status, body["code"]) for status, body in answers] == [
        (401, "unauthorized"), (401, "unauthorized"), (401, "unauthorized"), (400, "malformed")]
    assert "bad signature" in answers[2][1]["detail"] and "CBOR tag" in answers[3][1]["detail"]
    assert stored(home) == (0, 0)


# -- defect 3: huge integers answered 500 ----------------------------------------------------------


def test_huge_integers_and_floats_are_protocol_errors(tmp_path: Path) -> None:
    """Integers beyond 4,300 digits (CBOR bignums, or digits in a uid's text) and huge
    floats used to raise while the error was formatted, or while a field was converted:
    HTTP 500. Every one of them is a 4xx protocol error now, and nothing is stored."""
    home = home_store(tmp_path)
    huge = 7 ** 6000  # 5,071 digits
    bodies = [
        ("v", p.PATH_HELLO, {**hello(), "v": huge}),
        ("type", p.PATH_HELLO, {**hello(), "type": huge}),
        ("now_ms", p.PATH_HELLO, {**hello(), "now_ms": huge}),
        ("now_ms decimal", p.PATH_HELLO, {**hello(), "now_ms": Decimal("1e5000")}),
        ("now_ms rational", p.PATH_HELLO, {**hello(), "now_ms": Fraction(huge, 3)}),
        ("settled", p.PATH_HELLO, {**hello(), "origin": "DEV1:abcdefghij", "settled": huge}),
        ("uid stamp", p.PATH_PUT, put(u="DEV1." + "9" * 5000)),
        ("uid stamp bignum", p.PATH_PUT, put(u=huge)),
        ("field i", p.PATH_PUT, put(f={"n": ["i", huge]})),
        ("field l", p.PATH_PUT, put(f={"n": ["l", -huge]})),
        ("field f", p.PATH_PUT, put(f={"n": ["f", huge]})),
        ("field f decimal", p.PATH_PUT, put(f={"n": ["f", Decimal("-1e5000")]})),
        ("expiry x", p.PATH_PUT, put(x=huge)),
    ]
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with edgeq_serve(home, port) as lines, httpx.Client(timeout=10) as http:
        assert post(http, url, p.PATH_HELLO, hello())[0] == 200
        answers = {what: post(http, url, path, body) for what, path, body in bodies}
    statuses = {what: status for what, (status, _) in answers.items()}
    assert all(400 <= status < 500 for status in statuses.values()), statuses
    assert all(body["detail"] and len(body["detail"]) < 1_000 for _, body in answers.values())
    assert not [e for e in events(lines) if e["event"] == "internal-error"]
    assert stored(home) == (0, 0)


# -- defect 4: a client hanging up mid-body was an internal error ------------------------------------


def test_a_client_hanging_up_mid_body_is_counted_as_a_disconnect(tmp_path: Path) -> None:
    home = home_store(tmp_path)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    raw = p.encode_body(put())
    with edgeq_serve(home, port) as lines, httpx.Client(timeout=10) as http:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(f"POST {p.PATH_PUT} HTTP/1.1\r\nHost: home\r\nContent-Type: {p.CONTENT_TYPE}\r\n"
                         f"Content-Length: {len(raw) + 10_000}\r\n\r\n".encode() + raw)
        counted, deadline = "", time.monotonic() + 10
        while not counted and time.monotonic() < deadline:  # it notices the hang-up asynchronously
            text = http.get(url + "/metrics").text
            counted = "\n".join(line for line in text.splitlines()
                                if line.startswith(f'edgeq_sync_requests_total{{endpoint="{p.PATH_PUT}"'))
        assert counted == f'edgeq_sync_requests_total{{endpoint="{p.PATH_PUT}",status="disconnected"}} 1'
    logged = events(lines)
    assert not [e for e in logged
                if e["event"] in ("internal-error", "request-error") or e["level"] == "error"]
    assert ([(e["level"], e["path"]) for e in logged if e["event"] == "client-disconnect"]
            == [("info", p.PATH_PUT)])
    assert stored(home) == (0, 0)

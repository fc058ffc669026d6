"""What a hostile peer could make the home server (or a device) spend, second pass (issue 29,
defects 1-5): a 54-byte body decoded into a million items, a flood of wrong console logins,
a signed-out session that still worked, a console without security headers, a body read
whole before its missing signature was noticed, a device's unbounded answers, remembered
refusals and admin lease.

Real ``edgeq serve`` processes over loopback where the server's process is what is
tested; a real server (or console) in this process (``make_server``, ``make_console``) where
a part of it is watched.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from starlette.types import Receive, Scope, Send

from edgeq import ManualClock, QueueManager
from edgeq.clock import system_clock
from edgeq.encoding.cbor import MalformedBody, count_items, loads
from edgeq.encoding.compression import compress
from edgeq.sync import protocol as p
from edgeq.sync.agent.transport import Transport, Unreachable
from edgeq.sync.framing import H_ENCODING, MAX_ANSWER_BYTES
from edgeq.sync.keys import new_key_pair
from edgeq.sync.server.console import auth as consoleauth
from edgeq.sync.server.console.auth import set_password
from edgeq.sync.server.console.login import GLOBAL_BURST, GLOBAL_PER_S
from tests.sync.conftest import LiveServer, _Server, edgeq_serve, edgeq_serve_console, free_port
from tests.sync.test_hostile import PROBE_TIMEOUT_S, home_store, post, signed, stored

#: The items of the bomb: under the old limit of 1,000,000 items a body.
BOMB_ITEMS = 999_990


def array_of_empty_arrays(items: int = BOMB_ITEMS) -> bytes:
    """A CBOR array of ``items`` empty arrays: one byte an item, ~1 MB."""
    return b"\x9a" + items.to_bytes(4, "big") + b"\x80" * items


def nested_arrays(outer: int, inner: int, item: bytes = b"\x80") -> bytes:
    """``outer`` arrays of ``inner`` items (empty arrays) each: every array within a batch's length."""
    return b"\x99" + outer.to_bytes(2, "big") + (b"\x99" + inner.to_bytes(2, "big") + item * inner) * outer


# -- defect 1: a 54-byte body that decoded to a million items ----------------------------------------


def test_a_body_announcing_a_million_items_is_refused_at_its_header(tmp_path: Path) -> None:
    """A zstd frame of 54 bytes decompressing to an array of 999,990 empty arrays (under the
    old 1,000,000-item limit) was decoded in full, half a second of the GIL, before it was
    refused as "not a map"; so was its plain 1 MB form. Both are refused now from the walk of
    their headers, before cbor2 builds anything (its detail says so), on an open server and
    from a signed device alike, and so are a million zeros in arrays each within a batch,
    and 160,000 empty arrays (within the item bound, but each a Python object to build)."""
    home = home_store(tmp_path)
    pair = new_key_pair(tmp_path / "dev1.key")
    bomb = compress("zstd", array_of_empty_arrays())
    assert len(bomb) < 64
    spread = compress("zstd", nested_arrays(200, 5_000, b"\x00"))  # a million zeros
    dense = compress("zstd", nested_arrays(32, 5_000))  # 160,098 bytes: within the item bound
    assert len(dense) < 64
    zstd = {H_ENCODING: "zstd"}
    open_port = free_port()
    with edgeq_serve(home, open_port, "--no-auth"), httpx.Client(timeout=60) as http:
        url = f"http://127.0.0.1:{open_port}"
        answers = [post(http, url, p.PATH_PUT, bomb, zstd),
                   post(http, url, p.PATH_PUT, array_of_empty_arrays()),
                   post(http, url, p.PATH_PUT, spread, zstd), post(http, url, p.PATH_PUT, dense, zstd)]
    with QueueManager(home) as qm:
        qm.register_device("DEV1", pair.public_key)
    signed_port = free_port()
    with edgeq_serve(home, signed_port), httpx.Client(timeout=60) as http:
        url = f"http://127.0.0.1:{signed_port}"
        answers.append(post(http, url, p.PATH_PUT, bomb, {**zstd, **signed(pair, p.PATH_PUT, bomb)}))
    assert [(status, body["code"]) for status, body in answers] == [(400, "malformed")] * 5
    details = [body["detail"] for _, body in answers]
    smaller = "send smaller batches (fewer messages, or fewer fields a message)"
    header = ("body holds an array of 999990 entries, more than 5000 (this end's limit): "
              f"refused before decoding; {smaller}")
    assert details == [header, header, "body holds more than 161024 CBOR items",
                       f"body holds more than 41024 CBOR arrays and maps: {smaller}", header]
    assert stored(home) == (0, 0)


@pytest.mark.parametrize("header", [b"\x9a\x00\x0f\x42\x36", b"\xba\x00\x0f\x42\x36"],  # 999,990
                         ids=["array", "map"])
def test_a_container_longer_than_a_batch_is_refused_by_the_walk_at_its_header(header: bytes) -> None:
    """The walk (of a body longer than the item bound) refuses an array or map announcing
    more entries than ``max_length`` at its header, before reading what follows."""
    limits = p.body_limits(5_000)
    what = "an array" if header[0] == 0x9A else "a map"
    with pytest.raises(MalformedBody, match=rf"^body holds {what} of 999990 entries, more than 5000 "):
        loads(header + bytes(limits.max_items), limits)
    with pytest.raises(MalformedBody, match=r"^body holds an array of 5001 entries"):
        count_items(b"\x99\x13\x89" + b"\x80" * 5_001, limits)
    assert count_items(b"\x99\x13\x88" + b"\x80" * 5_000, limits) == 5_001


# -- defect 2: a flood of wrong console logins --------------------------------------------------------

PASSWORD = "operator-pass-1"
#: How long the first password check holds on, waiting for a second one to start beside it
#: (which it did, before, with nothing bounding them): bounded, so a bound check goes on.
HOLD_S = 2.0


class Checks:
    """Every password check (scrypt) the console runs, the real one inside: how many, and
    the most at once. With ``hold``, the first waits (bounded) for a second to begin."""

    def __init__(self, real: Callable[..., bytes], *, hold: bool) -> None:
        self.real = real
        self.hold = hold
        self.calls = self.running = self.peak = 0
        self._lock = threading.Lock()
        self._second = threading.Event()

    def __call__(self, *args: Any) -> bytes:
        with self._lock:
            self.calls += 1
            first = self.calls == 1
            self.running += 1
            self.peak = max(self.peak, self.running)
            if self.calls == 2:
                self._second.set()
        try:
            if first and self.hold:
                self._second.wait(HOLD_S)
            return self.real(*args)
        finally:
            with self._lock:
                self.running -= 1


def watch_checks(monkeypatch: pytest.MonkeyPatch, *, hold: bool = False) -> Checks:
    checks = Checks(consoleauth._hash, hold=hold)
    monkeypatch.setattr(consoleauth, "_hash", checks)
    return checks


@pytest.fixture
def console(home_qm: QueueManager, make_console: Callable[..., LiveServer]) -> LiveServer:
    set_password(home_qm.path, PASSWORD)
    return make_console(home_qm)


@pytest.fixture
def clients(console: LiveServer) -> Iterator[Callable[[str], httpx.Client]]:
    """Console clients, each from the loopback address it is given (127.0.0.0/8 is all local)."""
    made: list[httpx.Client] = []

    def client(host: str = "127.0.0.1") -> httpx.Client:
        made.append(httpx.Client(base_url=console.url, timeout=30, follow_redirects=False,
                                 transport=httpx.HTTPTransport(local_address=host)))
        return made[-1]

    yield client
    for c in made:
        c.close()


def sign_in(client: httpx.Client, password: str) -> httpx.Response:
    return client.post("/console/login", data={"user": "operator", "password": password})


def test_a_login_flood_runs_one_password_check_at_a_time(
    clients: Callable[[str], httpx.Client], monkeypatch: pytest.MonkeyPatch
) -> None:
    """16 wrong logins at once from 16 addresses: each check takes ~16 MiB, and they all ran
    at once. One runs at a time now (the first held until the test's bound: no second one
    starts beside it), and each is still answered."""
    checks = watch_checks(monkeypatch, hold=True)
    flood = [clients(f"127.0.0.{10 + i}") for i in range(16)]
    with ThreadPoolExecutor(len(flood)) as pool:
        answers = list(pool.map(lambda c: sign_in(c, "not-the-password").status_code, flood))
    assert answers == [403] * 16
    assert (checks.calls, checks.peak) == (16, 1)


def test_repeated_wrong_passwords_from_one_address_wait_longer_each_time(
    clients: Callable[[str], httpx.Client], server_clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An address that sent a wrong password is answered 429 (Retry-After, no check run,
    nothing slept) until its delay is over: 1 s, then 2 s, ...; another address is not
    slowed; a right password forgets the address's count."""
    checks = watch_checks(monkeypatch)
    guesser, other = clients("127.0.0.1"), clients("127.0.0.2")
    assert sign_in(guesser, "wrong-1").status_code == 403
    waits = sign_in(guesser, "wrong-2")
    assert (waits.status_code, waits.headers["retry-after"]) == (429, "1")
    assert "Too many wrong passwords from 127.0.0.1: try again in 1 s." in waits.text
    assert sign_in(guesser, PASSWORD).status_code == 429  # the right one waits its turn too
    assert checks.calls == 1
    assert sign_in(other, "wrong").status_code == 403 and checks.calls == 2
    server_clock.advance(1_000)
    assert sign_in(guesser, "wrong-3").status_code == 403
    assert sign_in(guesser, "wrong-4").headers["retry-after"] == "2"
    server_clock.advance(2_000)
    assert sign_in(guesser, PASSWORD).status_code == 303
    assert sign_in(guesser, "wrong-5").status_code == 403
    assert sign_in(guesser, "wrong-6").headers["retry-after"] == "1"
    assert checks.calls == 5


def test_a_flood_from_many_addresses_is_checked_at_a_bounded_rate(
    clients: Callable[[str], httpx.Client], server_clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each address guessing once escapes the per-address delay: after a burst of wrong
    passwords from all of them together, every address waits (429, no check) until the
    budget refills at GLOBAL_PER_S a second; a right password is checked again then."""
    checks = watch_checks(monkeypatch)
    for i in range(GLOBAL_BURST):
        assert sign_in(clients(f"127.0.1.{i + 1}"), "wrong").status_code == 403
    refused = sign_in(clients("127.0.2.1"), PASSWORD)
    assert (refused.status_code, refused.headers["retry-after"]) == (429, "1")
    assert "Too many wrong passwords lately, from many addresses" in refused.text
    assert checks.calls == GLOBAL_BURST
    server_clock.advance(1_000 // GLOBAL_PER_S)
    assert sign_in(clients("127.0.2.1"), PASSWORD).status_code == 303
    assert checks.calls == GLOBAL_BURST + 1


# -- defect 3: sign-out revokes the session ------------------------------------------------------------


def csrf_of(page: str) -> str:
    return page.split('name="csrf" value="')[1].split('"')[0]


def test_a_signed_out_session_is_refused_even_with_a_copy_of_its_cookie(
    clients: Callable[[str], httpx.Client]
) -> None:
    operator, thief = clients("127.0.0.1"), clients("127.0.0.3")
    assert sign_in(operator, PASSWORD).status_code == 303
    copy = operator.cookies["edgeq_console"]
    thief.cookies.set("edgeq_console", copy, path="/console")
    assert thief.get("/console").status_code == 200
    token = csrf_of(operator.get("/console").text)
    assert operator.post("/console/logout", data={"csrf": token}).status_code == 303
    page = thief.get("/console")
    assert (page.status_code, page.headers["location"]) == (303, "/console/login")  # it was 200 for 12 hours
    assert sign_in(operator, PASSWORD).status_code == 303 and operator.get("/console").status_code == 200


# -- defect 4: the console's security headers -----------------------------------------------------------


def test_every_console_answer_carries_the_security_headers(clients: Callable[[str], httpx.Client]) -> None:
    """A strict CSP (no script; the pages' one inline style by its hash), no framing, no
    sniffing, no caching: on the form, a refusal, a redirect, the signed-in page, sign-out,
    a path that is no page."""
    client = clients("127.0.0.1")
    answers = [client.get("/console"), client.get("/console/login"), sign_in(client, "wrong"),
               sign_in(client, "wrong"), client.post("/console/logout", data={"csrf": "forged"}),
               client.get("/console/nothing-here")]
    client = clients("127.0.0.4")
    answers += [sign_in(client, PASSWORD), page := client.get("/console"),
                client.post("/console/logout", data={"csrf": csrf_of(page.text)})]
    assert [a.status_code for a in answers] == [303, 200, 403, 429, 403, 404, 303, 200, 303]
    style = page.text.split("<style>", 1)[1].split("</style>", 1)[0]
    digest = base64.b64encode(hashlib.sha256(style.encode()).digest()).decode()
    for answer in answers:
        policy = answer.headers.get("content-security-policy", "")
        assert "default-src 'none'" in policy and "frame-ancestors 'none'" in policy, answer
        assert f"style-src 'sha256-{digest}'" in policy and "unsafe" not in policy and "script" not in policy
        assert answer.headers.get("x-frame-options") == "DENY"
        assert answer.headers.get("x-content-type-options") == "nosniff"
        assert answer.headers.get("cache-control") == "no-store"


# -- defect 5: smaller costs -----------------------------------------------------------------------------


def test_a_request_without_signature_headers_is_refused_before_its_body_is_read(tmp_path: Path) -> None:
    """The server read a body of up to 16 MiB before it noticed the request was not signed
    at all. Here the body never comes: only an answer from the headers alone can come back."""
    home = home_store(tmp_path)
    with QueueManager(home) as qm:
        qm.register_device("DEV1", new_key_pair(tmp_path / "dev1.key").public_key)
    port = free_port()
    with edgeq_serve(home, port), socket.create_connection(("127.0.0.1", port),
                                                           timeout=PROBE_TIMEOUT_S * 3) as sock:
        sock.sendall(f"POST {p.PATH_PUT} HTTP/1.1\r\nHost: home\r\nContent-Type: {p.CONTENT_TYPE}\r\n"
                     f"Content-Length: {16 * 1024 * 1024 - 1}\r\n\r\n".encode())
        answer = b""
        while b"takes only signed requests" not in answer:  # a timeout (no answer without the body) fails
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 401 ") and b"takes only signed requests" in answer
    assert stored(home) == (0, 0)


class InflatingServer:
    """A hostile (or broken) home server: every answer a zstd frame of ``size`` zero bytes."""

    def __init__(self, size: int) -> None:
        self.body = compress("zstd", bytes(size))
        self.port = free_port()
        ready = threading.Event()
        config = uvicorn.Config(self, host="127.0.0.1", port=self.port, log_config=None, lifespan="off")
        self.server = _Server(config, ready)
        self.thread = threading.Thread(target=lambda: asyncio.run(self.server.serve()), daemon=True)
        self.thread.start()
        assert ready.wait(10)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        while (await receive()).get("more_body"):
            pass
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", p.CONTENT_TYPE.encode()),
                                (H_ENCODING.lower().encode(), b"zstd")]})
        await send({"type": "http.response.body", "body": self.body})

    def stop(self) -> None:
        self.server.exit()
        self.thread.join(10)


def test_a_device_refuses_an_answer_that_would_inflate_past_its_bound() -> None:
    """A device decompressed an answer up to 1 GiB; 64 MiB is its bound now, refused from the
    frame's declared size before the memory is spent."""
    bound = 64 << 20
    server = InflatingServer(bound + 1)
    try:
        transport = Transport(f"http://127.0.0.1:{server.port}")
        with pytest.raises(Unreachable) as refused:
            transport.call(p.PATH_HELLO, {"type": "hello", "qmgr": "DEV1"}, "hello")
        transport.close()
    finally:
        server.stop()
    said = str(refused.value)
    assert f"declares {bound + 1} bytes decompressed, more than {bound}, this end's limit" in said
    assert bound == MAX_ANSWER_BYTES


# -- the login flood and devices: the console in a process of its own -----------------------------------


def test_devices_are_answered_while_a_login_flood_waits_on_a_stopped_console(tmp_path: Path) -> None:
    """The console ran in the device server's process: 80 wrong logins sent devices' hellos to
    seconds. Now it is a process of its own on its own port: stopped (SIGSTOP) with a flood of
    logins waiting on it, not one answered, the device port answers hellos all the same; let
    go (SIGCONT), the console answers every login."""
    home = home_store(tmp_path)
    set_password(home, PASSWORD)
    with edgeq_serve_console(home) as served:
        host, port = served.console_url.removeprefix("http://").split(":")
        os.kill(served.console_pid, signal.SIGSTOP)
        try:
            flood = [socket.create_connection((host, int(port)), timeout=PROBE_TIMEOUT_S * 3)
                     for _ in range(40)]
            for i, sock in enumerate(flood):  # each request whole in the console's socket, unread
                form = f"user=operator&password=guess-{i}".encode()
                sock.sendall(b"POST /console/login HTTP/1.1\r\nHost: console\r\nConnection: close\r\n"
                             b"Content-Type: application/x-www-form-urlencoded\r\n"
                             b"Content-Length: %d\r\n\r\n%s" % (len(form), form))
            with httpx.Client(timeout=PROBE_TIMEOUT_S) as http:
                hellos = [post(http, served.url, p.PATH_HELLO, {"type": "hello", "qmgr": "DEV1",
                                                               "now_ms": system_clock()}) for _ in range(20)]
                assert [status for status, _ in hellos] == [200] * 20
                assert http.get(served.url + "/healthz").status_code == 200
            for sock in flood:  # nothing came back from the stopped console meanwhile
                sock.setblocking(False)
                with pytest.raises(BlockingIOError):
                    sock.recv(1)
                sock.settimeout(PROBE_TIMEOUT_S * 3)
        finally:
            os.kill(served.console_pid, signal.SIGCONT)
        answers = []
        for sock in flood:
            with sock:
                answers.append(b"".join(iter(lambda s=sock: s.recv(65536), b"")).split(b" ", 2)[1])
    assert set(answers) <= {b"403", b"429"} and len(answers) == 40 and b"403" in answers

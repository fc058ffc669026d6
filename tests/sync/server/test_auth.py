"""Signed sync against a real home server: every attack is refused and stores nothing.

Each attack is a raw HTTP request (httpx) to a uvicorn server in a thread, built
with the same signing code the agent uses and then broken in one way; after it
the server's queues (depth counts locked messages too), its journal and its
metrics are as before.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import cbor2
import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from edgeq import ManualClock, Message, QueueManager
from edgeq.clock import system_clock
from edgeq.errors import InvalidArgument
from edgeq.sync import protocol as p
from edgeq.sync.agent.agent import SyncAgent
from edgeq.sync.agent.signer import DeviceSigner
from edgeq.sync.keys import load_private_key, new_key_pair, public_bytes
from edgeq.sync.server.auth import AuthGate, AuthRequest, SignatureAuthenticator, Unauthorized
from edgeq.sync.server.nonces import MemoryNonces, SqliteNonces
from edgeq.sync.signing import H_NONCE, H_SIGNATURE, H_TIMESTAMP, sign_headers
from tests.sync.conftest import T0, LiveServer, edgeq_serve, free_port

CBOR = {"content-type": p.CONTENT_TYPE}
EDGEQ = [sys.executable, "-m", "edgeq"]
SKEW_MS = 300_000


@pytest.fixture
def keys() -> dict[str, Ed25519PrivateKey]:
    return {name: Ed25519PrivateKey.generate() for name in ("DEV1", "DEV2", "EVE")}


@pytest.fixture
def home(
    tmp_path: Path, server_clock: ManualClock, keys: dict[str, Ed25519PrivateKey]
) -> Iterator[QueueManager]:
    qm = QueueManager(tmp_path / "home.db", name="HOME", clock=server_clock, journal="server")
    for queue in ("ORDERS", "AUDIT", "DEV1.INBOX", "DEV2.INBOX"):
        qm.define_queue(queue)
    qm.register_device("DEV1", public_bytes(keys["DEV1"]), queues=["ORDERS"])
    qm.register_device("DEV2", public_bytes(keys["DEV2"]))
    yield qm
    qm.close()


@pytest.fixture
def nonces() -> Iterator[MemoryNonces]:
    store = MemoryNonces()
    yield store
    store.close()


@pytest.fixture
def secure(home: QueueManager, nonces: MemoryNonces, server_clock: ManualClock,
           make_server: Callable[..., LiveServer]) -> LiveServer:
    auth = SignatureAuthenticator(home, nonces, skew_ms=SKEW_MS, clock=server_clock)
    return make_server(home, authenticate=auth)


def hello(device: str = "DEV1") -> dict[str, Any]:
    return {"type": "hello", "qmgr": device, "now_ms": T0, "agent": "attacker"}


def put(
    device: str = "DEV1", queue: str = "ORDERS", origin: str | None = None, stamp: int = 1
) -> dict[str, Any]:
    uid = f"{origin or device}.{T0 * 1000 + stamp}"
    return {"type": "put", "qmgr": device, "now_ms": T0, "queue": queue,
            "messages": [{"u": uid, "d": b"evil"}]}


def send(http: httpx.Client, server: LiveServer, path: str, body: dict[str, Any] | bytes,
         headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    raw = body if isinstance(body, bytes) else p.encode_body(body)
    response = http.post(server.url + path, content=raw, headers={**CBOR, **(headers or {})})
    return response.status_code, cbor2.loads(response.content)


def signed(key: Ed25519PrivateKey, device: str, path: str, body: dict[str, Any], *, now_ms: int = T0,
           method: str = "POST") -> tuple[bytes, dict[str, str]]:
    raw = p.encode_body(body)
    return raw, sign_headers(key, device, method, path, raw, now_ms)


class Snapshot:
    """What an attack must not change on the server."""

    def __init__(self, qm: QueueManager, server: LiveServer) -> None:
        self.qm, self.server = qm, server
        self.state = self._take()

    def _take(self) -> tuple[Any, ...]:
        depths = tuple(self.qm.depth(q) for q in self.qm.queue_names())
        journal = [(e.kind, e.uid) for e in self.qm.journal_since(0)]
        counters = [line for line in self.server.metrics.render().splitlines()
                    if line.startswith("edgeq_sync_messages_")]
        return depths, journal, counters

    def unchanged(self) -> bool:
        return self._take() == self.state


@pytest.fixture
def snapshot(home: QueueManager, secure: LiveServer) -> Callable[[], Snapshot]:
    return lambda: Snapshot(home, secure)


def refused(result: tuple[int, dict[str, Any]], status: int, words: str) -> None:
    code, body = result
    assert code == status, body
    assert body["code"] == ("unauthorized" if status == 401 else "forbidden")
    assert words in body["detail"], body["detail"]


# -- the happy path ----------------------------------------------------------------------------


def test_signed_agent_pushes_and_pulls(
    secure: LiveServer, home: QueueManager, device_qm: QueueManager, device_clock: ManualClock,
    keys: dict[str, Ed25519PrivateKey], make_agent: Callable[..., SyncAgent],
) -> None:
    device_qm.put_many("ORDERS", [Message(b"m%d" % i) for i in range(120)])
    device_qm.define_home_server_queue("INBOX", server="HOME")
    home.put("DEV1.INBOX", Message(b"for DEV1"))
    home.put("DEV2.INBOX", Message(b"for DEV2"))
    agent = make_agent(device_qm, secure.url, batch_size=50,
                       auth=DeviceSigner("DEV1", keys["DEV1"], clock=device_clock))

    pushed, pulled = agent.push_once(), agent.pull_once()

    assert pushed.error is None and pushed.transmitted == 120
    assert home.depth("ORDERS") == 120
    assert pulled.error is None and pulled.received == 1
    assert [m.data for m in device_qm.browse("INBOX")] == [b"for DEV1"]
    assert home.depth("DEV2.INBOX") == 1


def test_unsigned_agent_is_refused_with_a_clear_error(
    secure: LiveServer, home: QueueManager, device_qm: QueueManager, make_agent: Callable[..., SyncAgent],
) -> None:
    device_qm.put("ORDERS", Message(b"x"))
    report = make_agent(device_qm, secure.url).push_once()
    assert (report.error is not None and "401 unauthorized" in report.error
            and "X-Edgeq-Signature" in report.error)
    assert home.depth("ORDERS") == 0 and device_qm.depth("ORDERS") == 1


# -- authentication attacks ----------------------------------------------------------------------


def test_missing_signature(http: httpx.Client, secure: LiveServer, snapshot: Callable[[], Snapshot]) -> None:
    before = snapshot()
    refused(send(http, secure, p.PATH_PUT, put()), 401, "missing X-Edgeq-Device")
    raw, headers = signed(Ed25519PrivateKey.generate(), "DEV1", p.PATH_PUT, put())
    del headers[H_SIGNATURE]
    refused(send(http, secure, p.PATH_PUT, raw, headers), 401, "missing X-Edgeq-Signature")
    assert before.unchanged()


def test_signature_by_another_key(
    http: httpx.Client, secure: LiveServer, snapshot: Callable[[], Snapshot],
    keys: dict[str, Ed25519PrivateKey]
) -> None:
    before = snapshot()
    raw, headers = signed(keys["EVE"], "DEV1", p.PATH_PUT, put())
    refused(send(http, secure, p.PATH_PUT, raw, headers), 401, "bad signature for device DEV1")
    assert before.unchanged()


@pytest.mark.parametrize("tamper", ["body", "path", "timestamp", "nonce", "garbage", "short"])
def test_tampered_request(
    tamper: str, http: httpx.Client, secure: LiveServer, snapshot: Callable[[], Snapshot],
    keys: dict[str, Ed25519PrivateKey],
) -> None:
    before = snapshot()
    raw, headers = signed(keys["DEV1"], "DEV1", p.PATH_CONFIRM if tamper == "path" else p.PATH_PUT, put())
    if tamper == "body":
        raw = p.encode_body(put(stamp=2))
    elif tamper == "timestamp":
        headers[H_TIMESTAMP] = str(T0 + 1)
    elif tamper == "nonce":
        headers[H_NONCE] = "f" * 32
    elif tamper == "garbage":
        headers[H_SIGNATURE] = "not base64!"
    elif tamper == "short":
        headers[H_SIGNATURE] = "AAAA"
    words = {"garbage": "not base64", "short": "3 bytes"}.get(tamper, "bad signature")
    refused(send(http, secure, p.PATH_PUT, raw, headers), 401, words)
    assert before.unchanged()


def test_unknown_device(
    http: httpx.Client, secure: LiveServer, snapshot: Callable[[], Snapshot],
    keys: dict[str, Ed25519PrivateKey]
) -> None:
    before = snapshot()
    raw, headers = signed(keys["EVE"], "EVE", p.PATH_PUT, put("EVE"))
    refused(send(http, secure, p.PATH_PUT, raw, headers), 401, "unknown device EVE")
    assert before.unchanged()


def test_revoked_device(
    http: httpx.Client, secure: LiveServer, home: QueueManager, snapshot: Callable[[], Snapshot],
    keys: dict[str, Ed25519PrivateKey],
) -> None:
    raw, headers = signed(keys["DEV1"], "DEV1", p.PATH_HELLO, hello())
    assert send(http, secure, p.PATH_HELLO, raw, headers)[0] == 200
    home.revoke_device("DEV1")
    before = snapshot()
    raw, headers = signed(keys["DEV1"], "DEV1", p.PATH_PUT, put())
    refused(send(http, secure, p.PATH_PUT, raw, headers), 401, "device DEV1 is revoked")
    assert before.unchanged()
    home.register_device("DEV1", public_bytes(keys["DEV1"]))  # re-adding restores it
    raw, headers = signed(keys["DEV1"], "DEV1", p.PATH_PUT, put())
    assert send(http, secure, p.PATH_PUT, raw, headers)[0] == 200


@pytest.mark.parametrize("offset_ms", [-SKEW_MS - 1, SKEW_MS + 1, -10 * 86_400_000])
def test_timestamp_outside_the_skew(
    offset_ms: int, http: httpx.Client, secure: LiveServer, snapshot: Callable[[], Snapshot],
    keys: dict[str, Ed25519PrivateKey],
) -> None:
    before = snapshot()
    raw, headers = signed(keys["DEV1"], "DEV1", p.PATH_PUT, put(), now_ms=T0 + offset_ms)
    refused(send(http, secure, p.PATH_PUT, raw, headers), 401, "off the server clock (allowed ±300 s)")
    assert before.unchanged()


def test_timestamp_at_the_edge_of_the_skew_is_accepted(
    http: httpx.Client, secure: LiveServer, keys: dict[str, Ed25519PrivateKey]
) -> None:
    for offset in (-SKEW_MS, SKEW_MS):
        raw, headers = signed(keys["DEV1"], "DEV1", p.PATH_HELLO, hello(), now_ms=T0 + offset)
        assert send(http, secure, p.PATH_HELLO, raw, headers)[0] == 200


def test_replayed_request(
    http: httpx.Client, secure: LiveServer, home: QueueManager, keys: dict[str, Ed25519PrivateKey],
    server_clock: ManualClock,
) -> None:
    hello_raw, hello_headers = signed(keys["DEV1"], "DEV1", p.PATH_HELLO, hello())
    assert send(http, secure, p.PATH_HELLO, hello_raw, hello_headers)[0] == 200
    raw, headers = signed(keys["DEV1"], "DEV1", p.PATH_PUT, put())
    status, body = send(http, secure, p.PATH_PUT, raw, headers)
    assert status == 200 and body["results"][0]["s"] == "stored"
    home.confirm_put_each("ORDERS", [body["results"][0]["u"]])
    home.get("ORDERS")  # consumed: a replayed put must not bring it back
    before = Snapshot(home, secure)
    refused(send(http, secure, p.PATH_PUT, raw, headers), 401, "replayed request")
    server_clock.advance(SKEW_MS)  # still inside the window
    refused(send(http, secure, p.PATH_PUT, raw, headers), 401, "replayed request")
    server_clock.advance(1)  # beyond it the timestamp refuses it
    refused(send(http, secure, p.PATH_PUT, raw, headers), 401, "off the server clock")
    assert before.unchanged()


def test_replay_fails_across_a_server_restart(
    tmp_path: Path, http: httpx.Client, home: QueueManager, server_clock: ManualClock,
    keys: dict[str, Ed25519PrivateKey], make_server: Callable[..., LiveServer],
) -> None:
    raw, headers = signed(keys["DEV1"], "DEV1", p.PATH_HELLO, hello())
    nonce_db = tmp_path / "home.db.nonces"
    first = SqliteNonces(nonce_db)
    try:
        server = make_server(home, authenticate=SignatureAuthenticator(home, first, clock=server_clock))
        assert send(http, server, p.PATH_HELLO, raw, headers)[0] == 200
        server.stop()
    finally:
        first.close()
    second = SqliteNonces(nonce_db)
    try:
        restarted = make_server(home, authenticate=SignatureAuthenticator(home, second, clock=server_clock))
        refused(send(http, restarted, p.PATH_HELLO, raw, headers), 401, "replayed request")
        fresh_raw, fresh_headers = signed(keys["DEV1"], "DEV1", p.PATH_HELLO, hello())
        assert send(http, restarted, p.PATH_HELLO, fresh_raw, fresh_headers)[0] == 200
    finally:
        restarted.stop()
        second.close()


def test_nonce_store_full_fails_closed_with_busy(
    http: httpx.Client, home: QueueManager, server_clock: ManualClock, keys: dict[str, Ed25519PrivateKey],
    make_server: Callable[..., LiveServer],
) -> None:
    tiny = MemoryNonces(max_entries=1)
    server = make_server(home, authenticate=SignatureAuthenticator(home, tiny, clock=server_clock))
    raw, headers = signed(keys["DEV1"], "DEV1", p.PATH_HELLO, hello())
    assert send(http, server, p.PATH_HELLO, raw, headers)[0] == 200
    raw, headers = signed(keys["DEV1"], "DEV1", p.PATH_HELLO, hello())
    status, body = send(http, server, p.PATH_HELLO, raw, headers)
    assert (status, body["code"]) == (503, "busy")
    server_clock.advance(SKEW_MS + 1)  # the first nonce ages out
    raw, headers = signed(keys["DEV1"], "DEV1", p.PATH_HELLO, {**hello(), "now_ms": server_clock()},
                          now_ms=server_clock())
    assert send(http, server, p.PATH_HELLO, raw, headers)[0] == 200


def test_device_names_with_a_dot_are_refused(
    http: httpx.Client, secure: LiveServer, home: QueueManager, keys: dict[str, Ed25519PrivateKey]
) -> None:
    # "DEV1.X" pulling queue "INBOX" would read DEV1's queue X.INBOX's neighbour DEV1.X.INBOX
    with pytest.raises(InvalidArgument, match="must not contain"):
        home.register_device("DEV1.X", public_bytes(keys["EVE"]))
    # The server refuses one anyway, e.g. planted in the store by hand: defence in depth.
    conn = sqlite3.connect(home.path)
    conn.execute("INSERT INTO devices (name, added_ms, public_key) VALUES (?, 0, ?)",
                 ("DEV1.X", public_bytes(keys["EVE"])))
    conn.commit()
    conn.close()
    raw, headers = signed(keys["EVE"], "DEV1.X", p.PATH_HELLO, hello("DEV1.X"))
    refused(send(http, secure, p.PATH_HELLO, raw, headers), 401, "has a '.'")


# -- authorisation --------------------------------------------------------------------------------


def _hello(http: httpx.Client, server: LiveServer, key: Ed25519PrivateKey, device: str) -> None:
    raw, headers = signed(key, device, p.PATH_HELLO, hello(device))
    assert send(http, server, p.PATH_HELLO, raw, headers)[0] == 200


def test_device_speaks_only_for_itself(
    http: httpx.Client, secure: LiveServer, snapshot: Callable[[], Snapshot],
    keys: dict[str, Ed25519PrivateKey]
) -> None:
    _hello(http, secure, keys["DEV2"], "DEV2")
    before = snapshot()
    raw, headers = signed(keys["DEV1"], "DEV1", p.PATH_PUT, put("DEV2"))
    refused(send(http, secure, p.PATH_PUT, raw, headers), 403, "signed by DEV1 but sent as qmgr 'DEV2'")
    assert before.unchanged()


def test_device_pushes_only_its_own_messages(
    http: httpx.Client, secure: LiveServer, snapshot: Callable[[], Snapshot],
    keys: dict[str, Ed25519PrivateKey]
) -> None:
    _hello(http, secure, keys["DEV1"], "DEV1")
    before = snapshot()
    raw, headers = signed(keys["DEV1"], "DEV1", p.PATH_PUT, put(origin="DEV2"))
    refused(send(http, secure, p.PATH_PUT, raw, headers), 403, "its own messages")
    body = put()
    body["messages"].append({"u": f"DEV2.{T0 * 1000 + 9}", "d": b"smuggled"})
    raw, headers = signed(keys["DEV1"], "DEV1", p.PATH_PUT, body)
    refused(send(http, secure, p.PATH_PUT, raw, headers), 403, "DEV2.")
    assert before.unchanged()


def test_device_pushes_only_to_its_allowed_queues(
    http: httpx.Client, secure: LiveServer, snapshot: Callable[[], Snapshot],
    keys: dict[str, Ed25519PrivateKey]
) -> None:
    _hello(http, secure, keys["DEV1"], "DEV1")
    before = snapshot()
    for queue in ("AUDIT", "DEV2.INBOX"):
        raw, headers = signed(keys["DEV1"], "DEV1", p.PATH_PUT, put(queue=queue))
        refused(send(http, secure, p.PATH_PUT, raw, headers), 403, f"may not push to queue {queue}")
    assert before.unchanged()
    _hello(http, secure, keys["DEV2"], "DEV2")  # DEV2 may push anywhere
    raw, headers = signed(keys["DEV2"], "DEV2", p.PATH_PUT, put("DEV2", queue="AUDIT"))
    assert send(http, secure, p.PATH_PUT, raw, headers)[0] == 200


def test_admin_replies_may_be_pushed_and_admin_requests_never(
    http: httpx.Client, secure: LiveServer, home: QueueManager, snapshot: Callable[[], Snapshot],
    keys: dict[str, Ed25519PrivateKey],
) -> None:
    home.define_queue("SYSTEM.ADMIN.REPLY")
    _hello(http, secure, keys["DEV1"], "DEV1")  # DEV1 may push to ORDERS only, and its admin replies
    raw, headers = signed(keys["DEV1"], "DEV1", p.PATH_PUT, put(queue="SYSTEM.ADMIN.REPLY"))
    status, body = send(http, secure, p.PATH_PUT, raw, headers)
    assert status == 200 and body["results"][0]["s"] == "stored"
    _hello(http, secure, keys["DEV2"], "DEV2")  # DEV2 may push anywhere, but not where requests wait
    home.define_queue("DEV1.SYSTEM.ADMIN")
    before = snapshot()
    for queue in ("DEV1.SYSTEM.ADMIN", "DEV2.SYSTEM.ADMIN"):
        raw, headers = signed(keys["DEV2"], "DEV2", p.PATH_PUT, put("DEV2", queue=queue, stamp=2))
        refused(send(http, secure, p.PATH_PUT, raw, headers), 403, f"may not push to {queue}")
    assert before.unchanged()


def test_device_cannot_confirm_another_devices_put(
    http: httpx.Client, secure: LiveServer, home: QueueManager, keys: dict[str, Ed25519PrivateKey]
) -> None:
    _hello(http, secure, keys["DEV1"], "DEV1")
    _hello(http, secure, keys["DEV2"], "DEV2")
    raw, headers = signed(keys["DEV2"], "DEV2", p.PATH_PUT, put("DEV2"))
    status, body = send(http, secure, p.PATH_PUT, raw, headers)
    assert status == 200 and body["results"][0]["s"] == "stored"
    uid = body["results"][0]["u"]
    confirm = {"type": "confirm", "qmgr": "DEV1", "now_ms": T0, "queue": "ORDERS", "uids": [uid]}
    raw, headers = signed(keys["DEV1"], "DEV1", p.PATH_CONFIRM, confirm)
    refused(send(http, secure, p.PATH_CONFIRM, raw, headers), 403, "its own messages")
    assert home.get("ORDERS") is None  # still locked: DEV2's to confirm


@pytest.mark.parametrize("queue", ["DEV2.INBOX", "INBOX.DEV2", "..DEV2.INBOX"])
def test_device_cannot_pull_another_devices_queue(
    queue: str, http: httpx.Client, secure: LiveServer, home: QueueManager, keys: dict[str, Ed25519PrivateKey]
) -> None:
    home.put("DEV2.INBOX", Message(b"secret for DEV2"))
    _hello(http, secure, keys["DEV1"], "DEV1")
    pull = {"type": "pull", "qmgr": "DEV1", "now_ms": T0, "queue": queue, "max": 10}
    raw, headers = signed(keys["DEV1"], "DEV1", p.PATH_PULL, pull)
    status, body = send(http, secure, p.PATH_PULL, raw, headers)
    assert status == 200 and body["messages"] == [] and body.get("missing") is True
    pull = {**pull, "qmgr": "DEV2", "queue": "INBOX"}  # or by naming DEV2 in the body
    raw, headers = signed(keys["DEV1"], "DEV1", p.PATH_PULL, pull)
    refused(send(http, secure, p.PATH_PULL, raw, headers), 403, "signed by DEV1")
    assert home.depth("DEV2.INBOX") == 1 and home.browse("DEV2.INBOX")[0].data == b"secret for DEV2"


# -- `edgeq serve` in a subprocess: auth on by default once a device is registered --------------------




def test_edgeq_serve_refuses_attacks_and_replays_across_a_restart(tmp_path: Path) -> None:
    home, device = tmp_path / "home.db", tmp_path / "device.db"
    pair = new_key_pair(tmp_path / "dev1.key")
    with QueueManager(home, name="HOME", journal="server") as qm:
        qm.define_queue("ORDERS")
        qm.define_queue("AUDIT")
        qm.register_device("DEV1", pair.public_key, queues=["ORDERS"])
    with QueueManager(device, name="DEV1") as qm:
        qm.define_remote_queue("ORDERS", target_qmgr="HOME")
        qm.define_remote_queue("AUDIT", target_qmgr="HOME")
        qm.put_many("ORDERS", [Message(b"m%d" % i) for i in range(300)])
        qm.put("AUDIT", Message(b"not allowed"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    key = load_private_key(pair.private_path)
    hello_now = {**hello(), "now_ms": system_clock()}
    captured = signed(key, "DEV1", p.PATH_HELLO, hello_now, now_ms=system_clock())

    with edgeq_serve(home, port) as lines, httpx.Client(timeout=10) as http:
        unsigned = subprocess.run([*EDGEQ, "sync", "--db", str(device), "--server", url, "--once"],
                                  capture_output=True, text=True, timeout=60)
        assert unsigned.returncode == 1 and "401 unauthorized" in unsigned.stdout
        ok = subprocess.run([*EDGEQ, "sync", "--db", str(device), "--server", url, "--once",
                             "--key", str(pair.private_path), "--no-pull"], capture_output=True, text=True,
                            timeout=60)
        summary = json.loads(ok.stdout)
        assert summary["pushed"]["transmitted"] == 300
        # ORDERS went through; AUDIT is not DEV1's to push to: a clear 403, the rest untouched
        assert ok.returncode == 1 and "403 forbidden" in summary["pushed"]["error"]
        response = http.post(url + p.PATH_HELLO, content=captured[0], headers={**CBOR, **captured[1]})
        assert response.status_code == 200
    events = [json.loads(line) for line in lines if line.startswith("{")]
    assert any(e["event"] == "serve" and e["auth"] == "required" for e in events)
    assert any(e["event"] == "auth-refused" and e["code"] == "forbidden" for e in events)

    with edgeq_serve(home, port), httpx.Client(timeout=10) as http:
        response = http.post(url + p.PATH_HELLO, content=captured[0], headers={**CBOR, **captured[1]})
        assert response.status_code == 401 and "replayed" in cbor2.loads(response.content)["detail"]
    with QueueManager(home) as qm:
        assert (qm.depth("ORDERS"), qm.depth("AUDIT")) == (300, 0)
        assert sum(e.kind == "accepted" for e in qm.journal_since(0)) == 300


def test_edgeq_serve_without_devices_warns_loudly(tmp_path: Path) -> None:
    home = tmp_path / "home.db"
    with QueueManager(home, name="HOME") as qm:
        qm.define_queue("ORDERS")
    with edgeq_serve(home, free_port()) as lines:
        pass
    events = [json.loads(line) for line in lines if line.startswith("{")]
    insecure = [e for e in events if e["event"] == "insecure"]
    assert insecure and "AUTHENTICATION IS OFF" in insecure[0]["msg"]


# -- the gate: when requests must be signed -------------------------------------------------------


def test_the_gate_needs_an_authenticator_unless_it_is_off(home: QueueManager, nonces: MemoryNonces) -> None:
    authenticator = SignatureAuthenticator(home, nonces)
    with pytest.raises(InvalidArgument, match="needs an authenticator"):
        AuthGate(None, mode="required")
    with pytest.raises(InvalidArgument, match="needs the queue manager"):
        AuthGate(authenticator, mode="auto")
    assert AuthGate(None, mode="off").admit(AuthRequest(None, p.PATH_HELLO, {}, b"")) is None
    # devices are registered in `home`: auto is on, and asks for signatures before decoding
    gate = AuthGate(authenticator, mode="auto", qm=home)
    with pytest.raises(Unauthorized, match="missing X-Edgeq-Device"):
        gate.admit(AuthRequest(None, p.PATH_HELLO, {}, b"\xff not even CBOR"))

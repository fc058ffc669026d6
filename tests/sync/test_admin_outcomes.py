"""What the operator is told about an admin request, end to end: a real home server on
loopback (signed sync) and its console (its own app), a real device agent, the operator's AdminClient,
the ``edgeq admin`` command line as a subprocess and the console page read over HTTP.

The console, ``edgeq admin`` and the client say the same thing: ``pending``, "expired
before delivery: never executed" (the server's own expiry dropped it unread), "outcome
unknown until the device answers" (it was handed over and no reply has come), or the
reply once it comes, however late. And a device whose clock runs ahead (inside the
signature skew) takes a request's lifetime as carried, never the operator's deadline."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from edgeq import ManualClock, Message, QueueManager
from edgeq.admin.wire import ADMIN_QUEUE
from edgeq.sync.agent.agent import SyncAgent
from edgeq.sync.agent.signer import DeviceSigner
from edgeq.sync.keys import public_bytes
from edgeq.sync.server.admin.client import AdminClient, operator_key_id
from edgeq.sync.server.auth import SignatureAuthenticator
from edgeq.sync.server.console.auth import set_password
from edgeq.sync.server.nonces import MemoryNonces
from tests.sync.conftest import EDGEQ, T0, LiveServer, Network

PASSWORD = "operator-pass-1"
NEVER_RAN = "expired before delivery: never executed"
UNKNOWN = "outcome unknown until the device answers"


@pytest.fixture
def operator() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


@pytest.fixture
def device_key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


@pytest.fixture
def home(tmp_path: Path, server_clock: ManualClock, device_key: Ed25519PrivateKey) -> Iterator[QueueManager]:
    qm = QueueManager(tmp_path / "home.db", name="HOME", clock=server_clock)
    qm.define_queue("ORDERS")
    qm.register_device("DEV1", public_bytes(device_key), queues=["ORDERS"])
    set_password(qm.path, PASSWORD)
    yield qm
    qm.close()


@pytest.fixture
def secure(
    home: QueueManager, server_clock: ManualClock, make_server: Callable[..., LiveServer]
) -> Iterator[LiveServer]:
    nonces = MemoryNonces()
    yield make_server(home, authenticate=SignatureAuthenticator(home, nonces, clock=server_clock))
    nonces.close()


@pytest.fixture
def console(home: QueueManager, make_console: Callable[..., LiveServer]) -> LiveServer:
    """The console over the store ``secure`` serves (its own app, as on its own port)."""
    return make_console(home)


@pytest.fixture
def client(home: QueueManager, operator: Ed25519PrivateKey) -> Iterator[AdminClient]:
    with AdminClient(home, operator_key=operator, poll_s=0.01) as admin:
        yield admin


@pytest.fixture
def agent(
    device_qm: QueueManager, secure: LiveServer, device_key: Ed25519PrivateKey, device_clock: ManualClock,
    operator: Ed25519PrivateKey, network: Network, make_agent: Callable[..., SyncAgent],
) -> Iterator[SyncAgent]:
    """DEV1's agent, trusting the operator, its HTTP through ``network`` (faults on demand)."""
    device_qm.trust_admin_key(operator_key_id(public_bytes(operator)), operator.public_key())
    with httpx.Client(transport=network, timeout=10) as http:
        made = make_agent(device_qm, secure.url, client=http,
                          auth=DeviceSigner("DEV1", device_key, clock=device_clock))
        made.sync_once()  # the first cycle defines the admin queues
        yield made


def console_state(server: LiveServer, request_id: str) -> str:
    """The State cell of the console's row for ``request_id`` (signed in over HTTP)."""
    with httpx.Client(base_url=server.url, timeout=10) as http:
        assert http.post("/console/login", data={"user": "operator", "password": PASSWORD}).status_code == 303
        page = http.get("/console")
    assert page.status_code == 200
    row = re.search(rf"<tr><td>{request_id}</td>.*?</tr>", page.text, re.S)
    assert row is not None, page.text
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row.group(0), re.S)
    return cells[-1].strip()


def cli(home: QueueManager, *args: str) -> str:
    """``edgeq admin --db HOME ...`` in its own process (its clock: the real one, long after T0)."""
    done = subprocess.run([*EDGEQ, "admin", "--db", str(home.path), *args], capture_output=True, text=True,
                          timeout=60)
    return done.stdout + done.stderr


def cli_pending_status(home: QueueManager, request_id: str) -> str:
    """The STATUS column of ``edgeq admin pending`` for ``request_id``."""
    out = cli(home, "pending")
    line = next((line for line in out.splitlines() if line.startswith(request_id)), None)
    assert line is not None, out
    header = out.splitlines()[0]
    return line[header.index("STATUS"):].strip()


def test_a_request_the_server_dropped_unread_never_ran_and_every_view_says_so(
    home: QueueManager, secure: LiveServer, console: LiveServer, client: AdminClient,
    server_clock: ManualClock
) -> None:
    handle = client.request("DEV1", "define-queue", "ALERTS", expires_ms=server_clock() + 60_000)
    assert console_state(console, handle.request_id) == "pending" == handle.record.describe(server_clock())

    server_clock.advance(120_000)  # no device came for it: its message expires on the server

    assert handle.status == "expired" and handle.record.describe(server_clock()) == NEVER_RAN
    assert console_state(console, handle.request_id) == NEVER_RAN
    assert cli_pending_status(home, handle.request_id) == NEVER_RAN
    assert home.depth("DEV1.SYSTEM.ADMIN") == 0  # dropped there, unread, by the server's own expiry


def test_a_request_that_ran_and_whose_reply_was_lost_is_unknown_until_the_reply_comes(
    home: QueueManager, console: LiveServer, client: AdminClient, agent: SyncAgent, device_qm: QueueManager,
    network: Network, server_clock: ManualClock, device_clock: ManualClock,
) -> None:
    device_qm.define_queue("LOGS")
    device_qm.put_many("LOGS", [Message(b"a"), Message(b"b"), Message(b"c")])
    handle = client.request("DEV1", "purge", "LOGS", expires_ms=server_clock() + 120_000)
    network.lose_once.append("/v1/put")  # the reply's push: the server takes it, the answer is lost

    agent.sync_once()

    assert device_qm.depth("LOGS") == 0  # it ran, in time
    for clock in (server_clock, device_clock):
        clock.advance(180_000)  # its expiry passes with no reply on the server
    record = handle.record
    assert (record.status(server_clock()), record.describe(server_clock())) == ("unknown", UNKNOWN)
    assert console_state(console, handle.request_id) == UNKNOWN
    assert cli_pending_status(home, handle.request_id) == UNKNOWN

    agent.sync_once()  # the reply comes on the next sync: its real outcome is shown

    record = handle.record
    assert record.status(server_clock()) == "replied" and record.reply is not None
    assert record.reply.rc == "success" and record.reply.results[0]["purged"] == 3
    assert console_state(console, handle.request_id) == "replied: success"
    shown = cli(home, "show", handle.request_id)
    assert f"DEV1 purge LOGS: replied: success (request {handle.request_id})" in shown, shown
    assert "expired" not in cli(home, "pending")


def test_a_device_whose_clock_runs_ahead_runs_a_short_lived_request_it_got_in_time(
    home: QueueManager, secure: LiveServer, client: AdminClient, device_qm: QueueManager,
    device_key: Ed25519PrivateKey, operator: Ed25519PrivateKey, device_clock: ManualClock,
    server_clock: ManualClock, make_agent: Callable[..., SyncAgent],
) -> None:
    device_clock.set(T0 + 240_000)  # 4 minutes ahead of the server: inside the signature skew (5 minutes)
    device_qm.trust_admin_key(operator_key_id(public_bytes(operator)), operator.public_key())
    agent = make_agent(device_qm, secure.url, auth=DeviceSigner("DEV1", device_key, clock=device_clock))
    agent.sync_once()
    handle = client.request("DEV1", "define-queue", "ALERTS", {"ordering": "fifo"},
                            expires_ms=server_clock() + 120_000)

    agent.sync_once()  # within the second: 2 minutes of its life left

    reply = handle.wait(5)
    assert reply is not None and reply.rc == "success", reply
    assert device_qm.queue_attributes("ALERTS").ordering == "fifo"
    assert device_qm.depth(ADMIN_QUEUE) == 0

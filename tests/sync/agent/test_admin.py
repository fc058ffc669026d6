"""edgeq.sync.agent.admin: the agent's part in remote administration, against a real home
server on loopback that authenticates its devices: the admin queues defined when the device
takes part (and only then), requests pulled, executed and answered in the same cycle, an
offline device answering when it is back, and one report for the cycle's two pushes."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from edgeq import ManualClock, Message, QueueManager
from edgeq.admin.wire import ADMIN_QUEUE, ADMIN_REPLY_QUEUE
from edgeq.sync.agent.admin import merged
from edgeq.sync.agent.agent import SyncAgent
from edgeq.sync.agent.reports import PushReport, QueueReport
from edgeq.sync.agent.signer import DeviceSigner
from edgeq.sync.keys import public_bytes
from edgeq.sync.server.admin.client import AdminClient, operator_key_id
from edgeq.sync.server.auth import SignatureAuthenticator
from edgeq.sync.server.nonces import MemoryNonces
from tests.sync.conftest import LiveServer, Network


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
    # DEV1 may push to ORDERS only: its replies go to SYSTEM.ADMIN.REPLY all the same.
    qm.register_device("DEV1", public_bytes(device_key), queues=["ORDERS"])
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
def client(home: QueueManager, operator: Ed25519PrivateKey) -> Iterator[AdminClient]:
    with AdminClient(home, operator_key=operator, poll_s=0.01) as admin:
        yield admin


@pytest.fixture
def signed_agent(device_qm: QueueManager, secure: LiveServer, device_key: Ed25519PrivateKey,
                 device_clock: ManualClock, make_agent: Callable[..., SyncAgent]) -> Callable[..., SyncAgent]:
    def _make(**options: object) -> SyncAgent:
        return make_agent(device_qm, secure.url, auth=DeviceSigner("DEV1", device_key, clock=device_clock),
                          **options)

    return _make


def trust(qm: QueueManager, operator: Ed25519PrivateKey) -> None:
    qm.trust_admin_key(operator_key_id(public_bytes(operator)), operator.public_key())


def test_a_device_that_trusts_no_operator_key_takes_no_part(
    device_qm: QueueManager, signed_agent: Callable[..., SyncAgent], operator: Ed25519PrivateKey
) -> None:
    agent = signed_agent()
    pushed, pulled = agent.sync_once()
    assert pushed.complete and pulled is not None and pulled.complete
    assert not agent.admin.active()
    assert {ADMIN_QUEUE, ADMIN_REPLY_QUEUE}.isdisjoint(device_qm.queue_names())
    trust(device_qm, operator)  # trusting a key turns it on, read at the next cycle
    pushed, pulled = agent.sync_once()
    # No request was ever sent to DEV1: the server holds no admin queue for it, and that is
    # no failure (nothing to pull), so `edgeq sync --once` and its status stay clean.
    assert pulled is not None and pulled.complete and pulled.queues[ADMIN_QUEUE].error is None
    home_queue = device_qm.queue_attributes(ADMIN_QUEUE)
    reply_queue = device_qm.queue_attributes(ADMIN_REPLY_QUEUE)
    assert (home_queue.kind, home_queue.server) == ("home", "HOME")
    assert ((reply_queue.kind, reply_queue.target_qmgr, reply_queue.target_queue)
            == ("remote", "HOME", ADMIN_REPLY_QUEUE))


def test_the_agent_option_overrides_the_trusted_keys(
    device_qm: QueueManager, signed_agent: Callable[..., SyncAgent], operator: Ed25519PrivateKey
) -> None:
    trust(device_qm, operator)
    signed_agent(admin=False).sync_once()
    assert ADMIN_QUEUE not in device_qm.queue_names()
    device_qm.untrust_admin_key(operator_key_id(public_bytes(operator)))
    signed_agent(admin=True).sync_once()
    assert {ADMIN_QUEUE, ADMIN_REPLY_QUEUE} <= set(device_qm.queue_names())


def test_a_request_is_executed_and_answered_in_one_cycle(
    device_qm: QueueManager, home: QueueManager, client: AdminClient, signed_agent: Callable[..., SyncAgent],
    operator: Ed25519PrivateKey,
) -> None:
    trust(device_qm, operator)
    agent = signed_agent()
    agent.sync_once()  # the admin queues exist from the first cycle on
    device_qm.put("ORDERS", Message(b"waiting"))
    handle = client.request("DEV1", "define-queue", "ALERTS", {"expiry_ms": 60_000, "ordering": "fifo"})

    pushed, pulled = agent.sync_once()

    assert pulled is not None and pulled.queues[ADMIN_QUEUE].moved == 1
    assert device_qm.queue_attributes("ALERTS").ordering == "fifo"
    # One report for both pushes: the order before the pull, the reply after it.
    assert pushed.complete and pushed.transmitted == 2
    assert pushed.queues["ORDERS"].moved == 1 and pushed.queues[ADMIN_REPLY_QUEUE].moved == 1
    reply = handle.wait(5)
    assert reply is not None and reply.rc == "success"
    assert reply.results[0]["attributes"]["expiry_ms"] == 60_000  # type: ignore[index]
    assert device_qm.depth(ADMIN_QUEUE) == 0 and home.depth("DEV1.SYSTEM.ADMIN") == 0


def test_an_offline_device_executes_its_requests_when_it_is_back(
    device_qm: QueueManager, home: QueueManager, client: AdminClient, signed_agent: Callable[..., SyncAgent],
    operator: Ed25519PrivateKey, network: Network, device_key: Ed25519PrivateKey, device_clock: ManualClock,
    secure: LiveServer, make_agent: Callable[..., SyncAgent],
) -> None:
    trust(device_qm, operator)
    with httpx.Client(transport=network, timeout=10) as http:
        agent = make_agent(device_qm, secure.url, client=http,
                           auth=DeviceSigner("DEV1", device_key, clock=device_clock))
        agent.sync_once()
        network.down = True
        handle = client.request("DEV1", "inquire-all")
        _, pulled = agent.sync_once()  # nothing to push: the pull finds the server gone
        assert pulled is not None and pulled.stopped and handle.status == "pending"
        network.down = False
        agent.sync_once()
    reply = handle.wait(5)
    assert reply is not None and reply.rc == "success"
    assert {item["object"] for item in reply.results} >= {"ORDERS", ADMIN_QUEUE}


def test_merged_reports_add_up_and_keep_the_later_state() -> None:
    first = PushReport(sent=2, transmitted=2, batches=1, expiries_reported=1, error="ORDERS: no-queue",
                       queues={"ORDERS": QueueReport("ORDERS", "push", moved=0, error="no-queue",
                                                     code="no-queue"),
                               "LOGS": QueueReport("LOGS", "push", moved=2)})
    second = PushReport(sent=1, transmitted=1, batches=1,
                        queues={"ORDERS": QueueReport("ORDERS", "push", moved=3),
                                ADMIN_REPLY_QUEUE: QueueReport(ADMIN_REPLY_QUEUE, "push", moved=1)})
    both = merged(first, second)
    assert ((both.sent, both.transmitted, both.batches, both.expiries_reported, both.error)
            == (3, 3, 2, 1, None))
    assert {n: (q.moved, q.error) for n, q in both.queues.items()} == {
        "ORDERS": (3, None), "LOGS": (2, None), ADMIN_REPLY_QUEUE: (1, None)}

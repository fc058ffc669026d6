"""Messages the home server refuses (issue 15, defect 6), against the real server on loopback:
each refusal is counted in the device's store, shown per queue with a hint that says what
to do on the server, and after the queue's refusal limit the message moves to the store's
dead-letter queue, rules told reason ``refused`` (a bound dead-letter rule keeps a copy too). One refused or
forbidden queue never stops the other queues or the pulls (defect 5)."""

from __future__ import annotations

from collections.abc import Callable

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from edgeq import ManualClock, Message, QueueManager
from edgeq.exchange.transmit import DEFAULT_REFUSAL_LIMIT
from edgeq.sync.agent.agent import SyncAgent
from edgeq.sync.agent.signer import DeviceSigner
from edgeq.sync.agent.status import QueueStatus
from edgeq.sync.keys import public_bytes
from edgeq.sync.server.auth import SignatureAuthenticator
from edgeq.sync.server.nonces import MemoryNonces
from tests.sync.conftest import LiveServer, Recorder


def status_of(agent: SyncAgent, queue: str) -> QueueStatus:
    (found,) = [s for s in agent.status().queues if s.queue == queue]
    return found


def test_a_queue_missing_on_the_server_is_refused_visibly_with_a_hint_for_the_server(
    device_qm: QueueManager, agent: SyncAgent
) -> None:
    device_qm.define_remote_queue("METRICS", target_qmgr="HOME")  # the server has no METRICS
    device_qm.put_many("METRICS", [Message(b"a"), Message(b"b")])
    device_qm.put("ORDERS", Message(b"order"))

    report = agent.push_once()

    assert (report.transmitted, report.refused) == (1, 2)
    assert not report.complete  # refused messages are not a success
    metrics, orders = report.queues["METRICS"], report.queues["ORDERS"]
    assert (metrics.refused, metrics.code, metrics.moved) == (2, "no-queue", 0)
    assert metrics.error is not None
    assert "HOME has no queue METRICS" in metrics.error
    assert "edgeq queue define METRICS" in metrics.error and "on the server" in metrics.error
    assert "define_queue(" not in metrics.error
    assert (orders.moved, orders.error) == (1, None)
    status = status_of(agent, "METRICS")
    assert (status.backlog, status.refused, status.refusals, status.last_error_code) == (2, 2, 2, "no-queue")
    assert status.failing and not status_of(agent, "ORDERS").failing


def test_a_message_refused_limit_times_moves_to_the_dead_letter_queue(
    device_qm: QueueManager, home_qm: QueueManager, agent: SyncAgent, server: LiveServer
) -> None:
    device_qm.define_queue("DLQ")
    device_qm.define_remote_queue("METRICS", target_qmgr="HOME",
                                  rules=[("dead-letter", {"queue": "DLQ", "reasons": ["refused"]})])
    watcher = Recorder()
    device_qm.add_rule("METRICS", watcher)
    uid = device_qm.put("METRICS", Message(b"lost", fields={"n": 1}))

    for attempt in range(1, DEFAULT_REFUSAL_LIMIT):
        report = agent.push_once()
        assert (report.refused, report.dead_lettered) == (1, 0), attempt
        assert status_of(agent, "METRICS").refusals == attempt
    last = agent.push_once()

    assert (last.refused, last.dead_lettered) == (1, 1)
    assert last.queues["METRICS"].dead_lettered == 1 and not last.complete
    assert device_qm.depth("METRICS") == 0
    assert watcher.removed() == [(b"lost", "refused")]
    (copy,) = device_qm.browse("DLQ")
    assert copy.uid == uid and copy.fields["dlq.reason"] == "refused" and copy.fields["n"] == 1
    assert [m.uid for m in device_qm.dlq_browse()] == [uid]  # the store's own dead-letter queue
    status = status_of(agent, "METRICS")
    assert (status.backlog, status.refused, status.refusals, status.dead_lettered) == (0, 0, 0, 1)
    assert agent.push_once().sent == 0  # never offered again
    assert server.metrics.value("refused") == DEFAULT_REFUSAL_LIMIT


def test_the_refusal_limit_is_set_per_remote_queue(
    device_qm: QueueManager, agent: SyncAgent
) -> None:
    device_qm.define_remote_queue("STRICT", target_qmgr="HOME", refusal_limit=2)
    device_qm.define_remote_queue("PATIENT", target_qmgr="HOME")
    device_qm.put("STRICT", Message(b"s"))
    device_qm.put("PATIENT", Message(b"p"))
    assert agent.push_once().dead_lettered == 0
    report = agent.push_once()
    assert report.queues["STRICT"].dead_lettered == 1 and report.queues["PATIENT"].dead_lettered == 0
    assert (device_qm.depth("STRICT"), device_qm.depth("PATIENT")) == (0, 1)


def test_refused_then_accepted_once_the_server_defines_the_queue(
    device_qm: QueueManager, home_qm: QueueManager, agent: SyncAgent
) -> None:
    device_qm.define_remote_queue("METRICS", target_qmgr="HOME")
    device_qm.put("METRICS", Message(b"late but delivered"))
    assert agent.push_once().refused == 1
    home_qm.define_queue("METRICS")  # the operator follows the hint

    report = agent.push_once()

    assert report.complete and report.queues["METRICS"].moved == 1
    assert [m.data for m in home_qm.browse("METRICS")] == [b"late but delivered"]
    status = status_of(agent, "METRICS")
    assert (status.refused, status.refusals, status.failing) == (0, 0, False)
    # the past error stays shown
    assert status.last_success_ms is not None and status.last_error_code == "no-queue"


def test_a_refused_message_is_offered_once_per_push_however_long_the_backlog(
    device_qm: QueueManager, home_qm: QueueManager, make_agent: Callable[..., SyncAgent], server: LiveServer
) -> None:
    home_qm.alter_queue("ORDERS", max_message_bytes=100)
    device_qm.put("ORDERS", Message(b"x" * 500, priority=9))  # first in get order, refused every time
    device_qm.put_many("ORDERS", [Message(b"m%d" % i) for i in range(50)])
    agent = make_agent(device_qm, server.url, batch_size=10)

    report = agent.push_once()

    assert (report.transmitted, report.refused, report.dead_lettered) == (50, 1, 0)
    assert status_of(agent, "ORDERS").refusals == 1
    assert report.queues["ORDERS"].code == "too-large"


def forbidding(
    home_qm: QueueManager, device_qm: QueueManager, make_server: Callable[..., LiveServer],
    server_clock: ManualClock, nonces: MemoryNonces,
) -> tuple[LiveServer, Ed25519PrivateKey]:
    """A server that takes signed requests only, where DEV1 may push to ORDERS but not to
    AUDIT (a remote queue of the device, with a message on it), and holds a message for
    DEV1's home-server queue INBOX."""
    key = Ed25519PrivateKey.generate()
    home_qm.define_queue("AUDIT")
    home_qm.define_queue("DEV1.INBOX")
    home_qm.register_device("DEV1", public_bytes(key), queues=["ORDERS"])
    home_qm.put("DEV1.INBOX", Message(b"for DEV1"))
    server = make_server(home_qm, authenticate=SignatureAuthenticator(home_qm, nonces, clock=server_clock))
    device_qm.define_remote_queue("AUDIT", target_qmgr="HOME")
    device_qm.define_home_server_queue("INBOX", server="HOME")
    device_qm.put("AUDIT", Message(b"audit"))
    return server, key


def test_a_forbidden_queue_fails_alone_and_the_pull_still_runs(
    device_qm: QueueManager, home_qm: QueueManager, server_clock: ManualClock, device_clock: ManualClock,
    make_server: Callable[..., LiveServer], make_agent: Callable[..., SyncAgent],
) -> None:
    nonces = MemoryNonces()
    server, key = forbidding(home_qm, device_qm, make_server, server_clock, nonces)
    agent = make_agent(device_qm, server.url, auth=DeviceSigner("DEV1", key, clock=device_clock))

    pushed, pulled = agent.sync_once()

    assert pushed.queues["AUDIT"].code == "forbidden" and not pushed.stopped
    assert pulled is not None and pulled.ok and pulled.received == 1
    assert [m.data for m in device_qm.browse("INBOX")] == [b"for DEV1"]
    status = status_of(agent, "AUDIT")
    assert status.failing and status.last_error_code == "forbidden" and status.next_retry_ms is not None
    assert status.refused == 0  # a refused request counts no message refusals
    nonces.close()


def test_the_server_unreachable_stops_the_direction_not_a_queue(
    device_qm: QueueManager, agent: SyncAgent, server: LiveServer
) -> None:
    device_qm.put("ORDERS", Message(b"x"))
    server.stop()
    pushed, pulled = agent.sync_once()
    assert pushed.stopped and pushed.error is not None and "cannot reach" in pushed.error
    assert pulled is None  # the server is down: the pull is not tried
    status = agent.status()
    assert status.stopped and status.error_code == "unreachable" and status.failing
    assert status.error is not None and "cannot reach" in status.error

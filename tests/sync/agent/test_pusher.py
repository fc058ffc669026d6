"""The agent's push, against the real home server (uvicorn on loopback over a real store):
chunks under the body limit, refusals, what it remembers between pushes, a put made again
when the clock bounds restart. What the pusher sent is read from ``Network``'s record;
what the server answers comes from its real state (a limit, a lost copy, a step of its
clock, a device's allowed queues)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from edgeq import Int32, ManualClock, Message, QueueManager
from edgeq.sync import protocol as p
from edgeq.sync.agent.expiries import ExpiryReporter
from edgeq.sync.agent.link import ServerLink
from edgeq.sync.agent.push import Pusher
from edgeq.sync.agent.signer import DeviceSigner
from edgeq.sync.agent.transport import SyncError
from edgeq.sync.keys import public_bytes
from edgeq.sync.server.auth import SignatureAuthenticator
from edgeq.sync.server.nonces import MemoryNonces
from tests.sync.conftest import T0, LiveServer, Network, monotonic_of


@pytest.fixture
def make_pusher(make_link: Callable[..., ServerLink]) -> Iterator[Callable[..., Pusher]]:
    made: list[Pusher] = []

    def _make(**options: Any) -> Pusher:
        link = make_link(**options)
        pusher = Pusher(link, ExpiryReporter(link))
        made.append(pusher)
        return pusher

    yield _make
    for pusher in made:
        pusher.close()


def put_uids(network: Network) -> list[list[str]]:
    return [[m["u"] for m in body["messages"]] for body in network.bodies(p.PATH_PUT)]


def test_a_batch_is_cut_under_the_body_limit_and_a_message_too_large_stays(
    make_pusher: Callable[..., Pusher], network: Network, device_qm: QueueManager, home_qm: QueueManager,
    make_server: Callable[..., LiveServer],
) -> None:
    server = make_server(home_qm, max_body_bytes=4096)  # chunks of at most 90 % of it
    sent = device_qm.put_many("ORDERS", [Message(b"x" * 1000) for _ in range(6)])
    big = device_qm.put("ORDERS", Message(b"y" * 5000))

    report = make_pusher(to=server).push_once()

    assert (report.ok, report.transmitted, report.refused, report.batches) == (True, 6, 1, 1)
    assert report.refusals == [(str(big), "larger than the server's request limit (3686 bytes)")]
    assert [len(uids) for uids in put_uids(network)] == [3, 3]
    assert all(len(raw) < 3686 for raw in network.requests(p.PATH_PUT))
    assert [m.uid for m in device_qm.exchange.next_for_transmission("ORDERS", 10)] == [big]  # kept here
    assert [m.uid for m in home_qm.browse("ORDERS")] == sent
    assert server.metrics.value("received") == 6


def test_a_confirm_is_cut_to_the_servers_batch_limit_too(
    make_pusher: Callable[..., Pusher], network: Network, device_qm: QueueManager, home_qm: QueueManager,
    make_server: Callable[..., LiveServer],
) -> None:
    """The agent's batch (10) is larger than the server's (3): every put *and* every confirm
    stays within the server's limit, so nothing is refused as too many uids."""
    server = make_server(home_qm, max_batch=3)
    sent = device_qm.put_many("ORDERS", [Message(b"m%d" % n) for n in range(7)])

    report = make_pusher(to=server, batch_size=10).push_once()

    assert (report.ok, report.transmitted, report.refused) == (True, 7, 0), report
    assert all(len(body["uids"]) <= 3 for body in network.bodies(p.PATH_CONFIRM))
    assert (sorted(u for body in network.bodies(p.PATH_CONFIRM) for u in body["uids"])
            == sorted(map(str, sent)))
    assert [m.uid for m in home_qm.browse("ORDERS")] == sent
    assert device_qm.exchange.next_for_transmission("ORDERS", 10) == []


def test_what_the_server_expired_is_never_put_again_and_unknown_is_requeued(
    make_pusher: Callable[..., Pusher], network: Network, device_qm: QueueManager, home_qm: QueueManager,
    server_clock: ManualClock,
) -> None:
    first, doomed = device_qm.put_many("ORDERS", [Message(b"a"), Message(b"b", expiry=Int32(100))])
    # Time passes on the server and on the device's monotonic clock (the device's wall
    # clock stands still, so b is alive here throughout): its 100 ms run out on the way.
    pusher = make_pusher(monotonic=monotonic_of(server_clock))
    network.before[p.PATH_PUT] = lambda: server_clock.advance(200)
    # The server loses its locked copy of a between the stages (a restore): "unknown".
    network.before[p.PATH_CONFIRM] = lambda: home_qm.purge("ORDERS") and None

    report = pusher.push_once()
    assert (report.transmitted, report.expired, report.requeued) == (0, 1, 1)
    assert device_qm.depth("ORDERS") == 2 and home_qm.depth("ORDERS") == 0
    again = pusher.push_once()

    assert again.transmitted == 1 and pusher.last is again
    assert put_uids(network) == [[str(first), str(doomed)], [str(first)]]
    assert all(m["r"] for b in network.bodies(p.PATH_PUT) for m in b["messages"])  # recovering: resends
    assert [m.uid for m in home_qm.browse("ORDERS")] == [first]
    # expires here, in time
    assert [m.uid for m in device_qm.exchange.next_for_transmission("ORDERS", 10)] == [doomed]


def test_a_put_whose_answer_restarts_the_clock_bounds_is_made_again_before_its_confirm(
    make_pusher: Callable[..., Pusher], network: Network, device_qm: QueueManager, home_qm: QueueManager,
    server_clock: ManualClock,
) -> None:
    hours = 3_600_000
    timed, _ = device_qm.put_many("ORDERS", [Message(b"a", expiry=Int32(2 * hours)), Message(b"b")])
    # the server's clock steps while the put is there
    network.before[p.PATH_PUT] = lambda: server_clock.advance(hours)

    report = make_pusher().push_once()

    assert (report.transmitted, report.sent) == (2, 4)
    assert network.calls == [p.PATH_HELLO, p.PATH_PUT, p.PATH_PUT, p.PATH_CONFIRM]
    first, second = network.bodies(p.PATH_PUT)
    assert first["server_ms"] == T0 and second["server_ms"] == T0 + hours  # rebased on the new bounds
    assert all(m["r"] for m in second["messages"])
    assert {m.uid: m.expiry_deadline_ms for m in home_qm.browse("ORDERS")}[timed] == T0 + 3 * hours


def test_a_forbidden_queue_does_not_stop_the_others(
    make_pusher: Callable[..., Pusher], device_qm: QueueManager, home_qm: QueueManager,
    device_clock: ManualClock, server_clock: ManualClock, make_server: Callable[..., LiveServer],
) -> None:
    key = Ed25519PrivateKey.generate()
    home_qm.define_queue("AUDIT")
    home_qm.register_device("DEV1", public_bytes(key), queues=["ORDERS"])  # it may push to ORDERS only
    nonces = MemoryNonces()
    server = make_server(home_qm, authenticate=SignatureAuthenticator(home_qm, nonces, clock=server_clock))
    device_qm.define_remote_queue("AUDIT", target_qmgr="HOME")
    device_qm.put("AUDIT", Message(b"audit"))
    device_qm.put("ORDERS", Message(b"order"))

    report = make_pusher(to=server, auth=DeviceSigner("DEV1", key, clock=device_clock)).push_once()

    assert (report.transmitted == 1 and report.error is not None
            and "may not push to queue AUDIT" in report.error)
    assert (device_qm.depth("AUDIT"), device_qm.depth("ORDERS")) == (1, 0)
    assert home_qm.depth("AUDIT") == 0 and [m.data for m in home_qm.browse("ORDERS")] == [b"order"]
    nonces.close()


def test_transmit_pushes_at_once_or_raises(
    make_pusher: Callable[..., Pusher], device_qm: QueueManager, home_qm: QueueManager
) -> None:
    pusher = make_pusher()
    device_qm.define_remote_queue("ELSEWHERE", target_qmgr="OTHER")
    with pytest.raises(SyncError, match="targets OTHER"):
        pusher.transmit("ELSEWHERE")
    device_qm.put("ORDERS", Message(b"now"))
    pusher.transmit("ORDERS")
    assert device_qm.depth("ORDERS") == 0 and [m.data for m in home_qm.browse("ORDERS")] == [b"now"]
    home_qm.alter_queue("ORDERS", max_message_bytes=100)  # the server refuses what is larger
    device_qm.put("ORDERS", Message(b"x" * 500))
    with pytest.raises(SyncError, match=r"did not take the message: .*max_message_bytes"):
        pusher.transmit("ORDERS")
    assert device_qm.depth("ORDERS") == 1 and home_qm.depth("ORDERS") == 1


def test_a_failing_queue_waits_for_its_own_retry_while_the_others_go_on(
    make_pusher: Callable[..., Pusher], device_qm: QueueManager, home_qm: QueueManager, network: Network,
    device_clock: ManualClock, server_clock: ManualClock,
) -> None:
    device_qm.define_remote_queue("METRICS", target_qmgr="HOME")  # the server has none: every put refused
    device_qm.put("METRICS", Message(b"a"))
    pusher = make_pusher()

    def wait(ms: int) -> None:  # time passes for both (on the device's monotonic clock too)
        device_clock.advance(ms)
        server_clock.advance(ms)

    def pushed_to(**options: Any) -> list[str]:
        before = len(network.bodies(p.PATH_PUT))
        pusher.push_once(**options)
        return [body["queue"] for body in network.bodies(p.PATH_PUT)[before:]]

    assert pushed_to(due_only=True) == ["METRICS"]  # refused: retried in 1 s, then 2 s, 4 s ...
    device_qm.put("ORDERS", Message(b"o"))
    assert pushed_to(due_only=True) == ["ORDERS"]
    wait(1000)
    assert pushed_to(due_only=True) == ["METRICS"]
    wait(1999)
    assert pushed_to(due_only=True) == []
    wait(1)
    assert pushed_to(due_only=True) == ["METRICS"]
    assert pushed_to() == ["METRICS"]  # a push asked for by hand tries every queue
    assert [m.data for m in home_qm.browse("ORDERS")] == [b"o"]
    home_qm.define_queue("METRICS")
    wait(16_000)
    assert pushed_to(due_only=True) == ["METRICS"]
    assert pushed_to(due_only=True) == []  # nothing left; no longer failing, so tried at every round
    device_qm.put("METRICS", Message(b"b"))
    assert pushed_to(due_only=True) == ["METRICS"]


def _count_reads(qm: QueueManager) -> list[int]:
    """What each read of the transmission store returned, counted as the real read runs."""
    reads: list[int] = []
    real = qm.exchange.next_for_transmission

    def counted(queue: str, limit: int) -> list[Message]:
        got = real(queue, limit)
        reads.append(len(got))
        return got

    qm.exchange.next_for_transmission = counted  # type: ignore[method-assign]
    return reads


def test_one_read_of_the_store_serves_several_batches_in_order(
    make_pusher: Callable[..., Pusher], network: Network, device_qm: QueueManager, home_qm: QueueManager,
) -> None:
    sent = device_qm.put_many("ORDERS", [Message(b"m%d" % n) for n in range(1_000)])
    reads = _count_reads(device_qm)

    report = make_pusher(batch_size=100).push_once()

    assert (report.ok, report.transmitted, report.batches) == (True, 1_000, 10)
    assert [len(uids) for uids in put_uids(network)] == [100] * 10
    # each once, in order
    assert [u for uids in put_uids(network) for u in uids] == [str(uid) for uid in sent]
    # Four batches a read, each read past the batch in flight once: not a read of two batches per batch.
    assert len(reads) == 3 and sum(reads) == 1_000 + 2 * 100
    assert home_qm.depth("ORDERS") == 1_000 and device_qm.depth("ORDERS") == 0


def test_large_messages_are_read_a_batch_at_a_time(
    make_pusher: Callable[..., Pusher], network: Network, device_qm: QueueManager, home_qm: QueueManager,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("edgeq.sync.agent.push._READ_AHEAD_BYTES", 10 * 1_000)  # four batches of 10 are 40 kB
    device_qm.put_many("ORDERS", [Message(b"x" * 1_000) for _ in range(80)])
    reads = _count_reads(device_qm)

    report = make_pusher(batch_size=10).push_once()

    assert (report.ok, report.transmitted, report.batches) == (True, 80, 8)
    # The first read, before any was seen, takes four batches; then their size allows one a read
    # (and the batch in flight read past each time).
    assert reads == [40, 20, 20, 20, 20, 10] and home_qm.depth("ORDERS") == 80

"""Device -> server: two-stage transmission, exactly once through lost responses and retries."""

from __future__ import annotations

import threading
from collections.abc import Callable

import httpx
import pytest

from edgeq import Int32, Message, MessageUID, QueueManager
from edgeq.errors import RemoteUnavailable
from edgeq.rules import QueueRule
from edgeq.rules.base import RuleEvent
from edgeq.sync.agent.agent import SyncAgent
from tests.sync.conftest import LiveServer, Network, Recorder, free_port


def put_n(qm: QueueManager, n: int, queue: str = "ORDERS") -> list[MessageUID]:
    return qm.put_many(queue, [Message(b"m%05d" % i, fields={"n": Int32(i)}) for i in range(n)])


def server_uids(qm: QueueManager, queue: str = "ORDERS") -> list[str]:
    return [str(m.uid) for m in qm.browse(queue)]


def test_push_transmits_a_backlog_in_batches(
    device_qm: QueueManager, home_qm: QueueManager, make_agent: Callable[..., SyncAgent], server: LiveServer
) -> None:
    device_rule = Recorder()
    device_qm.add_rule("ORDERS", device_rule)
    uids = put_n(device_qm, 1234)
    payload = bytes(range(256))
    device_qm.put("ORDERS", Message(payload, priority=9, correlation_id=b"\x00\x01", reply_to="REPLIES"))
    agent = make_agent(device_qm, server.url, batch_size=500)

    report = agent.push_once()

    assert report.ok and (report.sent, report.transmitted, report.batches) == (1235, 1235, 3)
    assert device_qm.depth("ORDERS") == 0
    assert device_rule.removed().count((b"m00000", "transmitted")) == 1
    got = home_qm.browse("ORDERS")
    assert len(got) == 1235 and len({m.uid for m in got}) == 1235
    first = got[0]  # priority 9 first
    assert (first.data, first.correlation_id, first.reply_to, first.uid.origin) == (
        payload, b"\x00\x01", "REPLIES", device_qm.origin)
    assert [str(m.uid) for m in got[1:]] == [str(u) for u in uids]
    assert got[1].fields == {"n": Int32(0)}
    assert agent.push_once().sent == 0  # nothing left


def test_a_target_queue_name_is_honoured(
    device_qm: QueueManager, home_qm: QueueManager, agent: SyncAgent
) -> None:
    home_qm.define_queue("IN.ORDERS")
    device_qm.define_remote_queue("OUT", target_qmgr="HOME", target_queue="IN.ORDERS")
    device_qm.define_remote_queue("ELSEWHERE", target_qmgr="OTHER")
    device_qm.put("OUT", Message(b"routed"))
    device_qm.put("ELSEWHERE", Message(b"not for this server"))
    assert agent.push_once().transmitted == 1
    assert [m.data for m in home_qm.browse("IN.ORDERS")] == [b"routed"]
    assert device_qm.depth("ELSEWHERE") == 1


def test_lost_put_response_is_resent_with_resend_and_stored_once(
    device_qm: QueueManager, home_qm: QueueManager, flaky_agent: SyncAgent, network: Network,
    server: LiveServer
) -> None:
    put_n(device_qm, 10)
    network.lose_once.append("/v1/put")
    first = flaky_agent.push_once()
    assert not first.ok and "response lost" in (first.error or "")
    assert home_qm.depth("ORDERS") == 10 and home_qm.browse("ORDERS") == []  # stored, locked

    second = flaky_agent.push_once()

    assert second.ok and second.transmitted == 10
    assert len(server_uids(home_qm)) == 10 and device_qm.depth("ORDERS") == 0
    assert server.metrics.value("received") == 20  # the resend replaced the locked copies
    assert server.metrics.value("duplicates") == 0


def test_lost_confirm_response_gives_duplicates_not_copies(
    device_qm: QueueManager, home_qm: QueueManager, flaky_agent: SyncAgent, network: Network,
    server: LiveServer
) -> None:
    put_n(device_qm, 10)
    network.lose_once.append("/v1/confirm")
    assert not flaky_agent.push_once().ok
    assert len(server_uids(home_qm)) == 10 and device_qm.depth("ORDERS") == 10  # confirmed there, kept here
    # an application consumes them on the server before the device retries
    assert len(home_qm.get_many("ORDERS", 100)) == 10

    retry = flaky_agent.push_once()

    assert retry.ok and (retry.duplicates, retry.transmitted) == (10, 10)
    assert home_qm.depth("ORDERS") == 0  # remembered confirmed uids: no second copy
    assert device_qm.depth("ORDERS") == 0
    assert server.metrics.value("duplicates") == 10


def test_a_duplicated_put_request_does_not_duplicate(
    device_qm: QueueManager, home_qm: QueueManager, flaky_agent: SyncAgent, network: Network
) -> None:
    put_n(device_qm, 3)
    replay: list[bytes] = []
    original = network.inner.handle_request

    def recording(request: object) -> object:
        import httpx

        assert isinstance(request, httpx.Request)
        if request.url.path == "/v1/put":
            replay.append(request.content)
        return original(request)

    network.inner.handle_request = recording  # type: ignore[method-assign,assignment]
    assert flaky_agent.push_once().transmitted == 3
    # a proxy replays the first put after the whole exchange completed
    import httpx

    with httpx.Client() as client:
        answer = client.post(flaky_agent.transport.server_url + "/v1/put", content=replay[0],
                             headers={"content-type": "application/cbor"})
    import cbor2

    assert [r["s"] for r in cbor2.loads(answer.content)["results"]] == ["duplicate"] * 3
    assert home_qm.depth("ORDERS") == 3


def test_confirm_of_an_unknown_uid_makes_the_device_put_again(
    device_qm: QueueManager, home_qm: QueueManager, flaky_agent: SyncAgent, network: Network
) -> None:
    put_n(device_qm, 5)
    # the server loses its locked copies between the stages (e.g. a restore)
    network.before["/v1/confirm"] = lambda: home_qm.purge("ORDERS") and None
    first = flaky_agent.push_once()
    assert first.ok and (first.requeued, first.transmitted) == (5, 0)
    assert device_qm.depth("ORDERS") == 5

    second = flaky_agent.push_once()

    assert second.transmitted == 5 and len(server_uids(home_qm)) == 5 and device_qm.depth("ORDERS") == 0


def test_refused_messages_stay_on_the_device_and_the_rest_go_through(
    device_qm: QueueManager, home_qm: QueueManager, agent: SyncAgent
) -> None:
    home_qm.alter_queue("ORDERS", max_message_bytes=100)
    device_qm.put_many("ORDERS", [Message(b"small-1"), Message(b"x" * 500), Message(b"small-2")])
    report = agent.push_once()
    assert (report.transmitted, report.refused) == (2, 1)
    assert "max_message_bytes" in report.refusals[0][1]
    assert device_qm.depth("ORDERS") == 1
    assert [m.data for m in home_qm.browse("ORDERS")] == [b"small-1", b"small-2"]


def test_sync_mode_delivers_inside_put(
    device_qm: QueueManager, home_qm: QueueManager, agent: SyncAgent
) -> None:
    device_qm.define_remote_queue("PAY", target_qmgr="HOME", target_queue="ORDERS", mode="sync")
    uid = device_qm.put("PAY", Message(b"now"))
    assert server_uids(home_qm) == [str(uid)]
    assert device_qm.depth("PAY") == 0


def test_sync_mode_with_the_server_down_raises_and_keeps_nothing(
    device_qm: QueueManager, make_agent: Callable[..., SyncAgent]
) -> None:
    device_qm.define_remote_queue("PAY", target_qmgr="HOME", mode="sync")
    make_agent(device_qm, f"http://127.0.0.1:{free_port()}", timeout=5)
    with pytest.raises(RemoteUnavailable, match="cannot reach"):
        device_qm.put("PAY", Message(b"now"))
    assert device_qm.depth("PAY") == 0


def test_sync_mode_refused_by_the_server_raises_and_keeps_nothing(
    device_qm: QueueManager, home_qm: QueueManager, agent: SyncAgent
) -> None:
    home_qm.alter_queue("ORDERS", max_depth=1)
    home_qm.put("ORDERS", Message(b"fills it"))
    device_qm.define_remote_queue("PAY", target_qmgr="HOME", target_queue="ORDERS", mode="sync")
    with pytest.raises(RemoteUnavailable, match="full"):
        device_qm.put("PAY", Message(b"no room"))
    assert device_qm.depth("PAY") == 0 and home_qm.depth("ORDERS") == 1


def test_the_server_restarting_asks_for_a_new_hello_transparently(
    device_qm: QueueManager, home_qm: QueueManager, agent: SyncAgent, server: LiveServer
) -> None:
    put_n(device_qm, 2)
    assert agent.push_once().transmitted == 2
    server.sessions.clear()  # what a restart forgets
    put_n(device_qm, 2)
    assert agent.push_once().transmitted == 2
    assert server.sessions.get("DEV1").hellos == 1


class _Transmitted(QueueRule):
    def __init__(self, want: int) -> None:
        self.want, self.count, self.done = want, 0, threading.Event()

    def on_removed(self, event: RuleEvent) -> None:
        if event.reason == "transmitted":
            self.count += 1
            if self.count >= self.want:
                self.done.set()


def test_daemon_pushes_at_once_after_a_put(device_qm: QueueManager, agent: SyncAgent,
                                           home_qm: QueueManager) -> None:
    watcher = _Transmitted(3)
    device_qm.add_rule("ORDERS", watcher)
    agent.start(interval_s=3600)  # the tick never comes in this test: only the put wakes it
    try:
        put_n(device_qm, 3)
        assert watcher.done.wait(10), "the daemon did not push after the put"
    finally:
        agent.stop()
    assert len(server_uids(home_qm)) == 3


def test_daemon_survives_a_server_that_is_down(
    device_qm: QueueManager, server: LiveServer, network: Network, home_qm: QueueManager,
    make_agent: Callable[..., SyncAgent],
) -> None:
    network.down = True
    put_n(device_qm, 2)
    watcher = _Transmitted(2)
    device_qm.add_rule("ORDERS", watcher)
    client = httpx.Client(transport=network, timeout=10)
    flaky_agent = make_agent(device_qm, server.url, client=client, backoff_base_s=0.01, backoff_max_s=0.05)
    flaky_agent.start(interval_s=3600)
    try:
        assert network.attempted.wait(10)  # a first cycle failed...
        assert not flaky_agent.online
        network.down = False  # ...and when the server is back, a backoff retry gets through
        assert watcher.done.wait(10)
    finally:
        flaky_agent.stop()
        client.close()
    assert len(server_uids(home_qm)) == 2 and flaky_agent.online

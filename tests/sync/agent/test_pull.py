"""Server -> device: home-server queues pull with assured get/confirm, exactly once."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from edgeq import Int32, ManualClock, Message, QueueManager
from edgeq.sync.agent.agent import SyncAgent
from tests.sync.conftest import LiveServer, Network, Recorder


@pytest.fixture
def inbox(device_qm: QueueManager, home_qm: QueueManager) -> None:
    home_qm.define_queue("DEV1.INBOX")  # where the server holds DEV1's INBOX messages
    device_qm.define_home_server_queue("INBOX", server="HOME")


def datas(qm: QueueManager, queue: str) -> list[bytes]:
    return [m.data for m in qm.browse(queue)]


@pytest.mark.usefixtures("inbox")
def test_pull_moves_every_message_once(
    device_qm: QueueManager, home_qm: QueueManager, make_agent: Callable[..., SyncAgent], server: LiveServer
) -> None:
    sent = [b"\x00cmd %04d\xff" % i for i in range(700)]
    home_qm.put_many("DEV1.INBOX", [Message(d, fields={"n": Int32(i)}) for i, d in enumerate(sent)])
    agent = make_agent(device_qm, server.url, batch_size=300)

    report = agent.pull_once()

    assert report.ok and (report.received, report.acknowledged, report.batches) == (700, 700, 3)
    assert datas(device_qm, "INBOX") == sent
    assert device_qm.browse("INBOX")[5].fields == {"n": Int32(5)}
    assert home_qm.depth("DEV1.INBOX") == 0
    assert agent.pull_once().received == 0


@pytest.mark.usefixtures("inbox")
def test_a_lost_pull_response_is_offered_again(
    device_qm: QueueManager, home_qm: QueueManager, flaky_agent: SyncAgent, network: Network
) -> None:
    home_qm.put_many("DEV1.INBOX", [Message(b"a"), Message(b"b")])
    network.lose_once.append("/v1/pull")
    assert not flaky_agent.pull_once().ok
    assert home_qm.browse("DEV1.INBOX") == []  # locked for the lost pull
    report = flaky_agent.pull_once()  # the server releases the old locks and offers them again
    assert report.received == 2 and datas(device_qm, "INBOX") == [b"a", b"b"]
    assert home_qm.depth("DEV1.INBOX") == 0


@pytest.mark.usefixtures("inbox")
def test_a_lost_pull_confirm_never_duplicates_on_the_device(
    device_qm: QueueManager, home_qm: QueueManager, flaky_agent: SyncAgent, network: Network
) -> None:
    home_qm.put_many("DEV1.INBOX", [Message(b"a"), Message(b"b")])
    network.down_for.add("/v1/pull/confirm")  # stored here, but the server never hears so
    assert not flaky_agent.pull_once().ok
    assert datas(device_qm, "INBOX") == [b"a", b"b"] and home_qm.depth("DEV1.INBOX") == 2
    device_qm.get("INBOX")  # the application already took one
    network.down_for.clear()

    report = flaky_agent.pull_once()

    assert (report.received, report.duplicates, report.acknowledged) == (0, 2, 2)
    assert datas(device_qm, "INBOX") == [b"b"]  # no second copy of either
    assert home_qm.depth("DEV1.INBOX") == 0


@pytest.mark.usefixtures("inbox")
def test_pulled_expiry_is_rebased_and_expired_ones_fire_where_they_are_discarded(
    device_qm: QueueManager, home_qm: QueueManager, agent: SyncAgent,
    server_clock: ManualClock, device_clock: ManualClock,
) -> None:
    on_server = Recorder()
    home_qm.add_rule("DEV1.INBOX", on_server)
    home_qm.put("DEV1.INBOX", Message(b"short", expiry=Int32(5_000)))
    home_qm.put("DEV1.INBOX", Message(b"long", expiry=Int32(600_000)))
    server_clock.advance(6_000)
    device_clock.advance(6_000)
    assert agent.pull_once().received == 1
    got = device_qm.browse("INBOX")
    assert [m.data for m in got] == [b"long"] and got[0].remaining_expiry_ms == 594_000
    assert on_server.expired() == [(b"short", "get")]


@pytest.mark.usefixtures("inbox")
def test_a_device_queue_missing_on_the_server_pulls_nothing_and_says_so(
    device_qm: QueueManager, home_qm: QueueManager, agent: SyncAgent
) -> None:
    device_qm.define_home_server_queue("OTHER", server="HOME")
    home_qm.put("DEV1.INBOX", Message(b"still pulled"))
    report = agent.pull_once()
    assert report.received == 1 and report.queues["OTHER"].code == "no-queue" and not report.ok
    assert datas(device_qm, "INBOX") == [b"still pulled"]

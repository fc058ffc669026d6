"""The out-bridge against a broker that goes away: the messages wait on the queue with their expiry
running (by the queue manager's clock), the expired ones are discarded on the way, rules told."""

from __future__ import annotations

import signal
import time
from collections import Counter
from pathlib import Path

import pytest
from paho.mqtt.client import MQTTMessage
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from edgeq import ManualClock, Message, QueueManager
from edgeq.sync.bridges.book import define_bridge
from edgeq.sync.bridges.mapping import UID_PROPERTY
from edgeq.sync.bridges.mqtt_out import SUSPECT_DROPS, pack_publish_properties
from edgeq.sync.bridges.status import read_states
from edgeq.types import DLQ_ATTEMPTS, DLQ_REFUSAL
from tests.sync.bridges.conftest import Broker, Device
from tests.sync.bridges.kit import running
from tests.waits import until


def test_a_broker_down_keeps_the_backlog_and_drains_it_when_back(tmp_path: Path, broker: Broker) -> None:
    db = tmp_path / "dev.db"
    device = Device(broker, "down-device", clean_start=False)  # its session outlives the broker's restart
    device.subscribe("down/out", qos=2)
    clock = ManualClock(int(time.time() * 1000))
    try:
        with QueueManager(db, name="DEV1", clock=clock) as qm:
            qm.define_queue("OUT", rules=["counters"], redelivery_delay_ms=0)
            define_bridge(qm, "down", "mqtt-out", "OUT",
                          {"url": broker.url, "topics": ["down/out"], "qos": 2, "retry_max_s": 0.2})
            broker.stop()
            qm.put("OUT", Message(b"a"))
            qm.put("OUT", Message(b"b").expire_after(5_000))
            qm.put("OUT", Message(b"c").expire_after(600_000))
            with running(qm, ["down"], connect=False) as runner:
                board = runner.bridges[0].board
                until(lambda: board.state().errors >= 2, "two failed connection attempts")
                until(lambda: "cannot reach the broker" in (read_states(db)["down"].last_error or ""),
                      "the failure in the stored status")
                assert not read_states(db)["down"].connected
                assert qm.depth("OUT") == 3
                clock.advance(10_000)  # b expires while the broker is away
                broker.start()
                until(lambda: qm.depth("OUT") == 0, "the backlog drained")
                got = device.wait_for(2)
            assert sorted(m.payload for m in got) == [b"a", b"c"]
            c = next(m for m in got if m.payload == b"c")
            assert c.properties.MessageExpiryInterval <= 590  # 600 s less the 10 s spent waiting
            assert qm.queue_stats("OUT")["expired"] == 1
    finally:
        device.close()


def test_a_broker_killed_with_messages_in_flight_counts_no_backout(tmp_path: Path, broker: Broker) -> None:
    """A broker that goes away (frozen, then killed) with PUBLISHes unanswered is not the messages' fault:
    they are put back with no backout counted, none dead-lettered, and forwarded when it is back."""
    with QueueManager(tmp_path / "dev.db", name="DEV1") as qm:
        qm.define_queue("OUT", redelivery_delay_ms=0)
        define_bridge(qm, "away", "mqtt-out", "OUT",
                      {"url": broker.url, "topics": ["away/out"], "retry_max_s": 0.2})
        with running(qm, ["away"]) as runner:
            board = runner.bridges[0].board
            assert broker.process is not None
            broker.process.send_signal(signal.SIGSTOP)  # takes the PUBLISHes (the kernel's), answers none
            for n in range(3):
                qm.put("OUT", Message(b"x" * n))
            until(lambda: qm.depth("OUT") == 3 and not qm.browse("OUT"), "the three in flight")
            broker.process.kill()
            broker.process.wait(10)
            broker.stop()
            until(lambda: len(qm.browse("OUT")) == 3 and not board.state().connected, "the three put back")
            assert [m.backout_count for m in qm.browse("OUT")] == [0, 0, 0]
            broker.start()
            until(lambda: qm.depth("OUT") == 0 and board.state().forwarded == 3, "the three forwarded")
        assert qm.dlq_browse() == [] and board.state().refused == 0


def test_a_message_with_less_than_a_second_left_is_not_published(tmp_path: Path, broker: Broker,
                                                                 device: Device) -> None:
    device.subscribe("short/out", qos=1)
    clock = ManualClock(int(time.time() * 1000))
    with QueueManager(tmp_path / "dev.db", name="DEV1", clock=clock) as qm:
        qm.define_queue("OUT", rules=["counters"])
        define_bridge(qm, "short", "mqtt-out", "OUT", {"url": broker.url, "topics": ["short/out"]})
        with running(qm, ["short"]) as runner:
            qm.put("OUT", Message(b"late").expire_after(999))
            until(lambda: runner.bridges[0].board.state().skipped == 1, "the message left unpublished")
            clock.advance(999)
            qm.put("OUT", Message(b"next"))
            (got,) = device.wait_for(1)
            until(lambda: qm.depth("OUT") == 0, "the late one discarded")
        assert got.payload == b"next"
        assert qm.queue_stats("OUT")["expired"] == 1


def test_a_backlog_is_confirmed_a_whole_batch_at_a_time(tmp_path: Path, broker: Broker) -> None:
    """While a flight goes on, its confirms are whole batches (the last excepted): SQLite prepares and
    sqlite3 keeps (up to 128) a statement per length of IN list, so lengths that varied with the PUBACKs'
    timing grew the bridge's memory with the messages forwarded."""
    n, batch = 1_000, 32
    lengths: list[int] = []

    def traced(sql: str) -> None:  # expanded: DELETE FROM messages WHERE id IN (1,2,3) AND ...
        if sql.startswith("DELETE FROM messages WHERE id IN ("):
            lengths.append(sql.split(")", 1)[0].count(",") + 1)

    with QueueManager(tmp_path / "dev.db", name="DEV1") as qm:
        qm.define_queue("OUT")
        qm.put_many("OUT", [Message(b"%d" % i) for i in range(n)])
        define_bridge(qm, "whole", "mqtt-out", "OUT",
                      {"url": broker.url, "topics": ["whole/out"], "batch": batch})
        with qm.tracer(traced), running(qm, ["whole"]) as runner:
            until(lambda: runner.bridges[0].board.state().forwarded == n, "the backlog forwarded")
    assert sum(lengths) == n
    assert lengths[:-1] == [batch] * (len(lengths) - 1), Counter(lengths)


def uid_of(message: MQTTMessage) -> str:
    return str(dict(message.properties.UserProperty)[UID_PROPERTY])


def put_back_count(line: str) -> int:
    """How many messages a bridge's "put back" line is about ("message X ..." or "N messages ...")."""
    what = line.split(": ", 1)[1]
    return 1 if what.startswith("message ") else int(what.split(" ", 1)[0])


def losses(caplog: pytest.LogCaptureFixture) -> int:
    """How many times the bridges said they lost the broker connection."""
    return sum("lost the broker connection" in r.getMessage() for r in list(caplog.records))


def test_a_message_over_the_brokers_limits_is_dead_lettered_and_the_rest_flow(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """mosquitto announces max_packet_size (its CONNACK's Maximum Packet Size), not message_size_limit, and
    ends the connection at its answer to a PUBLISH over the latter: the message over the announced limit is
    dead-lettered unsent, the one over the other once the connection ended at it SUSPECT_DROPS times; the
    rest of the batch is confirmed as acknowledged, put back otherwise (not counted), and all forwarded."""
    small = Broker(tmp_path)
    small.config.write_text(small.config.read_text() + "message_size_limit 100\nmax_packet_size 1000\n")
    small.start()
    device = Device(small, "partial-device")
    try:
        device.subscribe("partial/out", qos=1)
        with QueueManager(tmp_path / "dev.db", name="DEV1") as qm:
            qm.define_queue("OUT", redelivery_delay_ms=0)
            sizes = [50] * 5 + [200] + [50] * 4 + [2000] + [50] * 2
            uids = [str(qm.put("OUT", Message(bytes([65 + i]) * n))) for i, n in enumerate(sizes)]
            define_bridge(qm, "partial", "mqtt-out", "OUT",
                          {"url": small.url, "topics": ["partial/out"], "retry_max_s": 0.2})
            with running(qm, ["partial"]) as runner:
                board = runner.bridges[0].board
                until(lambda: qm.depth("OUT") == 0 and board.state().forwarded == len(uids) - 2
                      and losses(caplog) >= SUSPECT_DROPS, "the queue drained past the too large", 15)
                state = board.state()
            dead = {str(m.uid): m.fields for m in qm.dlq_browse(queue="OUT")}
        assert set(dead) == {uids[5], uids[10]}
        announced = str(dead[uids[10]][DLQ_REFUSAL])
        assert "over the broker's Maximum Packet Size (1000 bytes" in announced, announced
        assert dead[uids[10]][DLQ_ATTEMPTS] == 1
        dropped = str(dead[uids[5]][DLQ_REFUSAL])
        assert f"ended the connection at its answer to this PUBLISH {SUSPECT_DROPS} times" in dropped
        assert dead[uids[5]][DLQ_ATTEMPTS] == SUSPECT_DROPS
        lines = [r.getMessage() for r in caplog.records]
        assert losses(caplog) == SUSPECT_DROPS  # none for uids[10]
        blamed = [line for line in lines if "ended the broker connection at the answer" in line]
        assert len(blamed) == SUSPECT_DROPS - 1 and all(f"message {uids[5]} " in x for x in blamed), blamed
        assert state.refused == 2 and state.forwarded == len(uids) - 2
        assert state.errors >= SUSPECT_DROPS + 2
        assert any(f"message {uids[5]} " in x and "moved to the dead-letter queue" in x for x in lines)
        put_back = [put_back_count(line) for line in lines if "put back on queue OUT" in line]
        got = Counter(uid_of(m) for m in device.wait_for(len(uids) - 2))
        assert set(got) == set(uids) - {uids[5], uids[10]}  # nothing lost, the large ones never taken
        # A copy twice at the broker only for a message put back unacknowledged (a PUBACK lost with the
        # connection): MQTT's at-least-once, each copy carrying its edgeq-uid.
        assert sum(got.values()) - len(got) <= sum(put_back)
    finally:
        device.close()
        small.stop()


def test_the_publish_properties_are_packed_as_paho_packs_them() -> None:
    props = {"PayloadFormatIndicator": 1, "MessageExpiryInterval": 70_000, "ContentType": "text/plain; é",
             "ResponseTopic": "r/1", "CorrelationData": b"\x00\xff" * 100,
             "UserProperty": [("a", "1"), ("a", "2 ü"), (UID_PROPERTY, "DEV1:x.1")]}
    for some in ({}, {"UserProperty": props["UserProperty"]}, props):
        paho = Properties(PacketTypes.PUBLISH)
        for name, value in some.items():
            setattr(paho, name, value)
        assert pack_publish_properties(some) == paho.pack(), some

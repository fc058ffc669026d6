"""The out-bridge against a broker that goes away: the messages wait on the queue with their expiry
running (by the queue manager's clock), the expired ones are discarded on the way, rules told."""

from __future__ import annotations

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
from edgeq.sync.bridges.mqtt_out import pack_publish_properties
from edgeq.sync.bridges.status import read_states
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


def test_a_batch_the_broker_takes_in_part_confirms_what_it_acknowledged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """mosquitto takes the PUBLISHes of a batch up to the sixth, over its message_size_limit, and the
    connection ends there: those acknowledged confirmed (each at the subscriber), the rest back on the
    queue, published once the culprit is gone; nothing lost, nothing doubled but what was put back."""
    small = Broker(tmp_path)
    small.config.write_text(small.config.read_text() + "message_size_limit 100\n")
    small.start()
    device = Device(small, "partial-device")
    try:
        device.subscribe("partial/out", qos=1)
        with QueueManager(tmp_path / "dev.db", name="DEV1") as qm:
            qm.define_queue("OUT", redelivery_delay_ms=0)
            sizes = [50] * 5 + [200] + [50] * 4
            uids = [str(qm.put("OUT", Message(bytes([65 + i]) * n))) for i, n in enumerate(sizes)]
            define_bridge(qm, "partial", "mqtt-out", "OUT",
                          {"url": small.url, "topics": ["partial/out"], "retry_max_s": 0.2})
            with running(qm, ["partial"]) as runner:
                board = runner.bridges[0].board
                until(lambda: board.state().errors >= 4, "the big one refused with the connection, twice")
            first = board.state().forwarded
            left = {str(m.uid): m for m in qm.browse("OUT")}
            assert uids[5] in left and first >= 1  # some of the batch acknowledged and confirmed, not all
            assert first + len(left) == 10  # each either confirmed or back on the queue
            confirmed = set(uids) - set(left)
            until(lambda: confirmed <= {uid_of(m) for m in list(device.received)},
                  "each confirmed one at the subscriber")
            assert all(m.backout_count == 0 for uid, m in left.items() if uid != uids[5])  # not their fault
            qm.delete_message("OUT", uids[5])
            with running(qm, ["partial"]) as runner:
                board = runner.bridges[0].board
                until(lambda: qm.depth("OUT") == 0 and board.state().forwarded == len(left) - 1,
                      "the rest forwarded")
        put_back = [put_back_count(r.getMessage()) for r in caplog.records if "put back on queue OUT" in
                    r.getMessage()]
        got = Counter(uid_of(m) for m in device.wait_for(9))
        assert set(got) == set(uids) - {uids[5]}  # nothing lost, the big one never taken
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

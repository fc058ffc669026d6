"""Hostile input from the broker's side: an oversized payload, malformed properties, a topic that maps
to no queue; each refused with a clear error onto the dead-letter queue, nothing lost; a retained
PUBLISH never stored as live."""

from __future__ import annotations

import signal
from pathlib import Path

from edgeq import QueueManager
from edgeq.sync.bridges.book import define_bridge
from edgeq.sync.bridges.mapping import TOPIC
from edgeq.sync.bridges.status import read_states
from edgeq.types import DLQ_QUEUE, DLQ_REASON, DLQ_REFUSAL
from tests.sync.bridges.conftest import Broker, Device
from tests.sync.bridges.kit import bridge_run, running
from tests.sync.bridges.test_crash import connected
from tests.waits import until


def test_hostile_publishes_go_to_the_dead_letter_queue_and_the_rest_flows(
    tmp_path: Path, broker: Broker, device: Device
) -> None:
    db = tmp_path / "dev.db"
    with QueueManager(db, name="DEV1") as qm:
        qm.define_queue("IN")
        config = {"url": broker.url, "topics": ["h/old/#"], "max_payload_bytes": 1000}
        define_bridge(qm, "h", "mqtt-in", "IN", config)
        with running(qm, ["h"]):
            pass  # the broker keeps this session's subscription to h/old/#
        define_bridge(qm, "h", "mqtt-in", "IN", {**config, "topics": ["h/new/#"]}, replace=True)
        device.publish("h/new/retained", b"last value", retain=True)
        with running(qm, ["h"]) as runner:
            device.publish("h/new/big", b"x" * 1001)
            device.publish("h/new/bad", b"\xff not utf-8", PayloadFormatIndicator=1)
            device.publish("h/old/stale", b"for a filter no longer defined")
            device.publish("h/new/ok", b"fine")
            until(lambda: qm.depth("IN") == 1, "the good one stored")
            until(lambda: runner.bridges[0].board.state().refused == 3, "three refused")
        assert [m.data for m in qm.browse("IN")] == [b"fine"]
        dead = {m.fields[TOPIC]: m for m in qm.dlq_browse()}
        assert sorted(dead) == ["h/new/bad", "h/new/big", "h/old/stale"]
        assert dead["h/new/big"].data == b"x" * 1001
        assert all(m.fields[DLQ_REASON] == "refused" and m.fields[DLQ_QUEUE] == "IN" for m in dead.values())
        assert "over the bridge's max_payload_bytes 1000" in str(dead["h/new/big"].fields[DLQ_REFUSAL])
        assert "declared UTF-8" in str(dead["h/new/bad"].fields[DLQ_REFUSAL])
        assert "maps to no queue" in str(dead["h/old/stale"].fields[DLQ_REFUSAL])
        state = read_states(db)["h"]
        assert (state.forwarded, state.refused, state.skipped) == (1, 3, 1)  # skipped: the retained one
        assert "refused a PUBLISH" in (state.last_error or "")


def test_a_full_queue_leaves_the_publish_with_the_broker_until_there_is_room(
    tmp_path: Path, broker: Broker, device: Device
) -> None:
    with QueueManager(tmp_path / "dev.db", name="DEV1") as qm:
        qm.define_queue("IN", max_depth=1)
        define_bridge(qm, "full", "mqtt-in", "IN",
                      {"url": broker.url, "topics": ["full/#"], "retry_max_s": 0.2})
        with running(qm, ["full"]) as runner:
            device.publish("full/a", b"first")
            device.publish("full/a", b"second")
            board = runner.bridges[0].board
            until(lambda: "QueueFull" in (board.state().last_error or ""), "the full queue reported")
            assert [m.data for m in qm.browse("IN")] == [b"first"]
            got = qm.get("IN")
            assert got is not None and got.data == b"first"
            until(lambda: qm.depth("IN") == 1, "the second one stored once there was room")
        assert [m.data for m in qm.browse("IN")] == [b"second"]
        assert qm.dlq_browse() == [] and board.state().refused == 0


def test_a_mixed_batch_is_put_in_full_before_any_of_it_is_acknowledged(
    tmp_path: Path, broker: Broker, device: Device
) -> None:
    db, log = tmp_path / "dev.db", tmp_path / "bridge.log"
    with QueueManager(db, name="DEV1") as qm:
        qm.define_queue("IN")
        define_bridge(qm, "mix", "mqtt-in", "IN", {"url": broker.url, "topics": ["mix/#"], "qos": 1,
                                                   "max_payload_bytes": 1000, "batch": 5, "linger_ms": 1000})
        first = bridge_run(db, "mix", log, crash_at="in.stored", log_level="info")  # killed after the put
        until(lambda: connected(db, "mix", first), "the bridge connected", 15)
        sent = [device.publish("mix/a", b"good 1", qos=1, wait=False),  # in one burst: one batch
                device.publish("mix/b", b"stale", qos=1, wait=False, MessageExpiryInterval=1),  # expired
                device.publish("mix/c", b"x" * 1001, qos=1, wait=False),
                device.publish("mix/d", b"\xff not utf-8", qos=1, wait=False, PayloadFormatIndicator=1),
                device.publish("mix/e", b"good 2", qos=1, wait=False)]
        for info in sent:
            info.wait_for_publish(10)
        assert first.wait(15) == -signal.SIGKILL, log.read_text()
        assert sorted(m.data for m in qm.browse("IN")) == [b"good 1", b"good 2"]
        dead = {m.fields[TOPIC]: str(m.fields[DLQ_REFUSAL]) for m in qm.dlq_browse()}
        assert sorted(dead) == ["mix/c", "mix/d"]
        assert "over the bridge's max_payload_bytes 1000" in dead["mix/c"]
        assert "declared UTF-8" in dead["mix/d"]
        assert "a PUBLISH on 'mix/b' expired before it was stored: dropped" in log.read_text()
        with running(qm, ["mix"]) as runner:  # none was acknowledged: the broker sends all five again
            board = runner.bridges[0].board
            until(lambda: board.state().duplicates == 2 and board.state().refused == 2,
                  "the two good ones recognised and the two hostile ones refused again")
        # The stale one again only if the broker still gave it time (its expiry has whole seconds): then
        # never with more than the 1 s it was published with.
        stale = [m for m in qm.browse("IN") if m.data == b"stale"]
        assert all(m.remaining_expiry_ms is not None and m.remaining_expiry_ms <= 1000 for m in stale)
        assert sorted(m.data for m in qm.browse("IN") if m.data != b"stale") == [b"good 1", b"good 2"]
        assert len(qm.dlq_browse()) == 2


def test_a_backlog_far_larger_than_the_inbox_flows_through_in_batches(
    tmp_path: Path, broker: Broker, device: Device
) -> None:
    with QueueManager(tmp_path / "dev.db", name="DEV1") as qm:
        qm.define_queue("IN")
        define_bridge(qm, "small", "mqtt-in", "IN",
                      {"url": broker.url, "topics": ["small/#"], "qos": 1, "batch": 2, "linger_ms": 0})
        with running(qm, ["small"]):
            pass  # the session: what follows waits for the bridge at the broker
        for i in range(300):
            device.client.publish("small/r", b"%03d" % i, qos=1)  # paho sends them in order
        device.publish("small/r", b"last", qos=1)
        with running(qm, ["small"]) as runner:  # a Receive Maximum of 4: the network thread waits for room
            board = runner.bridges[0].board
            until(lambda: board.state().forwarded == 301, "the whole backlog stored", 30)
        assert [m.data for m in qm.browse("IN")] == [b"%03d" % i for i in range(300)] + [b"last"]

"""Hostile input from the broker's side: an oversized payload, malformed properties, a topic that maps
to no queue; each refused with a clear error onto the dead-letter queue, nothing lost; a retained
PUBLISH never stored as live."""

from __future__ import annotations

from pathlib import Path

from edgeq import QueueManager
from edgeq.sync.bridges.book import define_bridge
from edgeq.sync.bridges.mapping import TOPIC
from edgeq.sync.bridges.status import read_states
from edgeq.types import DLQ_QUEUE, DLQ_REASON, DLQ_REFUSAL
from tests.sync.bridges.conftest import Broker, Device
from tests.sync.bridges.kit import running
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

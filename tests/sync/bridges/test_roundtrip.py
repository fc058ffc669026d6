"""Every field both ways: a device's PUBLISH through the in-bridge onto a queue, and back out through
the out-bridge to a subscriber (a real mosquitto, paho devices)."""

from __future__ import annotations

import json
from pathlib import Path

from edgeq import QueueManager
from edgeq.sync.bridges.book import define_bridge
from edgeq.sync.bridges.mapping import (
    CONTENT_TYPE,
    CORRELATION_DATA,
    RESPONSE_TOPIC,
    TOPIC,
    UID_PROPERTY,
    USER_PROPERTIES,
    UTF8,
)
from tests.sync.bridges.conftest import Broker, Device
from tests.sync.bridges.kit import running
from tests.waits import until


def test_a_publish_crosses_both_bridges_with_every_field(
    tmp_path: Path, broker: Broker, device: Device
) -> None:
    with QueueManager(tmp_path / "dev.db", name="DEV1") as qm:
        qm.define_queue("READINGS")
        define_bridge(qm, "in1", "mqtt-in", "READINGS", {"url": broker.url, "topics": ["rt/in/#"]})
        define_bridge(qm, "out1", "mqtt-out", "READINGS", {"url": broker.url, "topics": ["rt/out"], "qos": 2})
        device.subscribe("rt/out")
        with running(qm, ["in1"]):
            device.publish("rt/in/t1", "21.5 °C".encode(), ContentType="text/plain",
                           CorrelationData=b"\x00c1", ResponseTopic="rt/reply",
                           UserProperty=[("unit", "C"), ("unit", "K"), ("site", "é")],
                           PayloadFormatIndicator=1, MessageExpiryInterval=3600)
            until(lambda: qm.depth("READINGS") == 1, "the PUBLISH on the queue")
        (stored,) = qm.browse("READINGS")
        assert stored.data == "21.5 °C".encode()
        assert dict(stored.fields) == {
            TOPIC: "rt/in/t1", CONTENT_TYPE: "text/plain", CORRELATION_DATA: b"\x00c1",
            RESPONSE_TOPIC: "rt/reply",
            USER_PROPERTIES: json.dumps([["unit", "C"], ["unit", "K"], ["site", "é"]], ensure_ascii=False),
            UTF8: True,
        }
        assert stored.remaining_expiry_ms is not None and 3_590_000 < stored.remaining_expiry_ms <= 3_600_000
        with running(qm, ["out1"]):
            (got,) = device.wait_for(1)
            until(lambda: qm.depth("READINGS") == 0, "the get confirmed")
        p = got.properties
        assert got.payload == "21.5 °C".encode() and got.topic == "rt/out"
        assert (p.ContentType, p.CorrelationData, p.ResponseTopic, p.PayloadFormatIndicator) == (
            "text/plain", b"\x00c1", "rt/reply", 1)
        assert p.UserProperty == [
            ("unit", "C"), ("unit", "K"), ("site", "é"), (UID_PROPERTY, str(stored.uid))]
        assert 3590 <= p.MessageExpiryInterval < 3600

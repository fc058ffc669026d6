"""Expiry across each hop, measured with one shared clock (the wall clock: the device's and the queue
manager's): device -> in-bridge -> queue A -> out-bridge -> broker -> in-bridge -> queue B. No hop
extends a deadline (1 ms rounding); each is early by at most its delay and MQTT's whole seconds."""

from __future__ import annotations

import time
from pathlib import Path

from edgeq import QueueManager
from edgeq.sync.bridges.book import define_bridge
from edgeq.sync.bridges.mapping import SECOND_MS
from tests.sync.bridges.conftest import Broker, Device
from tests.sync.bridges.kit import running
from tests.waits import until


def now_ms() -> int:
    return int(time.time() * 1000)


def deadline(qm: QueueManager, queue: str) -> int:
    (message,) = qm.browse(queue)
    assert message.expiry is not None
    return int(message.expiry)  # the in-bridge stores an absolute deadline: exact, nothing to estimate


def test_no_hop_extends_the_senders_deadline(tmp_path: Path, broker: Broker, device: Device) -> None:
    with QueueManager(tmp_path / "dev.db", name="DEV1") as qm:
        qm.define_queue("A")
        qm.define_queue("B")
        define_bridge(qm, "ein", "mqtt-in", "A", {"url": broker.url, "topics": ["e/in"], "qos": 1})
        define_bridge(qm, "eout", "mqtt-out", "A", {"url": broker.url, "topics": ["e/mid"], "qos": 1})
        define_bridge(qm, "emid", "mqtt-in", "B", {"url": broker.url, "topics": ["e/mid"], "qos": 1})
        with running(qm, ["ein"]):
            sent = now_ms()
            device.publish("e/in", b"reading", qos=1, MessageExpiryInterval=20)
            until(lambda: qm.depth("A") == 1, "the reading on A")
            hop1 = now_ms() - sent
        sender, on_a = sent + 20 * SECOND_MS, deadline(qm, "A")
        assert on_a <= sender + 1  # never later than the sender's deadline
        assert sender - on_a <= hop1 + SECOND_MS  # early by the hop, and the second a broker may overstate
        with running(qm, ["emid"]), running(qm, ["eout"]):
            left = qm.now_ms()
            until(lambda: qm.depth("B") == 1, "the reading on B")
            hop2 = qm.now_ms() - left
        on_b = deadline(qm, "B")
        assert on_b <= on_a + 1
        # early by the hop, the out-bridge's rounding down to seconds and the in-bridge's second
        assert on_a - on_b <= hop2 + 2 * SECOND_MS

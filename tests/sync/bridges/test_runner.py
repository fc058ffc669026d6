"""The runner keeps a bridge that fails from stopping for good: it says why, waits, and starts it
again (a real mosquitto, a paho device)."""

from __future__ import annotations

from pathlib import Path

from edgeq import Message, QueueManager
from edgeq.sync.bridges.book import define_bridge
from edgeq.sync.bridges.status import BridgeState, read_states
from tests.sync.bridges.conftest import Broker, Device
from tests.sync.bridges.kit import running
from tests.waits import until


def test_a_bridge_that_fails_is_started_again_after_a_back_off(
    tmp_path: Path, broker: Broker, device: Device
) -> None:
    db = tmp_path / "dev.db"
    device.subscribe("restart/out")
    with QueueManager(db, name="DEV1") as qm:
        qm.define_queue("OUT")
        define_bridge(qm, "up", "mqtt-out", "OUT", {"url": broker.url, "topics": ["restart/out"]})
        qm.delete_queue("OUT")  # the bridge fails: its queue is gone
        with running(qm, ["up"], connect=False) as runner:
            board = runner.bridges[0].board
            until(lambda: "started again in" in (board.state().last_error or ""), "the failure reported")
            until(lambda: "no queue 'OUT'" in (read_states(db).get("up", BridgeState()).last_error or ""),
                  "the failure in the stored status")
            qm.define_queue("OUT")
            qm.put("OUT", Message(b"after"))
            (got,) = device.wait_for(1)
            assert got.payload == b"after"
            until(lambda: board.state().forwarded == 1, "the forward counted")
        assert board.state().errors >= 1

"""The runner keeps a bridge that fails from stopping for good (it says why, waits, and starts it
again) and one that cannot run from stopping the others (a real mosquitto, a paho device)."""

from __future__ import annotations

from pathlib import Path

from edgeq import Message, QueueManager
from edgeq.sync.bridges.book import define_bridge
from edgeq.sync.bridges.definition import BridgeDefinition
from edgeq.sync.bridges.status import BridgeState, read_states
from edgeq.sync.bridges.stored import DEFINITION_PREFIX, meta
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


def test_a_bridge_whose_kind_is_not_installed_does_not_stop_the_others(tmp_path: Path) -> None:
    db = tmp_path / "dev.db"
    with QueueManager(db, name="DEV1") as qm:
        qm.define_queue("OUT")
        define_bridge(qm, "fine", "mqtt-out", "OUT", {"url": "mqtt://127.0.0.1:1", "topics": ["t"]})
        gone = BridgeDefinition("gone", "no-such-kind", "OUT", {"topics": ["t"]}, 7)
        with meta(db) as tx:  # as a plugin uninstalled since the bridge was defined leaves it
            tx.set_meta({DEFINITION_PREFIX + "gone": gone.to_json()})
        with running(qm, connect=False) as runner:
            assert [b.definition.name for b in runner.bridges] == ["fine"]
            until(lambda: "gone" in read_states(db), "the broken bridge's state stored")
            assert "no bridge kind 'no-such-kind' is installed" in (read_states(db)["gone"].last_error or "")

"""SIGKILL of a real ``edgeq bridge run`` at each step of each direction, then a clean run: nothing is
lost; into the queue nothing is doubled (the redelivery is recognised), into MQTT at most the batch in
hand is (each copy carrying its edgeq uid)."""

from __future__ import annotations

import signal
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from edgeq import Message, QueueManager
from edgeq.sync.bridges.book import define_bridge
from edgeq.sync.bridges.mapping import UID_PROPERTY
from edgeq.sync.bridges.status import read_states
from tests.sync.bridges.conftest import Broker, Device
from tests.sync.bridges.kit import bridge_run
from tests.waits import until


def connected(db: Path, name: str, process: subprocess.Popen[bytes]) -> bool:
    assert process.poll() is None, f"the bridge exited early ({process.returncode})"
    state = read_states(db).get(name)
    return state is not None and state.connected and state.pid == process.pid


def stop(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGTERM)
    assert process.wait(10) == 0


#: Redeliveries of the batch of three the second run recognises, by step: killed after its put (none
#: acknowledged), and after the first acknowledgement was handed to paho, which may not have sent it yet.
IN_DUPLICATES = {"in.received": (0,), "in.stored": (3,), "in.acked": (2, 3)}


@pytest.mark.parametrize("step", sorted(IN_DUPLICATES))
def test_in_bridge_killed_at_each_step_loses_and_doubles_nothing(
    tmp_path: Path, broker: Broker, device: Device, step: str
) -> None:
    db, log, name = tmp_path / "dev.db", tmp_path / "bridge.log", f"crash-{step.replace('.', '-')}"
    with QueueManager(db, name="DEV1") as qm:
        qm.define_queue("IN")
        define_bridge(qm, name, "mqtt-in", "IN", {"url": broker.url, "topics": [f"{name}/#"], "qos": 2,
                                                  "batch": 3, "linger_ms": 1000})  # the three in one batch
        first = bridge_run(db, name, log, crash_at=step)
        until(lambda: connected(db, name, first), "the bridge connected", 15)
        sent = [device.publish(f"{name}/r", f"reading {i}".encode(), qos=2, wait=False,
                               MessageExpiryInterval=600) for i in range(3)]  # in one burst: one batch
        for info in sent:
            info.wait_for_publish(10)
        assert first.wait(15) == -signal.SIGKILL
        again = bridge_run(db, name, log)
        until(lambda: qm.depth("IN") >= 3, "the three readings on the queue", 15)
        until(lambda: connected(db, name, again), "the second run connected", 15)
        stop(again)
        got = [m.data for m in qm.browse("IN")]
        assert sorted(got) == [b"reading 0", b"reading 1", b"reading 2"], log.read_text()
        assert read_states(db)[name].duplicates in IN_DUPLICATES[step]  # recognised and dropped


#: Copies of the batch in hand (the three messages) when the bridge was killed that may reach MQTT twice,
#: by step: killed once its PUBLISHes were handed to paho, or before confirming those acknowledged (one to
#: three: the answers are confirmed as they come).
OUT_DUPLICATES = {"out.got": (0,), "out.sent": (0, 1, 2, 3), "out.acknowledged": (1, 2, 3),
                  "out.confirmed": (0,)}


@pytest.mark.parametrize("step", sorted(OUT_DUPLICATES))
def test_out_bridge_killed_at_each_step_loses_nothing(
    tmp_path: Path, broker: Broker, device: Device, step: str
) -> None:
    db, log, name = tmp_path / "dev.db", tmp_path / "bridge.log", f"crash-{step.replace('.', '-')}"
    device.subscribe(f"{name}/out", qos=2)
    with QueueManager(db, name="DEV1") as qm:
        qm.define_queue("OUT", redelivery_delay_ms=0)
        uids = {str(qm.put("OUT", Message(f"order {i}".encode()).expire_after(600_000))) for i in range(3)}
        define_bridge(qm, name, "mqtt-out", "OUT", {"url": broker.url, "topics": [f"{name}/out"], "qos": 2})
        first = bridge_run(db, name, log, crash_at=step)
        assert first.wait(15) == -signal.SIGKILL
        again = bridge_run(db, name, log)
        until(lambda: qm.depth("OUT") == 0, "the queue emptied", 15)
        until(lambda: connected(db, name, again), "the second run connected", 15)  # its SIGTERM handled
        stop(again)
        received = Counter(dict(m.properties.UserProperty)[UID_PROPERTY] for m in device.wait_for(3))
        assert set(received) == uids, log.read_text()
        assert sum(received.values()) - len(uids) in OUT_DUPLICATES[step]

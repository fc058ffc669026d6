"""SIGKILL of a real ``edgeq bridge run`` at each step of each JetStream direction, then a clean run:
nothing is lost; into the queue nothing is doubled (a redelivery is recognised by its uid), and into
the stream nothing is doubled either (the resend carries the same Nats-Msg-Id)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from edgeq import Message, QueueManager
from edgeq.sync.bridges.book import define_bridge
from edgeq.sync.bridges.jsmapping import MSG_ID_HEADER, SUBJECT
from edgeq.sync.bridges.status import read_states
from edgeq.types import DLQ_REFUSAL
from tests.sync.bridges.kit import bridge_run, running
from tests.sync.bridges.natscluster import NatsCluster, raw_publish
from tests.waits import until

#: Redeliveries of the batch of three the clean run recognises, by step: killed after its put (none
#: acknowledged), and after the first acknowledgement was handed to nats-py, which may not have sent it.
IN_DUPLICATES = {"in.received": (0,), "in.stored": (3,), "in.acked": (2, 3)}


@pytest.mark.parametrize("step", sorted(IN_DUPLICATES))
def test_in_bridge_killed_at_each_step_loses_and_doubles_nothing(
    tmp_path: Path, cluster: NatsCluster, step: str
) -> None:
    db, log, name = tmp_path / "dev.db", tmp_path / "bridge.log", f"crash-{step.replace('.', '-')}"
    stream = name.replace("-", "_").upper()
    cluster.add_stream(stream, [f"{stream}.>"])
    for i in range(3):
        cluster.publish(f"{stream}.r", f"reading {i}".encode(), msg_ttl=600)
    with QueueManager(db, name="DEV1") as qm:
        qm.define_queue("IN")
        define_bridge(qm, name, "jetstream-in", "IN", {"url": cluster.url, "stream": stream,
                                                       "topics": [f"{stream}.>"], "ack_wait_s": 1,
                                                       "batch": 3})
        first = bridge_run(db, name, log, crash_at=step)
        assert first.wait(20) == -signal.SIGKILL, log.read_text()
        with running(qm, [name]) as runner:  # the clean run; JetStream redelivers after ack_wait_s
            until(lambda: qm.depth("IN") >= 3, "the three readings on the queue", 15)
            board = runner.bridges[0].board
            expected = 2 if step == "in.acked" else 3  # in.acked: the first acknowledged may come again
            until(lambda: board.state().forwarded + board.state().duplicates >= expected,
                  "the clean run's deliveries")
        got = [m.data for m in qm.browse("IN")]
        assert sorted(got) == [b"reading 0", b"reading 1", b"reading 2"], log.read_text()
        assert read_states(db)[name].duplicates in IN_DUPLICATES[step]  # recognised and dropped


def test_a_mixed_batch_is_put_in_full_before_any_of_it_is_acknowledged(
    tmp_path: Path, cluster: NatsCluster
) -> None:
    db, log = tmp_path / "dev.db", tmp_path / "bridge.log"
    cluster.add_stream("MIXED", ["mixed.>"])
    cluster.publish("mixed.a", b"good 1")
    cluster.publish("mixed.big", b"x" * 1001)
    raw_publish(cluster, "mixed.noline", b"NATS/1.0\r\nno colon here\r\n\r\n", b"bad")
    cluster.publish("mixed.b", b"good 2")
    with QueueManager(db, name="DEV1") as qm:
        qm.define_queue("IN")
        define_bridge(qm, "mix", "jetstream-in", "IN", {"url": cluster.url, "stream": "MIXED", "batch": 4,
                                                        "topics": ["mixed.>"], "ack_wait_s": 1,
                                                        "max_payload_bytes": 1000})
        first = bridge_run(db, "mix", log, crash_at="in.stored")  # killed after the batch's put
        assert first.wait(20) == -signal.SIGKILL, log.read_text()
        assert sorted(m.data for m in qm.browse("IN")) == [b"good 1", b"good 2"]
        dead = {m.fields[SUBJECT]: str(m.fields[DLQ_REFUSAL]) for m in qm.dlq_browse()}
        assert sorted(dead) == ["mixed.big", "mixed.noline"]
        assert "over the bridge's max_payload_bytes 1000" in dead["mixed.big"]
        assert "not NAME: VALUE" in dead["mixed.noline"]
        with running(qm, ["mix"]) as runner:  # none was acknowledged: JetStream delivers all four again
            board = runner.bridges[0].board
            until(lambda: board.state().duplicates == 2 and board.state().refused == 2,
                  "the two good ones recognised and the two hostile ones refused again")
        assert sorted(m.data for m in qm.browse("IN")) == [b"good 1", b"good 2"]
        assert len(qm.dlq_browse()) == 2
    assert cluster.count("MIXED") == 4


#: Resends of the batch in hand (the three messages) the stream recognised by their Nats-Msg-Id (PubAck
#: duplicate), by step.
OUT_DUPLICATES = {"out.got": (0,), "out.sent": (0, 1, 2, 3), "out.acknowledged": (3,), "out.confirmed": (0,)}


@pytest.mark.parametrize("step", sorted(OUT_DUPLICATES))
def test_out_bridge_killed_at_each_step_sends_each_message_into_the_stream_once(
    tmp_path: Path, cluster: NatsCluster, step: str
) -> None:
    db, log, name = tmp_path / "dev.db", tmp_path / "bridge.log", f"crash-{step.replace('.', '-')}"
    stream = "OUT_" + name.replace("-", "_").upper()
    cluster.add_stream(stream, [f"{stream}.>"])
    with QueueManager(db, name="DEV1") as qm:
        qm.define_queue("OUT", redelivery_delay_ms=0)
        uids = {str(qm.put("OUT", Message(f"order {i}".encode()).expire_after(600_000))) for i in range(3)}
        define_bridge(qm, name, "jetstream-out", "OUT",
                      {"url": cluster.url, "stream": stream, "topics": [f"{stream}.out"]})
        first = bridge_run(db, name, log, crash_at=step)
        assert first.wait(20) == -signal.SIGKILL, log.read_text()
        with running(qm, [name]) as runner:
            until(lambda: qm.depth("OUT") == 0, "the queue emptied", 15)
            duplicates = runner.bridges[0].board.state().duplicates
        assert cluster.count(stream) == 3, log.read_text()  # exactly once into the stream
        assert {h[MSG_ID_HEADER] for h, _, _ in cluster.stored(stream, f"{stream}.out", 3)} == uids
        assert duplicates in OUT_DUPLICATES[step]

"""The JetStream bridges against a real three-node cluster: every field both ways, the expiry across
the hop by one shared clock, hostile input from the stream's side, a node killed during a forward, and
streams that cannot carry expiry refused when the bridge is defined."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from nats.js.api import DiscardPolicy
from nats.js.client import JetStreamContext

from edgeq import Message, QueueManager
from edgeq.sync.bridges.book import bridge_definitions, define_bridge
from edgeq.sync.bridges.errors import BridgeConfigError
from edgeq.sync.bridges.jsmapping import HEADERS, MSG_ID, MSG_ID_HEADER, SEQ, STREAM, SUBJECT, TTL_HEADER
from edgeq.sync.bridges.mapping import SECOND_MS
from edgeq.sync.bridges.status import read_states
from edgeq.types import DLQ_REFUSAL
from tests.sync.bridges.kit import running
from tests.sync.bridges.natscluster import NatsCluster, raw_publish
from tests.waits import until


def test_a_message_crosses_both_bridges_with_every_field(tmp_path: Path, cluster: NatsCluster) -> None:
    cluster.add_stream("RT", ["rt.>"])
    with QueueManager(tmp_path / "dev.db", name="DEV1") as qm:
        qm.define_queue("READINGS")
        base = {"url": cluster.url, "stream": "RT"}
        define_bridge(qm, "jin", "jetstream-in", "READINGS", {**base, "topics": ["rt.in.>"]})
        define_bridge(qm, "jout", "jetstream-out", "READINGS", {**base, "topics": ["rt.out"]})
        cluster.publish("rt.in.t1", "21.5 °C".encode(), msg_ttl=3600, headers={
            "Content-Type": "text/plain", MSG_ID_HEADER: "sensor-1", "X-Site": "é"})
        with running(qm, ["jin"]):
            until(lambda: qm.depth("READINGS") == 1, "the message on the queue")
        (got,) = qm.browse("READINGS")
        assert got.data == "21.5 °C".encode()
        assert dict(got.fields) == {SUBJECT: "rt.in.t1", STREAM: "RT", SEQ: 1, MSG_ID: "sensor-1",
                                    HEADERS: json.dumps([["Content-Type", "text/plain"], ["X-Site", "é"]],
                                                        ensure_ascii=False)}
        assert got.remaining_expiry_ms is not None and 3_590_000 < got.remaining_expiry_ms <= 3_600_000
        with running(qm, ["jout"]):
            until(lambda: qm.depth("READINGS") == 0, "the get confirmed after the PubAck")
        ((headers, data, _),) = cluster.stored("RT", "rt.out", 1)
        assert data == "21.5 °C".encode()
        assert headers[MSG_ID_HEADER] == str(got.uid)  # the stream's duplicate window knows it by its uid
        assert (headers["Content-Type"], headers["X-Site"]) == ("text/plain", "é")
        assert 3589 <= int(headers[TTL_HEADER]) < 3600


def test_no_hop_extends_the_deadline(tmp_path: Path, cluster: NatsCluster) -> None:
    """One shared clock (the wall clock: the queue manager's and the servers'): queue A -> out-bridge ->
    stream -> in-bridge -> queue B; the stream's deadline is its stamp plus the TTL."""
    cluster.add_stream("EXP", ["exp.>"])
    with QueueManager(tmp_path / "dev.db", name="DEV1") as qm:
        qm.define_queue("A")
        qm.define_queue("B")
        base = {"url": cluster.url, "stream": "EXP"}
        define_bridge(qm, "eout", "jetstream-out", "A", {**base, "topics": ["exp.mid"], "ttl_margin_ms": 100})
        define_bridge(qm, "ein", "jetstream-in", "B", {**base, "topics": ["exp.mid"]})
        deadline_a = qm.now_ms() + 20_000 + 437  # not on a second, so the rounding shows
        qm.put("A", Message(b"reading").expire_at(deadline_a))
        with running(qm, ["eout"]):
            left = qm.now_ms()
            until(lambda: qm.depth("A") == 0, "forwarded")
            hop = qm.now_ms() - left
        ((headers, _, stamp_ns),) = cluster.stored("EXP", "exp.mid", 1)
        in_stream = stamp_ns // 1_000_000 + int(headers[TTL_HEADER]) * SECOND_MS
        assert in_stream <= deadline_a + 1  # never later (1 ms: the stamp's ns rounded to ms)
        assert deadline_a - in_stream <= hop + 100 + SECOND_MS  # early by the hop, the margin, the rounding
        with running(qm, ["ein"]):
            until(lambda: qm.depth("B") == 1, "on B")
        (on_b,) = qm.browse("B")
        assert on_b.expiry is not None
        assert in_stream - 1 <= int(on_b.expiry) <= in_stream  # the stream's own deadline, to the ms


def test_hostile_messages_go_to_the_dead_letter_queue_and_the_rest_flows(
    tmp_path: Path, cluster: NatsCluster
) -> None:
    cluster.add_stream("HOST", ["h.>"])
    db = tmp_path / "dev.db"
    with QueueManager(db, name="DEV1") as qm:
        qm.define_queue("IN")
        define_bridge(qm, "h", "jetstream-in", "IN",
                      {"url": cluster.url, "stream": "HOST", "topics": ["h.>"], "max_payload_bytes": 1000})
        raw_publish(cluster, "h.noline", b"NATS/1.0\r\nX-Ok: 1\r\nno colon here\r\n\r\n", b"a")
        raw_publish(cluster, "h.binary", b"NATS/1.0\r\nX-Bin: \xff\xfe\r\n\r\n", b"b")
        raw_publish(cluster, "h.control", b"NATS/1.0\r\nX-Ctl: a\x01b\r\n\r\n", b"c")
        cluster.publish("h.big", b"x" * 1001)
        raw_publish(cluster, "h.ok", b"NATS/1.0\r\nX-A: 1\r\nX-A: 2\r\n\r\n", b"fine")
        with running(qm, ["h"]) as runner:
            until(lambda: qm.depth("IN") == 1, "the good one stored")
            until(lambda: runner.bridges[0].board.state().refused == 4, "four refused")
        (good,) = qm.browse("IN")
        assert good.data == b"fine" and good.fields[HEADERS] == '[["X-A", "1"], ["X-A", "2"]]'
        dead = {m.fields[SUBJECT]: m for m in qm.dlq_browse()}
        assert sorted(dead) == ["h.big", "h.binary", "h.control", "h.noline"]
        assert dead["h.big"].data == b"x" * 1001 and dead["h.noline"].data == b"a"
        why = {s: str(m.fields[DLQ_REFUSAL]) for s, m in dead.items()}
        assert "over the bridge's max_payload_bytes 1000" in why["h.big"]
        assert "is malformed: not NAME: VALUE" in why["h.noline"]
        assert "not UTF-8" in why["h.binary"] and "control characters" in why["h.control"]
        state = read_states(db)["h"]
        assert (state.forwarded, state.refused) == (1, 4)
        assert "refused message" in (state.last_error or "")
    assert cluster.count("HOST") == 5  # all acknowledged, none lost: the stream still has them all


def test_a_node_killed_during_a_forward_loses_nothing(tmp_path: Path, cluster: NatsCluster) -> None:
    cluster.add_stream("KILL", ["kill.>"])
    with QueueManager(tmp_path / "dev.db", name="DEV1") as qm:
        qm.define_queue("OUT", redelivery_delay_ms=0)
        define_bridge(qm, "k", "jetstream-out", "OUT", {"url": cluster.url, "stream": "KILL",
                                                        "topics": ["kill.out"], "ack_timeout_s": 1,
                                                        "retry_max_s": 0.2})
        uids = {str(qm.put("OUT", Message(f"m{i}".encode()))) for i in range(60)}
        with running(qm, ["k"]) as runner:
            until(lambda: runner.bridges[0].board.state().forwarded >= 5, "forwarding under way")
            leader = cluster.js(lambda js: js.stream_info("KILL")).cluster
            assert leader is not None and leader.leader is not None
            cluster.kill(leader.leader)  # the stream's leader, mid-forward
            uids |= {str(qm.put("OUT", Message(f"late{i}".encode()))) for i in range(10)}
            until(lambda: qm.depth("OUT") == 0, "every message forwarded", 30)  # a new leader: 4 to 9 s
        assert cluster.count("KILL") == len(uids)  # none lost, none stored twice
    cluster.start(int(leader.leader.removeprefix("n")))  # the three nodes again, for what follows
    assert {h[MSG_ID_HEADER] for h, _, _ in cluster.stored("KILL", "kill.out", len(uids))} == uids


def test_a_stream_that_cannot_carry_expiry_is_refused_when_defined(
    tmp_path: Path, cluster: NatsCluster
) -> None:
    cluster.add_stream("NOTTL", ["nottl.>"], allow_msg_ttl=False)
    cluster.add_stream("TTL", ["ttl.>"])
    db = tmp_path / "dev.db"
    with QueueManager(db, name="DEV1") as qm:
        qm.define_queue("Q")
    cli = subprocess.run(
        [sys.executable, "-m", "edgeq", "--db", str(db), "bridge", "define", "up", "--kind", "jetstream-out",
         "--queue", "Q", "--broker", cluster.url, "--topic", "nottl.up", "--set", "stream=NOTTL"],
        capture_output=True, text=True, timeout=30, env=os.environ)
    assert cli.returncode == 1
    assert "stream NOTTL does not allow a per-message TTL" in cli.stderr and "allow_msg_ttl" in cli.stderr
    with QueueManager(db) as qm:
        cases = [
            ({"stream": "TTL", "topics": ["nottl.up"]}, "is not stored by stream TTL"),
            ({"stream": "NONE", "topics": ["ttl.up"]}, "no JetStream stream 'NONE'"),
            ({"stream": "TTL", "topics": ["ttl.*"]}, "one subject without wildcards"),
            ({"stream": "TTL", "topics": ["ttl.up"], "url": "nats://127.0.0.1:1"},
             "define it while NATS is up"),
        ]
        for config, why in cases:
            with pytest.raises(BridgeConfigError, match=why):
                define_bridge(qm, "up", "jetstream-out", "Q", {"url": cluster.url, **config})
        with pytest.raises(BridgeConfigError, match="durable must be a consumer name"):
            define_bridge(qm, "in", "jetstream-in", "Q",
                          {"url": cluster.url, "stream": "TTL", "topics": ["ttl.>"], "durable": "a.b"})
        assert bridge_definitions(db) == []
        define_bridge(qm, "up", "jetstream-out", "Q",
                      {"url": cluster.url, "stream": "TTL", "topics": ["ttl.up"]})
        assert [d.name for d in bridge_definitions(db)] == ["up"]


def test_a_full_queue_leaves_the_message_with_the_stream_until_there_is_room(
    tmp_path: Path, cluster: NatsCluster
) -> None:
    cluster.add_stream("FULL", ["full.>"])
    with QueueManager(tmp_path / "dev.db", name="DEV1") as qm:
        qm.define_queue("IN", max_depth=1)
        define_bridge(qm, "full", "jetstream-in", "IN",
                      {"url": cluster.url, "stream": "FULL", "topics": ["full.>"], "retry_max_s": 0.2})
        for data in (b"first", b"second"):
            cluster.publish("full.a", data)
        with running(qm, ["full"]) as runner:
            board = runner.bridges[0].board
            until(lambda: "QueueFull" in (board.state().last_error or ""), "the full queue reported")
            assert [m.data for m in qm.browse("IN")] == [b"first"]
            first = qm.get("IN")
            assert first is not None and first.data == b"first"
            until(lambda: qm.depth("IN") == 1, "the second one stored once there was room")
        assert [m.data for m in qm.browse("IN")] == [b"second"]
        assert qm.dlq_browse() == [] and board.state().refused == 0


def test_a_consumer_deleted_under_a_running_bridge_is_reported_and_made_again(
    tmp_path: Path, cluster: NatsCluster, caplog: pytest.LogCaptureFixture
) -> None:
    cluster.add_stream("GONE", ["gone.>"])
    with QueueManager(tmp_path / "dev.db", name="DEV1") as qm:
        qm.define_queue("IN")
        define_bridge(qm, "g", "jetstream-in", "IN", {"url": cluster.url, "stream": "GONE", "durable": "g1",
                                                      "topics": ["gone.>"], "ack_wait_s": 1,
                                                      "retry_max_s": 0.2})
        with running(qm, ["g"]):
            cluster.js(lambda js: js.delete_consumer("GONE", "g1"))
            # Reported in the log (the board's last error may already say the reconnection's next one).
            until(lambda: any("consumer g1 of stream GONE is gone" in r.getMessage() for r in caplog.records),
                  "the deleted consumer reported", 10)
            cluster.publish("gone.a", b"after")
            until(lambda: qm.depth("IN") == 1, "the message through the consumer made again", 10)
        assert [m.data for m in qm.browse("IN")] == [b"after"]


def test_a_message_the_stream_refuses_is_backed_out_and_the_rest_flows(
    tmp_path: Path, cluster: NatsCluster
) -> None:
    cluster.add_stream("SMALL", ["small.>"], max_msg_size=100)
    with QueueManager(tmp_path / "dev.db", name="DEV1") as qm:
        qm.define_queue("BACK")
        qm.define_queue("OUT", redelivery_delay_ms=0, backout_threshold=2, backout_queue="BACK")
        define_bridge(qm, "s", "jetstream-out", "OUT",
                      {"url": cluster.url, "stream": "SMALL", "topics": ["small.out"]})
        qm.put("OUT", Message(b"x" * 200))
        qm.put("OUT", Message(b"fits"))
        with running(qm, ["s"]) as runner:
            until(lambda: qm.depth("OUT") == 0, "the queue emptied")
            last_error = runner.bridges[0].board.state().last_error or ""
        assert [m.data for m in qm.browse("BACK")] == [b"x" * 200]
        assert "was refused by stream SMALL" in last_error
    ((_, data, _),) = cluster.stored("SMALL", "small.out", 1)
    assert data == b"fits" and cluster.count("SMALL") == 1


def test_a_message_over_the_servers_max_payload_is_dead_lettered_unsent(
    tmp_path: Path, cluster: NatsCluster
) -> None:
    """The server's max_payload (its INFO) counts the headers too: a message over it, or under it but over
    with its headers, goes to the dead-letter queue before it is published, the rest flow."""
    cluster.add_stream("BIG", ["big.>"])
    most = 1024 * 1024  # nats-server's default max_payload
    with QueueManager(tmp_path / "dev.db", name="DEV1") as qm:
        qm.define_queue("OUT", redelivery_delay_ms=0)
        over = str(qm.put("OUT", Message(b"o" * (most + 1))))
        headed = str(qm.put("OUT", Message(b"h" * (most - 10))))
        fits = str(qm.put("OUT", Message(b"fits")))
        define_bridge(qm, "b", "jetstream-out", "OUT",
                      {"url": cluster.url, "stream": "BIG", "topics": ["big.out"], "retry_max_s": 0.2})
        with running(qm, ["b"]) as runner:
            board = runner.bridges[0].board
            until(lambda: qm.depth("OUT") == 0 and board.state().forwarded == 1, "the queue drained")
            state = board.state()
        dead = {str(m.uid): str(m.fields[DLQ_REFUSAL]) for m in qm.dlq_browse(queue="OUT")}
    assert set(dead) == {over, headed}
    assert all(f"over the NATS server's max_payload ({most} bytes" in why for why in dead.values()), dead
    assert state.refused == 2 and state.errors == 2 and "max_payload" in (state.last_error or "")
    assert [h[MSG_ID_HEADER] for h, _, _ in cluster.stored("BIG", "big.out", 1)] == [fits]
    assert cluster.count("BIG") == 1


def test_a_batch_the_stream_takes_in_part_confirms_what_it_acknowledged(
    tmp_path: Path, cluster: NatsCluster
) -> None:
    """A stream full at five messages (discard new) acknowledges five of a batch of ten and answers 503 to
    the rest: the five confirmed, the rest back on the queue (the status says the stream is full), and
    each stored once when there is room."""
    cluster.add_stream("PART", ["part.>"], max_msgs=5, discard=DiscardPolicy.NEW)
    db = tmp_path / "dev.db"
    with QueueManager(db, name="DEV1") as qm:
        qm.define_queue("OUT", redelivery_delay_ms=0)
        uids = [str(qm.put("OUT", Message(f"m{i}".encode()))) for i in range(10)]
        define_bridge(qm, "p", "jetstream-out", "OUT",
                      {"url": cluster.url, "stream": "PART", "topics": ["part.out"], "retry_max_s": 0.2})
        with running(qm, ["p"]) as runner:
            board = runner.bridges[0].board
            until(lambda: board.state().forwarded == 5 and board.state().errors >= 1,
                  "five stored, the rest not")
        last_error = read_states(db)["p"].last_error or ""
        assert "stream PART is full (" in last_error and "maximum messages exceeded" in last_error, last_error
        assert cluster.count("PART") == 5
        left = qm.browse("OUT")
        assert len(left) == 5 and {m.backout_count for m in left} == {0}  # JetStream busy: not their fault
        stored = {h[MSG_ID_HEADER] for h, _, _ in cluster.stored("PART", "part.out", 5)}
        assert stored | {str(m.uid) for m in left} == set(uids)  # the acknowledged ones left the queue

        async def room(js: JetStreamContext) -> None:
            config = (await js.stream_info("PART")).config
            config.max_msgs = -1
            await js.update_stream(config)

        cluster.js(room)
        with running(qm, ["p"]) as runner:
            until(lambda: qm.depth("OUT") == 0, "the rest forwarded")
            assert runner.bridges[0].board.state().duplicates == 0
    assert cluster.count("PART") == 10  # each once
    assert {h[MSG_ID_HEADER] for h, _, _ in cluster.stored("PART", "part.out", 10)} == set(uids)

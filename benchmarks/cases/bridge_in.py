"""The in-bridges' throughput floor (issue 32): broker -> edgeq queue, beside the broker's own Python client.

**MQTT** (QoS 1). Per round: a private mosquitto (persistence on, ``max_inflight_messages``
``mqtt_inflight``); a child makes two persistent sessions subscribed to one topic at QoS 1, the
bridge's client id and a paho consumer's; paho publishes ``bridge_messages`` payloads at QoS 1
(row ``paho-publish``), so both sessions hold the same backlog. Then, in alternating order, a child
runs the mqtt-in bridge (its default batch and linger) until every message is on its queue (row
``edgeq-mqtt-in``), and a child consumes the session with paho, acknowledging each (``paho-consume``).

**JetStream** (acks). Per round: a one-node nats-server; nats-py makes the stream and publishes the
same payloads, each awaiting its PubAck, ``mqtt_inflight`` at a time (``nats-py-publish``); then the
jetstream-in bridge (``edgeq-jetstream-in``) and a nats-py pull consumer fetching ``JS_BATCH`` at a
time and acknowledging each (``nats-py-consume``), each a durable consumer of its own.

The bridge rows carry ``vs_consume`` and ``vs_publish``; the floor is judged on ``vs_publish`` (the
issue's words; see benchmarks/README.md). **Memory**: the bridge's peak RSS taking in ``bridge_backlog`` and
twice it (a row of each size) beside its peak at ``bridge_messages`` (README, "Memory flat").
"""

from __future__ import annotations

import functools
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.peers.base import payload_index
from benchmarks.peers.mqtt_peer import Broker
from benchmarks.peers.nats_peer import NatsServer, nats_availability
from benchmarks.results import Result, median_round
from benchmarks.runner import ChildError, Context
from benchmarks.timing import peak_rss_mb

__all__ = ["JS_BATCH", "JS_ROWS", "MQTT_ROWS", "child_bridge", "child_paho_consume", "child_sessions", "run"]

CASE = "bridge_in"
#: Per broker: the bridge's row, its own client consuming, its own client publishing.
MQTT_ROWS = ("edgeq-mqtt-in", "paho-consume", "paho-publish")
JS_ROWS = ("edgeq-jetstream-in", "nats-py-consume", "nats-py-publish")
TOPIC = "bench/in"
BRIDGE_ID, PAHO_ID = "edgeq-bench-bridge-in", "edgeq-bench-paho-in"
STREAM, SUBJECT = "BENCH", "BENCH.in"
#: Messages per fetch, the jetstream-in bridge's and the nats-py consumer's alike.
JS_BATCH = 256


# -- child side ---------------------------------------------------------------------------


def _mqtt5(client_id: str, port: int, on_message: Callable[..., None] | None = None) -> Any:
    """A connected MQTT 5 client with a persistent session (a week), its network loop running."""
    from paho.mqtt.client import Client
    from paho.mqtt.enums import CallbackAPIVersion, MQTTProtocolVersion
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties

    client = Client(CallbackAPIVersion.VERSION2, client_id=client_id, protocol=MQTTProtocolVersion.MQTTv5)
    connected = threading.Event()
    client.on_connect = lambda *_: connected.set()
    if on_message is not None:
        client.on_message = on_message  # before connecting: a resumed session's backlog comes at once
    props = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
    props.SessionExpiryInterval = 7 * 86_400
    client.connect("127.0.0.1", port, clean_start=False, properties=props)
    client.loop_start()
    if not connected.wait(20):
        raise RuntimeError(f"no CONNACK for {client_id} from 127.0.0.1:{port}")
    return client


def child_sessions(spec: dict[str, Any]) -> dict[str, Any]:
    """Make a persistent session per client id, subscribed to ``topic`` at QoS 1, and leave it."""
    for client_id in spec["client_ids"]:
        client = _mqtt5(client_id, int(spec["port"]))
        done = threading.Event()
        client.on_subscribe = lambda *_, done=done: done.set()
        client.subscribe(spec["topic"], qos=1)
        if not done.wait(20):
            raise RuntimeError("no SUBACK")
        client.disconnect()
        client.loop_stop()
    return {"metrics": {"sessions": float(len(spec["client_ids"]))}}


def child_paho_consume(spec: dict[str, Any]) -> dict[str, Any]:
    """Resume the paho session and take its backlog at QoS 1 (paho acknowledges each after its
    callback), until ``messages`` distinct ones came; timed from connecting."""
    n = int(spec["messages"])
    counts: Counter[int] = Counter()
    complete = threading.Event()

    def received(_c: Any, _u: Any, message: Any) -> None:
        counts[payload_index(message.payload)] += 1
        if len(counts) >= n:
            complete.set()

    cpu, start = time.process_time(), time.perf_counter()
    client = _mqtt5(PAHO_ID, int(spec["port"]), received)
    client.subscribe(spec["topic"], qos=1)  # as the bridge does on every connection
    finished = complete.wait(float(spec["budget_s"]))
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    client.disconnect()
    client.loop_stop()
    if not finished:
        raise RuntimeError(f"the paho consumer got {len(counts)} of {n} messages within the budget")
    return {"metrics": {"messages": float(n), "seconds": seconds, "msgs_per_s": n / seconds,
                        "duplicates": float(sum(counts.values()) - len(counts)), "client_cpu_s": cpu}}


def child_bridge(spec: dict[str, Any]) -> dict[str, Any]:
    """Run an in-bridge (``kind``, ``config``) in this process until its queue holds ``messages``;
    then check each payload is there once, and report the peak RSS."""
    from edgeq import QueueManager
    from edgeq.sync.bridges.book import define_bridge
    from edgeq.sync.bridges.runner import BridgeRunner, BridgeThread

    n = int(spec["messages"])
    with QueueManager(Path(spec["db"]), name="BENCH") as qm:
        qm.define_queue("IN")
        define_bridge(qm, "in", spec["kind"], "IN", spec["config"])
        baseline = peak_rss_mb()
        cpu, start = time.process_time(), time.perf_counter()
        runner = BridgeRunner(qm, ["in"])
        board, thread = runner.bridges[0].board, BridgeThread(runner)
        thread.start()
        stop, deadline = threading.Event(), time.monotonic() + float(spec["budget_s"])
        # The bridge's own count of what it put (after each batch's commit), as bridge_out reads it: polling
        # qm.depth instead would take the store's write lock 500 times a second (depth is an expiry check
        # point), competing with the bridge it measures. The queue is counted whole below.
        while board.state().forwarded < n and time.monotonic() < deadline:
            stop.wait(0.002)  # the figure's resolution: a few ms in seconds
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        if not thread.stop(30):
            raise RuntimeError("the bridge did not stop")
        peak = peak_rss_mb()
        counts = Counter(payload_index(m.data) for m in qm.browse("IN"))
    if len(counts) != n or sum(counts.values()) != n:
        raise RuntimeError(f"the bridge stored {sum(counts.values())} messages, {len(counts)} distinct, "
                           f"of {n}")
    return {"metrics": {"messages": float(n), "seconds": seconds, "msgs_per_s": n / seconds,
                        "peak_rss_mb": peak, "baseline_rss_mb": baseline, "bridge_cpu_s": cpu}}


# -- runner side --------------------------------------------------------------------------


def _row(ctx: Context, lib: str, action: str, spec: dict[str, Any], size: int) -> Result:
    """One child's figures as a row, or the row of its error."""
    ctx.log(f"  {CASE} {lib} @ {size:,}")
    try:
        got = ctx.child(action, spec)
    except ChildError as exc:
        return Result(CASE, lib, "error", size, note=str(exc)[-400:])
    return Result(CASE, lib, "ok", size, metrics=got["metrics"], info=got.get("info", {}))


def _mqtt_round(ctx: Context, binary: str, n: int, number: int, memory: bool) -> list[Result]:
    """A mosquitto with a backlog of ``n`` published by paho, taken by the bridge and (not ``memory``)
    by paho, in an order alternating with ``number``."""
    s = ctx.settings
    where = ctx.scratch("bridge-in-mqtt")
    budget = s.child_timeout_s / 2
    try:
        with Broker(binary, where, inflight=s.mqtt_inflight, autosave="periodic") as broker:
            port = broker.port
            ctx.child("bridge_in_sessions", {"port": port, "topic": TOPIC,
                                             "client_ids": [BRIDGE_ID] if memory else [BRIDGE_ID, PAHO_ID]})
            publish = _row(ctx, "paho-publish", "mqtt_publish", {
                "port": port, "messages": n, "inflight": s.mqtt_inflight, "budget_s": budget,
                "payload_bytes": s.payload_bytes, "qos": 1, "topic": TOPIC}, n)
            if publish.status != "ok":
                return [publish]
            config = {"url": f"mqtt://127.0.0.1:{port}", "topics": [TOPIC], "qos": 1, "client_id": BRIDGE_ID}
            steps = [functools.partial(_row, ctx, "edgeq-mqtt-in", "bridge_in_edgeq", {
                "db": str(where / "bridge.db"), "kind": "mqtt-in", "config": config, "messages": n,
                "budget_s": budget}, n)]
            if memory:
                return [steps[0]()]
            steps.append(functools.partial(_row, ctx, "paho-consume", "bridge_in_paho", {
                "port": port, "topic": TOPIC, "messages": n, "budget_s": budget}, n))
            return [publish, *(step() for step in steps[::-1 if number % 2 else 1])]
    except (ChildError, RuntimeError) as exc:
        return [Result(CASE, lib, "error", n, note=str(exc)[-400:]) for lib in MQTT_ROWS[:1 if memory else 3]]
    finally:
        ctx.discard(where)


def _js_round(ctx: Context, binary: str, n: int, number: int, memory: bool) -> list[Result]:
    """A nats-server with a stream of ``n`` published by nats-py, taken by the bridge and (not
    ``memory``) by a nats-py pull consumer, in an order alternating with ``number``."""
    s = ctx.settings
    where = ctx.scratch("bridge-in-nats")
    budget = s.child_timeout_s / 2
    try:
        with NatsServer(Path(binary), where) as server:
            publish = _row(ctx, "nats-py-publish", "nats_publish", {
                "url": server.url, "stream": STREAM, "subjects": [f"{STREAM}.>"], "subject": SUBJECT,
                "create": True, "messages": n, "inflight": s.mqtt_inflight,
                "payload_bytes": s.payload_bytes}, n)
            if publish.status != "ok":
                return [publish]
            config = {"url": server.url, "stream": STREAM, "topics": [SUBJECT], "durable": "bridge",
                      "batch": JS_BATCH}
            steps = [functools.partial(_row, ctx, "edgeq-jetstream-in", "bridge_in_edgeq", {
                "db": str(where / "bridge.db"), "kind": "jetstream-in", "config": config, "messages": n,
                "budget_s": budget}, n)]
            if memory:
                return [steps[0]()]
            steps.append(functools.partial(_row, ctx, "nats-py-consume", "nats_consume", {
                "url": server.url, "stream": STREAM, "subject": SUBJECT, "durable": "nats_py",
                "batch": JS_BATCH, "messages": n, "budget_s": budget}, n))
            return [publish, *(step() for step in steps[::-1 if number % 2 else 1])]
    except (ChildError, RuntimeError) as exc:
        return [Result(CASE, lib, "error", n, note=str(exc)[-400:]) for lib in JS_ROWS[:1 if memory else 3]]
    finally:
        ctx.discard(where)


def _mosquitto(ctx: Context) -> tuple[str | None, str]:
    from benchmarks.cases.sync import mqtt_availability

    return mqtt_availability(ctx)


def _nats(ctx: Context) -> tuple[str | None, str]:
    return nats_availability()


def _side(ctx: Context, rows: tuple[str, ...], find: Callable[[Context], tuple[str | None, str]],
          one_round: Callable[[Context, str, int, int, bool], list[Result]]) -> list[Result]:
    """The rounds of one broker's rows (medians, the bridge's ratios), then the bridge's memory row."""
    s = ctx.settings
    n = s.bridge_messages
    binary, why = find(ctx)
    if binary is None:
        ctx.log(f"  {CASE}: {why}")
        return [Result(CASE, lib, "not available", n, note=why) for lib in rows]
    rounds: dict[str, list[Result]] = {lib: [] for lib in rows}
    for number in range(s.rounds):
        for result in one_round(ctx, binary, n, number, False):
            rounds[result.lib].append(result)
    merged = {lib: median_round(got) for lib, got in rounds.items() if got}
    bridge, consume, publish = (merged.get(lib) for lib in rows)
    if bridge is not None and bridge.status == "ok":
        for key, peer in (("vs_consume", consume), ("vs_publish", publish)):
            if peer is not None and peer.status == "ok":
                bridge.metrics[key] = bridge.metrics["msgs_per_s"] / peer.metrics["msgs_per_s"]
    # flat: no growth from one to twice the backlog (the first taken is warm-up: caches, allocator arenas)
    return [*merged.values(), *one_round(ctx, binary, s.bridge_backlog, 0, True),
            *one_round(ctx, binary, 2 * s.bridge_backlog, 0, True)]


def run(ctx: Context) -> list[Result]:
    """MQTT's rows, then JetStream's; each broker's rounds on a fresh broker (``--libs`` does not apply)."""
    return [*_side(ctx, MQTT_ROWS, _mosquitto, _mqtt_round), *_side(ctx, JS_ROWS, _nats, _js_round)]

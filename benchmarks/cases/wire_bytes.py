"""Bytes on the wire per message: edgeq sync (no compression, zlib, zstd; batches of 1,
10, 100, 500) beside MQTT QoS 2, counted at the TCP level by the same loopback relay.

**What is counted.** Every byte either end wrote to its socket, both directions,
through :mod:`benchmarks.proxy`: HTTP request lines and headers (the signature
headers included: the server requires signatures, as deployed), CBOR bodies,
answers; MQTT's CONNECT/CONNACK, each PUBLISH, PUBREC, PUBREL, PUBCOMP and the
DISCONNECT. Divided by the messages delivered. TCP/IP headers below that are the
same per segment for both and are not counted.

**Payloads.** Realistic telemetry (:mod:`benchmarks.telemetry`): JSON sensor readings
of ~200 bytes from a fixed seed, the same for every row; an edgeq message carries
the reading as its data and nothing else.

**edgeq.** One ``edgeq serve --auth`` for the whole case; per row a fresh device (its
own store, key, name), its remote queue with the row's ``compression``, filled,
then one ``SyncAgent.push_once()`` with the row's batch size through the relay:
its hello, and a put and a confirm per batch. Afterwards a child checks on the
server that every row's readings arrived exactly once.

**MQTT.** A private mosquitto (the sync case's, :class:`~benchmarks.peers.mqtt_peer.Broker`)
behind the relay; the sync case's publisher child sends the same readings at QoS 2
(one PUBLISH per reading: MQTT has no batches). No subscriber is connected: what a
publisher's link carries does not depend on one.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from benchmarks.homeserver import HomeServer, key_file, register_devices
from benchmarks.peers.mqtt_peer import Broker
from benchmarks.proxy import CountingProxy, Traffic
from benchmarks.results import Result
from benchmarks.runner import ChildError, Context

__all__ = ["CODECS", "child_push", "child_setup", "child_verify", "messages_for", "run"]

QUEUE = "TELEMETRY"
#: Row library -> the remote queue's compression.
CODECS: dict[str, str | None] = {"edgeq": None, "edgeq-zlib": "zlib", "edgeq-zstd": "zstd"}


def messages_for(batch: int, messages: int) -> int:
    """Messages a row sends: a quarter of the rest at batch 1 (a request pair each)."""
    return max(batch, messages // 4 if batch == 1 else messages)


def _device(lib: str, batch: int) -> str:
    return f"W-{lib.removeprefix('edgeq-') if lib != 'edgeq' else 'plain'}-{batch}"


# -- child side ---------------------------------------------------------------------------


def child_setup(spec: dict[str, Any]) -> dict[str, Any]:
    """The server's store (queue TELEMETRY) and every row's device registered with a key."""
    from edgeq import QueueManager

    server_db = Path(spec["server_db"])
    with QueueManager(server_db, name="HOME") as home:
        home.define_queue(QUEUE)
    register_devices(server_db, Path(spec["where"]), list(spec["devices"]), [QUEUE])
    return {"metrics": {"devices": float(len(spec["devices"]))}}


def child_push(spec: dict[str, Any]) -> dict[str, Any]:
    """A fresh device: fill its remote queue with readings, then one ``push_once`` through the relay."""
    from benchmarks.telemetry import mean_size, telemetry
    from edgeq import Message, QueueManager
    from edgeq.sync.agent.agent import SyncAgent
    from edgeq.sync.agent.signer import DeviceSigner

    name, n = spec["device"], int(spec["messages"])
    payloads = telemetry(n)
    qm = QueueManager(Path(spec["device_db"]), name=name)
    qm.define_remote_queue(QUEUE, target_qmgr="HOME", compression=spec["compression"])
    qm.put_many(QUEUE, [Message(p) for p in payloads])
    signer = DeviceSigner.from_file(name, Path(spec["key"]))
    agent = SyncAgent(qm, spec["url"], batch_size=int(spec["batch"]), auth=signer, timeout=60.0)
    try:
        report = agent.push_once()
        left = qm.depth(QUEUE)
    finally:
        agent.close()
        qm.close()
    if report.error or report.transmitted != n or left:
        raise RuntimeError(f"push_once: {report.transmitted} of {n} transmitted, {left} left: {report.error}")
    return {"metrics": {"messages": float(n), "batches": float(report.batches), "seconds": report.seconds,
                        "payload_bytes": mean_size(payloads)}}


def child_verify(spec: dict[str, Any]) -> dict[str, Any]:
    """Per device: the readings the (stopped) server holds, checked exactly once."""
    from benchmarks.telemetry import reading_seq
    from edgeq import QueueManager

    seen: dict[str, list[int]] = {}
    with QueueManager(Path(spec["server_db"])) as home:
        for m in home.browse(QUEUE):
            assert m.uid is not None
            seen.setdefault(m.uid.origin.split(":")[0], []).append(reading_seq(m.data))
    problems = {}
    for device, n in spec["devices"].items():
        got = seen.get(device, [])
        if sorted(got) != list(range(n)):
            problems[device] = f"{len(got)} stored, {len(set(got))} distinct of {n}"
    return {"metrics": {"stored": float(sum(map(len, seen.values())))}, "info": {"problems": problems}}


# -- runner side --------------------------------------------------------------------------


def _per_message(traffic: Traffic, n: int) -> dict[str, float]:
    return {"bytes_per_msg": traffic.total / n, "up_per_msg": traffic.up / n,
            "down_per_msg": traffic.down / n,
            "bytes_up": float(traffic.up), "bytes_down": float(traffic.down),
            "connections": float(traffic.connections)}


def _edgeq_rows(ctx: Context, libs: list[str]) -> list[Result]:
    s = ctx.settings
    rows = [(lib, batch) for batch in s.wire_batches for lib in libs]
    counts = {_device(lib, b): messages_for(b, s.wire_messages) for lib, b in rows}
    where = ctx.scratch("wire-edgeq")
    server_db = where / "home.db"
    out: list[Result] = []
    try:
        ctx.child("wire_setup", {"server_db": str(server_db), "where": str(where), "devices": list(counts)})
        with HomeServer(ctx, server_db, auth=True) as server, CountingProxy(ctx.spawn, server.port) as proxy:
            for lib, batch in rows:
                device = _device(lib, batch)
                n = counts[device]
                ctx.log(f"  wire_bytes {lib}: {n:,} readings in batches of {batch}")
                proxy.count()  # from zero
                try:
                    got = ctx.child("wire_push", {
                        "device": device, "device_db": str(where / f"{device}.db"), "messages": n,
                        "key": str(key_file(where, device)), "url": f"http://127.0.0.1:{proxy.port}",
                        "batch": batch, "compression": CODECS[lib]})
                except ChildError as exc:
                    ctx.log(f"    error: {exc}")
                    out.append(Result("wire_bytes", lib, "error", batch, note=str(exc)))
                    continue
                metrics = {**got["metrics"], **_per_message(proxy.count(), n), "batch": float(batch)}
                # the hello, then a put and a confirm per batch
                metrics["requests"] = 1 + 2 * metrics["batches"]
                out.append(Result("wire_bytes", lib, "ok", batch, metrics=metrics,
                                  info={"codec": CODECS[lib] or "none", "signed": True}))
        check = ctx.child("wire_verify", {"server_db": str(server_db), "devices": counts})
    finally:
        ctx.discard(where)
    for problem_device, why in check["info"]["problems"].items():
        for r in out:
            if r.status == "ok" and _device(r.lib, r.size or 0) == problem_device:
                r.status, r.note = "error", f"not exactly once on the server: {why}"
    return out


def _mqtt_row(ctx: Context, binary: str) -> Result:
    s = ctx.settings
    where = ctx.scratch("wire-mqtt")
    n = s.wire_messages
    try:
        with Broker(binary, where, inflight=s.mqtt_inflight, autosave="periodic") as broker, \
                CountingProxy(ctx.spawn, broker.port) as proxy:
            ctx.log(f"  wire_bytes mqtt: QoS 2 publish of {n:,} readings")
            got = ctx.child("mqtt_publish", {"messages": n, "inflight": s.mqtt_inflight, "port": proxy.port,
                                             "budget_s": s.child_timeout_s / 2, "telemetry": True})
            traffic = proxy.count()
    finally:
        ctx.discard(where)
    metrics = {**_per_message(traffic, n), "messages": float(n), "seconds": got["metrics"]["seconds"]}
    return Result("wire_bytes", "mqtt", "ok", None, metrics=metrics,
                  info={"qos": 2, "topic": "edgeq-bench/orders", **got.get("info", {})})


def run(ctx: Context) -> list[Result]:
    """MQTT first (every edgeq row is compared with it), then the edgeq rows."""
    from benchmarks.cases.sync import mqtt_availability

    out: list[Result] = []
    mqtt: Result | None = None
    if "mqtt" in ctx.libs:
        binary, why = mqtt_availability(ctx)
        if binary is None:
            out.append(Result("wire_bytes", "mqtt", "not available" if ctx.settings.smoke else "error", None,
                              note=why))
        else:
            try:
                mqtt = _mqtt_row(ctx, binary)
            except (ChildError, OSError, RuntimeError, subprocess.TimeoutExpired,
                    json.JSONDecodeError) as exc:
                ctx.log(f"    error: {exc}")
                out.append(Result("wire_bytes", "mqtt", "error", None, note=str(exc)))
    if "edgeq" in ctx.libs:
        try:
            rows = _edgeq_rows(ctx, list(CODECS))
        except (ChildError, OSError, RuntimeError, json.JSONDecodeError) as exc:
            ctx.log(f"    error: {exc}")
            rows = [Result("wire_bytes", "edgeq", "error", None, note=str(exc))]
        for r in rows:
            if mqtt is not None and r.status == "ok":
                r.metrics["vs_mqtt"] = r.metrics["bytes_per_msg"] / mqtt.metrics["bytes_per_msg"]
        out += rows
    if mqtt is not None:
        out.append(mqtt)
    return out

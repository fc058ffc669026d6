"""Device-to-server exactly-once throughput over loopback: edgeq sync vs MQTT QoS 2.

**edgeq.** Per round: a setup child creates the server's store (``HOME``, local
queue ``ORDERS``) and a device store (``DEV1``, remote queue ``ORDERS`` holding
``sync_messages`` payloads), untimed. The runner starts
``edgeq serve --durability full`` on a free loopback port and waits for
``/healthz``; a fresh child opens the device store and times
``SyncAgent.push_once()`` (what ``edgeq sync --once --batch-size N`` runs:
hello, then put + confirm per batch). Afterwards the server is stopped and a
last child reads its store: exactly ``sync_messages`` messages, each payload
index once, and the device's queue empty.

**MQTT.** Per round: a private mosquitto with persistence on, a subscriber
child with a persistent session at QoS 2, then a publisher child sending the
same number of same-size payloads at QoS 2 with ``mqtt_inflight`` messages in
flight. The headline is first publish → last PUBCOMP; first publish → last
delivery at the subscriber is reported too, and the subscriber's counts give
duplicates and losses. Two broker configurations, two rows:

* ``mqtt``: the database snapshot saved after every change
  (``autosave_on_changes true``, ``autosave_interval 1``), as durable as
  mosquitto allows, and still less durable than edgeq (the snapshot follows
  the acknowledgement; see :mod:`benchmarks.peers.mqtt_peer`). The 2x target
  is judged against this one: the nearest to equal durability.
* ``mqtt-periodic``: mosquitto's default autosave (every 1800 s and at exit),
  the way it is usually deployed: an acknowledged message lives in memory
  only until the next snapshot. For information.

Rounds interleave edgeq and the MQTT rows; the median round of each is reported.
"""

from __future__ import annotations

import json
import select
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

from benchmarks.peers.base import make_payload, payload_index
from benchmarks.peers.mqtt_peer import (
    Broker,
    MosquittoUnavailable,
    cpu_seconds,
    ensure_mosquitto,
    free_port,
    mosquitto_version,
    paho_installed,
    stop_process,
)
from benchmarks.results import Result, Status, median_round
from benchmarks.runner import ROOT, ChildError, Context, child_env, parse_child_output

__all__ = ["LIBS", "child_push", "child_setup", "child_verify", "run"]

LIBS = ["edgeq", "mqtt", "mqtt-periodic"]
#: MQTT row -> the broker's autosave configuration (``benchmarks.peers.mqtt_peer.AUTOSAVE``).
AUTOSAVE_OF = {"mqtt": "changes", "mqtt-periodic": "periodic"}
QUEUE = "ORDERS"
SERVER_NAME = "HOME"
DEVICE_NAME = "DEV1"
_READY_DEADLINE_S = 30.0


# -- child side ---------------------------------------------------------------------------


def child_setup(spec: dict[str, Any]) -> dict[str, Any]:
    """Create the server's store (queue ORDERS) and the device's (remote queue ORDERS, filled)."""
    from edgeq import Message, QueueManager

    with QueueManager(Path(spec["server_db"]), name=SERVER_NAME) as home:
        home.define_queue(QUEUE)
    n, size = int(spec["messages"]), int(spec["payload_bytes"])
    with QueueManager(Path(spec["device_db"]), name=DEVICE_NAME) as device:
        device.define_remote_queue(QUEUE, target_qmgr=SERVER_NAME)
        for start in range(0, n, 10_000):
            device.put_many(QUEUE,
                            [Message(make_payload(i, size)) for i in range(start, min(n, start + 10_000))])
        depth = device.depth(QUEUE)
    if depth != n:
        raise RuntimeError(f"filled {n} messages but the device's queue holds {depth}")
    return {"metrics": {"filled": float(depth)}}


def child_push(spec: dict[str, Any]) -> dict[str, Any]:
    """Time ``SyncAgent.push_once()`` of the whole backlog; check the device's queue is empty after.
    ``key`` (a private key file) signs every request, ``ca`` verifies an HTTPS server (sync_secure)."""
    from edgeq import QueueManager
    from edgeq.sync.agent.agent import SyncAgent
    from edgeq.sync.agent.signer import DeviceSigner
    from edgeq.sync.runtime import tune_gc

    tune_gc()  # as `edgeq sync` does
    n = int(spec["messages"])
    qm = QueueManager(Path(spec["device_db"]))
    auth = DeviceSigner.from_file(DEVICE_NAME, Path(spec["key"])) if spec.get("key") else None
    agent = SyncAgent(qm, spec["url"], batch_size=int(spec["batch_size"]), timeout=60.0, auth=auth,
                      ca_file=Path(spec["ca"]) if spec.get("ca") else None)
    try:
        cpu = time.process_time()
        start = time.perf_counter()
        report = agent.push_once()
        seconds = time.perf_counter() - start
        cpu = time.process_time() - cpu
        left = qm.depth(QUEUE)
    finally:
        agent.close()
        qm.close()
    if report.error or report.transmitted != n or left:
        raise RuntimeError(f"push_once: transmitted {report.transmitted} of {n}, {left} left on the device, "
                           f"error {report.error!r}")
    return {
        "metrics": {
            "messages": float(n),
            "seconds": seconds,
            "msgs_per_s": n / seconds,
            "agent_rate": float(report.rate),
            "batches": float(report.batches),
            "batch_size": float(spec["batch_size"]),
            "device_left": float(left),
            "resend_duplicates": float(report.duplicates),
            "client_cpu_s": cpu,
        },
        "info": {"version": _version("edgeq")},
    }


def child_verify(spec: dict[str, Any]) -> dict[str, Any]:
    """Count what the (stopped) server stored: messages, distinct payload indices, and its pragmas."""
    from edgeq import QueueManager

    n = int(spec["messages"])
    with QueueManager(Path(spec["server_db"])) as home:
        depth = home.depth(QUEUE)
        indices = [payload_index(m.data) for m in home.browse(QUEUE)]
    distinct = len(set(indices))
    return {"metrics": {"server_depth": float(depth), "stored": float(len(indices)),
                        "duplicates": float(len(indices) - distinct),
                        "losses": float(n - len(set(indices) & set(range(n))))}}


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return ""


# -- runner side --------------------------------------------------------------------------


def _wait_healthy(proc: subprocess.Popen[Any], url: str, log_file: Path) -> None:
    """Wait until ``GET /healthz`` answers 200, the server exits, or the deadline passes."""
    deadline = time.monotonic() + _READY_DEADLINE_S
    while True:
        try:
            with urllib.request.urlopen(url + "/healthz", timeout=2.0) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise ChildError(f"edgeq serve not healthy within {_READY_DEADLINE_S:.0f} s: {_tail(log_file)}")
        try:
            code = proc.wait(timeout=0.05)  # the pause between attempts doubles as a watch on the server
        except subprocess.TimeoutExpired:
            continue
        raise ChildError(f"edgeq serve exited with {code}: {_tail(log_file)}")


def _tail(path: Path) -> str:
    try:
        return " | ".join(path.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-6:])
    except OSError:
        return "(no log)"


def serve_command(ctx: Context, server_db: Path, port: int) -> list[str]:
    """The home server as the benchmark runs it: full durability, no sweeper, quiet logs."""
    return [ctx.python, "-m", "edgeq", "serve", "--db", str(server_db), "--name", SERVER_NAME,
            "--host", "127.0.0.1", "--port", str(port), "--durability", "full", "--no-auth",
            "--sweep-interval", "0", "--log-level", "warning"]


def _edgeq_round(ctx: Context) -> Result:
    s = ctx.settings
    where = ctx.scratch("sync-edgeq")
    server_db, device_db = where / "home.db", where / "device.db"
    n = s.sync_messages
    try:
        ctx.child("sync_setup", {"server_db": str(server_db), "device_db": str(device_db), "messages": n,
                                 "payload_bytes": s.payload_bytes})
        port = free_port()
        log_file = where / "serve.log"
        command = serve_command(ctx, server_db, port)
        with log_file.open("w", encoding="utf-8") as log:
            proc = subprocess.Popen(command, cwd=ROOT, env={**child_env(), "PYTHONUNBUFFERED": "1"},
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        try:
            url = f"http://127.0.0.1:{port}"
            _wait_healthy(proc, url, log_file)
            ctx.log(f"  sync edgeq: push_once of {n:,} messages, batches of {s.sync_batch}")
            cpu_before = cpu_seconds(proc.pid)
            got = ctx.child("sync_push", {"device_db": str(device_db), "url": url, "messages": n,
                                          "batch_size": s.sync_batch})
            cpu_after = cpu_seconds(proc.pid)
        finally:
            code = stop_process(proc)
        if code not in (0, -15):
            raise ChildError(f"edgeq serve exited with {code}: {_tail(log_file)}")
        check = ctx.child("sync_verify", {"server_db": str(server_db), "messages": n})["metrics"]
    finally:
        ctx.discard(where)
    metrics = {**got["metrics"], **check}
    if cpu_before is not None and cpu_after is not None:
        metrics["server_cpu_s"] = cpu_after - cpu_before  # includes the child's start-up wait (idle)
    if check["server_depth"] != n or check["stored"] != n or check["duplicates"] or check["losses"]:
        raise ChildError(f"not exactly once: the server holds {check['server_depth']:.0f} (browsed "
                         f"{check['stored']:.0f}, {check['duplicates']:.0f} duplicates, "
                         f"{check['losses']:.0f} lost) of {n}")
    info = {**got.get("info", {}), "server": " ".join(["edgeq", *command[3:]]),
            "cli_equivalent": f"edgeq sync --db device.db --server URL --once --batch-size {s.sync_batch}"}
    return Result("sync", "edgeq", "ok", n, metrics=metrics, info=info)


def _read_line(proc: subprocess.Popen[str], timeout: float) -> str:
    """One line from a child's stdout, or "" if none came within ``timeout`` seconds."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    return proc.stdout.readline() if ready else ""


def _mqtt_round(ctx: Context, binary: str, lib: str) -> Result:
    s = ctx.settings
    autosave = AUTOSAVE_OF[lib]
    where = ctx.scratch(f"sync-{lib}")
    n = s.sync_messages
    common = {"messages": n, "inflight": s.mqtt_inflight, "budget_s": s.child_timeout_s / 2}
    sub: subprocess.Popen[str] | None = None
    try:
        with Broker(binary, where, inflight=s.mqtt_inflight, autosave=autosave) as broker:
            sub = ctx.spawn("mqtt_subscribe", {**common, "port": broker.port})
            line = _read_line(sub, _READY_DEADLINE_S)
            if line.strip() != "READY":
                stop_process(sub)
                raise ChildError(f"the MQTT subscriber did not start: {_stderr(sub)}")
            ctx.log(f"  sync {lib}: QoS 2 publish of {n:,} messages, {s.mqtt_inflight} in flight")
            assert broker.proc is not None
            broker_cpu = cpu_seconds(broker.proc.pid)
            pub = ctx.child("mqtt_publish", {**common, "port": broker.port, "payload_bytes": s.payload_bytes})
            broker_after = cpu_seconds(broker.proc.pid)
            assert sub.stdin is not None
            sub.stdin.write("STOP\n")
            sub.stdin.flush()
            out, err = sub.communicate(timeout=s.child_timeout_s)
            if sub.returncode != 0:
                raise ChildError(f"the MQTT subscriber exited with {sub.returncode}: {err.strip()[-400:]}")
            got = parse_child_output(out)["metrics"]
            saved_while_running = broker.db_file.exists()
        # mosquitto writes a last snapshot when it stops: no file means persistence did nothing.
        if not broker.db_file.exists() or (autosave == "changes" and not saved_while_running):
            raise ChildError(
                f"mosquitto wrote no persistence snapshot in {where}: persistence is not working")
        snapshot = broker.db_file.stat().st_size
    finally:
        if sub is not None and sub.poll() is None:
            stop_process(sub)
        ctx.discard(where)
    m = pub["metrics"]
    delivered_s = got["last_delivery"] - m["start"]
    metrics = {
        "messages": m["messages"],
        "seconds": m["seconds"],
        "msgs_per_s": m["msgs_per_s"],
        "publish_calls_s": m["publish_calls_s"],
        "delivered_s": delivered_s,
        "delivered_msgs_per_s": got["distinct"] / delivered_s if delivered_s > 0 else 0.0,
        "received": got["received"],
        "duplicates": got["duplicates"],
        "losses": got["losses"],
        "inflight": float(s.mqtt_inflight),
        "snapshot_bytes": float(snapshot),
        "autosave_every_change": 1.0 if autosave == "changes" else 0.0,
    }
    if broker_cpu is not None and broker_after is not None:
        metrics["server_cpu_s"] = broker_after - broker_cpu  # includes the child's start-up wait (idle)
    metrics["client_cpu_s"] = m.get("client_cpu_s", 0.0)
    if got["duplicates"] or got["losses"]:
        note = f"not exactly once: {got['duplicates']:.0f} duplicates, {got['losses']:.0f} lost"
    else:
        note = ""
    info = {**pub.get("info", {}), "version": f"mosquitto {mosquitto_version(binary)}",
            "broker": "persistence true, " + ", ".join(Broker.autosave_lines(autosave))}
    return Result("sync", lib, "ok", n, metrics=metrics, info=info, note=note)


def _stderr(proc: subprocess.Popen[str]) -> str:
    try:
        _, err = proc.communicate(timeout=5)
    except subprocess.TimeoutExpired:
        return "(no output)"
    return err.strip()[-400:]


def mqtt_availability(ctx: Context) -> tuple[str | None, str]:
    """The mosquitto binary (installing it if allowed), or None and why MQTT cannot be measured."""
    if not paho_installed():
        return None, "paho-mqtt is not installed (pip install 'edgeq[bench]')"
    try:
        return ensure_mosquitto(ctx.log, install=ctx.settings.install_mosquitto), ""
    except MosquittoUnavailable as exc:
        return None, f"mosquitto not available: {exc}"


def run(ctx: Context) -> list[Result]:
    """``rounds`` rounds of edgeq then MQTT, each round on fresh stores and a fresh broker."""
    s = ctx.settings
    libs = [lib for lib in LIBS if lib in ctx.libs]
    binary: str | None = None
    unavailable = ""
    if any(lib in AUTOSAVE_OF for lib in libs):
        binary, unavailable = mqtt_availability(ctx)
        if binary is None:
            ctx.log(f"  sync mqtt: {unavailable}")
    rounds: dict[str, list[Result]] = {lib: [] for lib in libs}
    for number in range(s.rounds):
        for lib in libs:
            if rounds[lib] and rounds[lib][-1].status != "ok":
                continue
            if lib in AUTOSAVE_OF and binary is None:
                status: Status = "not available" if s.smoke else "error"
                rounds[lib].append(Result("sync", lib, status, s.sync_messages, note=unavailable))
                continue
            if s.rounds > 1:
                ctx.log(f"  sync {lib} (round {number + 1})")
            try:
                result = _edgeq_round(ctx) if lib == "edgeq" else _mqtt_round(ctx, binary or "", lib)
            except (ChildError, OSError, RuntimeError, ValueError, KeyError, json.JSONDecodeError,
                    subprocess.TimeoutExpired) as exc:
                ctx.log(f"    error: {exc}")
                result = Result("sync", lib, "error", s.sync_messages, note=str(exc))
            rounds[lib].append(result)
    return [median_round(rounds[lib]) for lib in libs]

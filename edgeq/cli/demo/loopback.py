"""Act two's network: the real home server on a loopback port, stopped and started for real,
and ``Wire``, the agent's HTTP client, recording each exchange and able to drop the link after one.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from dataclasses import dataclass
from typing import Any

import httpx
import uvicorn

from edgeq.cli.demo.base import DemoFailed
from edgeq.manager import QueueManager
from edgeq.sync import protocol as p
from edgeq.sync.server.app import create_app
from edgeq.types import Clock

__all__ = ["Exchange", "LoopbackServer", "Timeline", "Wire"]

#: How long starting or stopping the server may take before the demo gives up.
_WAIT_S = 10.0
_EXCHANGE = "edgeq.demo.exchange"


class _Server(uvicorn.Server):
    """uvicorn's server, setting an event once it listens (or failed to)."""

    def __init__(self, config: uvicorn.Config, ready: threading.Event) -> None:
        super().__init__(config)
        self.ready = ready

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self.ready.set()

    def run_in_thread(self) -> None:
        try:
            asyncio.run(self.serve())
        finally:
            self.ready.set()  # a failed start must not leave start() waiting


class LoopbackServer:
    """The home server over ``qm`` on a free loopback port; each ``start`` serves a new app."""

    def __init__(self, qm: QueueManager, clock: Clock) -> None:
        self.qm, self.clock = qm, clock
        with socket.socket() as probe:  # a free port, so the URL is known before the first start
            probe.bind(("127.0.0.1", 0))
            self.port = int(probe.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self._serving: tuple[_Server, threading.Thread] | None = None

    @property
    def running(self) -> bool:
        return self._serving is not None

    def start(self) -> None:
        """Listen on the port; raise DemoFailed if that is impossible."""
        config = uvicorn.Config(create_app(self.qm, clock=self.clock), host="127.0.0.1", port=self.port,
                                log_config=None, lifespan="off", access_log=False)
        server = _Server(config, threading.Event())
        thread = threading.Thread(target=server.run_in_thread, name="edgeq-demo-home", daemon=True)
        thread.start()
        if not server.ready.wait(_WAIT_S) or not server.started:
            server.should_exit = True
            thread.join(_WAIT_S)
            raise DemoFailed(
                f"the demo's home server could not listen on {self.url} (another program took the port?): "
                "run the demo again"
            )
        self._serving = (server, thread)

    def stop(self) -> None:
        if self._serving is None:
            return
        server, thread = self._serving
        self._serving = None
        server.should_exit = True
        thread.join(_WAIT_S)


@dataclass
class Exchange:
    """One request of the device to the server, and the answer (None: none came back)."""

    path: str
    sent: dict[str, Any]
    answer: dict[str, Any] | None = None


class Timeline:
    """Exchanges and rule lines in causal order (thread-safe: each is added by the thread of its cause)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: list[Exchange | str] = []
        #: every exchange since the start, in order
        self.exchanges: list[Exchange] = []

    def add(self, entry: Exchange | str) -> None:
        with self._lock:
            self._pending.append(entry)
            if isinstance(entry, Exchange):
                self.exchanges.append(entry)

    def take(self) -> list[Exchange | str]:
        with self._lock:
            taken, self._pending = self._pending, []
        return taken


class Wire:
    """The loopback link between the demo's device and server, which can be cut."""

    def __init__(self, server: LoopbackServer, timeline: Timeline) -> None:
        self.server, self.timeline = server, timeline
        self._drop_after: str | None = None
        self.client = httpx.Client(timeout=_WAIT_S,
                                   event_hooks={"request": [self._sent], "response": [self._answered]})

    def drop_after(self, path: str) -> None:
        """Stop the server as soon as the next answer on ``path`` (e.g. ``/v1/put``) is in."""
        self._drop_after = path

    def close(self) -> None:
        self.client.close()

    def _sent(self, request: httpx.Request) -> None:
        exchange = Exchange(request.url.path, p.decode_body(request.read()))
        request.extensions[_EXCHANGE] = exchange  # the answer's hook finds it on its request
        self.timeline.add(exchange)

    def _answered(self, response: httpx.Response) -> None:
        response.read()
        exchange: Exchange = response.request.extensions[_EXCHANGE]
        exchange.answer = p.decode_body(response.content)
        if self._drop_after == exchange.path:
            self._drop_after = None
            self.server.stop()
            self.timeline.add("(the link drops: the home server stops listening)")

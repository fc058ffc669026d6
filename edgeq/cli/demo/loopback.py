"""Act two's network: the real home server on a loopback port, and the device's HTTP
client, which keeps a record of what crossed the wire.

:class:`LoopbackServer` serves the real app (:func:`edgeq.sync.server.app.create_app`, what
``edgeq serve`` runs) with uvicorn in a thread, and stops and starts again on the same
port: while it is stopped the link is down for real (connections are refused).
:class:`Wire` is the ``httpx.Client`` the sync agent talks through: its event hooks
add every exchange to a :class:`Timeline`, in causal order with the lines the
narrating rules add, and it can drop the link (stop the server) right after a given
answer, between MQe's two stages. Needs the ``server`` and ``sync`` extras.
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
    """The home server over ``qm`` (its clock ``clock``) on a free loopback port.

    Each :meth:`start` serves a new app, as a restarted ``edgeq serve`` would: it knows
    no device until each says hello again. The store stays open throughout.
    """

    def __init__(self, qm: QueueManager, clock: Clock) -> None:
        self.qm, self.clock = qm, clock
        with socket.socket() as probe:  # a free port, so the URL is known before the first start
            probe.bind(("127.0.0.1", 0))
            self.port = int(probe.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self._serving: tuple[_Server, threading.Thread] | None = None

    @property
    def running(self) -> bool:
        """Whether the server listens now."""
        return self._serving is not None

    def start(self) -> None:
        """Listen on the port; raise :class:`DemoFailed` if that is impossible."""
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
        """Stop listening, closing every connection (no-op if stopped)."""
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
    """What happened, in causal order: exchanges on the wire, and lines the rules add.

    Thread-safe: the agent confirms in its own thread, the server's rules run in the
    server's threads. Every entry is added by the thread that caused it, before what
    it caused, so the order is the same on every run.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: list[Exchange | str] = []
        #: every exchange since the start, in order
        self.exchanges: list[Exchange] = []

    def add(self, entry: Exchange | str) -> None:
        """Add an exchange (filled in when its answer comes) or a line."""
        with self._lock:
            self._pending.append(entry)
            if isinstance(entry, Exchange):
                self.exchanges.append(entry)

    def take(self) -> list[Exchange | str]:
        """The entries added since the last call."""
        with self._lock:
            taken, self._pending = self._pending, []
        return taken


class Wire:
    """The device's HTTP client to ``server``, recording into ``timeline``."""

    def __init__(self, server: LoopbackServer, timeline: Timeline) -> None:
        self.server, self.timeline = server, timeline
        self._drop_after: str | None = None
        self.client = httpx.Client(timeout=_WAIT_S, event_hooks={"request": [self._sent], "response": [self._answered]})

    def drop_after(self, path: str) -> None:
        """Stop the server as soon as the next answer on ``path`` (e.g. ``/v1/put``) is in."""
        self._drop_after = path

    def close(self) -> None:
        """Close the client."""
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

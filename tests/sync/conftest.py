"""Fixtures for the sync tests: a real home server on loopback (uvicorn in a thread),
real SQLite files, real httpx clients, and ManualClocks on both sides."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.types import Message as AsgiMessage

from edgeq import ManualClock, QueueManager
from edgeq.sync import protocol as p
from edgeq.sync.agent.agent import SyncAgent
from edgeq.sync.agent.link import ServerLink
from edgeq.sync.agent.transport import Transport
from edgeq.sync.server.app import create_app
from tests.conftest import T0, Recorder

__all__ = ["T0", "AnswerFaults", "LiveServer", "Network", "Recorder"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class _Server(uvicorn.Server):
    """uvicorn's server, signalling an event once it listens, and stopped by :meth:`exit` at once
    (uvicorn's own loop notices ``should_exit`` on its next 0.1 s tick and then pauses 0.1 s more)."""

    def __init__(self, config: uvicorn.Config, ready: threading.Event) -> None:
        super().__init__(config)
        self._ready = ready
        self._wake = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().startup(sockets)
        self._ready.set()

    def exit(self) -> None:
        """Stop serving (from any thread): wakes the main loop rather than waiting for its tick."""
        self.should_exit = True
        if self._loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop has ended already
                self._loop.call_soon_threadsafe(self._wake.set)

    async def main_loop(self) -> None:
        counter = 0
        while not await self.on_tick(counter):  # uvicorn's loop, woken early by exit()
            counter = (counter + 1) % 864000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), 0.1)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's shutdown without its fixed 0.1 s pause: the listeners closed, each connection
        told to finish, then a bounded wait (uvicorn's own, in 2 ms steps) until all have gone."""
        for server in self.servers:
            server.close()
        for connection in list(self.server_state.connections):
            connection.shutdown()
        deadline = time.monotonic() + 10
        while (self.server_state.connections or self.server_state.tasks) and time.monotonic() < deadline:
            await asyncio.sleep(0.002)
        for server in self.servers:
            await server.wait_closed()
        await self.lifespan.shutdown()


class AnswerFaults:
    """A fault layer in front of the real app (plain ASGI, served by the same uvicorn):
    the real app answers every request, and an answer armed with :meth:`rewrite_next`
    reaches the client changed, as a buggy or hostile server would send it. Nothing
    is ever answered without the real app having handled the request."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._armed: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self.rewritten: list[str] = []  # the paths whose answers were changed, in order

    def rewrite_next(self, path: str, change: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        """Change the next answer on ``path``: ``change`` gets the real answer's decoded body."""
        with self._lock:
            self._armed[path] = change

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        change = None
        if scope["type"] == "http":
            with self._lock:
                change = self._armed.pop(scope["path"], None)
        if change is None:
            await self.app(scope, receive, send)
            return
        start: dict[str, Any] = {}
        chunks: list[bytes] = []

        async def keep(message: AsgiMessage) -> None:
            if message["type"] == "http.response.start":
                start.update(message)
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        await self.app(scope, receive, keep)
        body = p.encode_body(change(p.decode_body(b"".join(chunks))))
        headers = [(k, v) for k, v in start["headers"] if k.lower() != b"content-length"]
        self.rewritten.append(scope["path"])  # before the client can have the answer
        await send({**start, "headers": [*headers, (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


class LiveServer:
    """A home server over ``qm`` (or another ``app``: the console's), served by uvicorn on a
    loopback port in a thread, behind an (idle unless armed) :class:`AnswerFaults` layer,
    :attr:`faults`."""

    def __init__(self, qm: QueueManager, clock: ManualClock | None, app: Starlette | None = None,
                 **app_options: Any) -> None:
        self.qm = qm
        self.app = app or create_app(qm, clock=clock, **app_options)
        self.faults = AnswerFaults(self.app)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(self.faults, host="127.0.0.1", port=self.port, log_config=None,
                                lifespan="off", access_log=False)
        self._ready = threading.Event()
        self.server = _Server(config, self._ready)
        self._thread = threading.Thread(target=self._run, name="uvicorn-test", daemon=True)

    def _run(self) -> None:
        try:
            asyncio.run(self.server.serve())
        finally:
            self._ready.set()  # a failed start must not leave start() waiting

    def start(self) -> LiveServer:
        self._thread.start()
        if not self._ready.wait(10) or not self.server.started:
            raise RuntimeError("uvicorn did not start")
        return self

    def stop(self) -> None:
        self.server.exit()
        self._thread.join(10)

    @property
    def metrics(self) -> Any:
        return self.app.state.service.metrics

    @property
    def sessions(self) -> Any:
        return self.app.state.service.sessions


@pytest.fixture
def server_clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
def device_clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
def home_qm(tmp_path: Path, server_clock: ManualClock) -> Iterator[QueueManager]:
    qm = QueueManager(tmp_path / "home.db", name="HOME", clock=server_clock)
    qm.define_queue("ORDERS")
    yield qm
    qm.close()


@pytest.fixture
def device_qm(tmp_path: Path, device_clock: ManualClock) -> Iterator[QueueManager]:
    qm = QueueManager(tmp_path / "device.db", name="DEV1", clock=device_clock)
    qm.define_remote_queue("ORDERS", target_qmgr="HOME")
    yield qm
    qm.close()


@pytest.fixture
def make_server(server_clock: ManualClock) -> Iterator[Callable[..., LiveServer]]:
    started: list[LiveServer] = []

    def _make(qm: QueueManager, **options: Any) -> LiveServer:
        server = LiveServer(qm, server_clock, **options).start()
        started.append(server)
        return server

    yield _make
    for server in started:
        server.stop()


@pytest.fixture
def make_console(
    server_clock: ManualClock, make_server: Callable[..., LiveServer]
) -> Callable[..., LiveServer]:
    """The operator console's own app over a store, served as ``edgeq serve --console``'s
    console process serves it (on its own port), on the server's clock."""
    def _make(qm: QueueManager) -> LiveServer:
        from edgeq.sync.server.console.routes import console_app  # jinja2: only where a console is served

        return make_server(qm, app=console_app(qm, clock=server_clock))
    return _make


@pytest.fixture
def server(home_qm: QueueManager, make_server: Callable[..., LiveServer]) -> LiveServer:
    return make_server(home_qm)


@pytest.fixture(scope="session")
def trust() -> ssl.SSLContext:
    """httpx's default client TLS context, built once for the test clients (each build reads the
    CA bundle: ~30 ms of CPU); their requests go to loopback HTTP."""
    return httpx.create_ssl_context()


@pytest.fixture
def http(trust: ssl.SSLContext) -> Iterator[httpx.Client]:
    with httpx.Client(timeout=10, verify=trust) as client:
        yield client


def monotonic_of(clock: Callable[[], int]) -> Callable[[], float]:
    """The device's monotonic clock (seconds) for an agent whose wall clock is ``clock``:
    time a test lets pass on it (in a network hook, say) passes on both, as on a real
    device. (A real monotonic clock beside a frozen ManualClock would see the server's
    clock jump whenever a test advances it: a clock step, not latency.) A test that
    steps a device's wall clock after its hello passes its own ``monotonic``."""
    return lambda: (clock() - T0) / 1000


@pytest.fixture
def make_agent(device_clock: ManualClock) -> Iterator[Callable[..., SyncAgent]]:
    agents: list[SyncAgent] = []

    def _make(qm: QueueManager, url: str, **options: Any) -> SyncAgent:
        options.setdefault("clock", device_clock)
        options.setdefault("monotonic", monotonic_of(options["clock"]))
        agent = SyncAgent(qm, url, **options)
        agents.append(agent)
        return agent

    yield _make
    for agent in agents:
        agent.close()


@pytest.fixture
def agent(device_qm: QueueManager, server: LiveServer, make_agent: Callable[..., SyncAgent]) -> SyncAgent:
    return make_agent(device_qm, server.url)


class Network(httpx.BaseTransport):
    """A real HTTP transport with faults a test switches on: a network that is down,
    responses lost after the server handled the request, or a hook run before a request.
    It records every request the client attempted (:attr:`calls`, :meth:`bodies`)."""

    def __init__(self, verify: ssl.SSLContext | bool = True) -> None:
        self.inner = httpx.HTTPTransport(verify=verify)
        self.down = False
        self.down_for: set[str] = set()  # paths whose requests never arrive
        self.lose_once: list[str] = []  # paths whose next response is lost
        self.before: dict[str, Callable[[], None]] = {}  # path -> run once before forwarding
        self.calls: list[str] = []
        self.sent: list[tuple[str, bytes]] = []  # (path, raw body) of every request attempted
        self.attempted = threading.Event()  # set by every request, even one that fails

    def requests(self, path: str) -> list[bytes]:
        """The raw bodies of the requests attempted to ``path``, in order."""
        return [raw for seen, raw in self.sent if seen == path]

    def bodies(self, path: str) -> list[dict[str, Any]]:
        """The decoded bodies of the requests attempted to ``path``, in order."""
        return [p.decode_body(raw) for raw in self.requests(path)]

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        self.calls.append(path)
        self.sent.append((path, request.read()))
        self.attempted.set()
        if self.down or path in self.down_for:
            raise httpx.ConnectError("network is down", request=request)
        hook = self.before.pop(path, None)
        if hook is not None:
            hook()
        response = self.inner.handle_request(request)
        if path in self.lose_once:
            self.lose_once.remove(path)
            response.read()
            response.close()
            raise httpx.ReadError("response lost", request=request)
        return response

    def close(self) -> None:
        self.inner.close()


@pytest.fixture
def network(trust: ssl.SSLContext) -> Iterator[Network]:
    net = Network(trust)
    yield net
    net.close()


@pytest.fixture
def make_link(
    request: pytest.FixtureRequest, device_qm: QueueManager, device_clock: ManualClock, network: Network
) -> Iterator[Callable[..., ServerLink]]:
    """A :class:`ServerLink` of ``qm`` (default ``device_qm``) to a real home server (``to``,
    default the ``server`` fixture's), its HTTP through ``network`` (faults; a record of what
    was sent); ``auth`` signs requests; ``monotonic`` defaults to the device's clock."""
    clients: list[httpx.Client] = []

    def _make(*, to: LiveServer | None = None, qm: QueueManager | None = None, batch_size: int = 500,
              auth: httpx.Auth | None = None, monotonic: Callable[[], float] | None = None) -> ServerLink:
        target = to if to is not None else request.getfixturevalue("server")
        client = httpx.Client(transport=network, timeout=10)
        clients.append(client)
        return ServerLink(qm or device_qm, Transport(target.url, client=client, auth=auth),
                          clock=device_clock,
                          monotonic=monotonic or monotonic_of(device_clock), batch_size=batch_size)

    yield _make
    for client in clients:
        client.close()


@pytest.fixture
def flaky_agent(
    device_qm: QueueManager, server: LiveServer, network: Network, make_agent: Callable[..., SyncAgent]
) -> Iterator[SyncAgent]:
    """An agent whose HTTP goes through :class:`Network`."""
    with httpx.Client(transport=network, timeout=10) as client:
        yield make_agent(device_qm, server.url, client=client)


EDGEQ = [sys.executable, "-m", "edgeq"]


@contextmanager
def edgeq_serve(home: Path, port: int, *extra: str) -> Iterator[list[str]]:
    """`edgeq serve` over ``home`` in a subprocess: listening on entry (uvicorn said so, or
    the test fails with its output), stopped with SIGTERM on exit. Yields its stderr
    lines, complete once it has exited."""
    proc = subprocess.Popen(
        [*EDGEQ, "serve", "--db", str(home), "--port", str(port), "--sweep-interval", "0", *extra],
        stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.stderr is not None
    lines: list[str] = []
    for line in proc.stderr:  # wait for uvicorn to say it listens (or the process to die)
        lines.append(line)
        if "Uvicorn running" in line:
            break
    else:
        proc.wait()
        pytest.fail("edgeq serve did not start:\n" + "".join(lines))
    try:
        yield lines
    finally:
        proc.send_signal(signal.SIGTERM)
        _, rest = proc.communicate(timeout=20)
        lines.extend(rest.splitlines(keepends=True))


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """`edgeq serve` over a home store with queue ORDERS: its URL and the store's path."""
    home = tmp_path / "home.db"
    with QueueManager(home, name="HOME") as qm:
        qm.define_queue("ORDERS")
    port = free_port()
    with edgeq_serve(home, port):
        yield f"http://127.0.0.1:{port}", home


class ServedConsole:
    """A real ``edgeq serve --console`` subprocess (:func:`edgeq_serve_console`): its supervisor,
    its device worker's and console process's pids (from their log lines) and both URLs."""

    def __init__(self, proc: subprocess.Popen[str], lines: list[str], port: int, console_port: int) -> None:
        self.proc, self.lines = proc, lines
        self.url, self.console_url = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{console_port}"
        logged = [json.loads(line) for line in lines if line.startswith("{")]
        self.worker_pid = next(e["pid"] for e in logged if e["event"] == "serve")
        self.console_pid = next(e["pid"] for e in logged if e["event"] == "console")


@contextmanager
def edgeq_serve_console(home: Path, *extra: str) -> Iterator[ServedConsole]:
    """``edgeq serve --console --no-auth`` over ``home`` on free ports, once both processes listen;
    stopped with SIGTERM on exit (unless it stopped already)."""
    port, console_port = free_port(), free_port()
    proc = subprocess.Popen(
        [*EDGEQ, "serve", "--db", str(home), "--port", str(port), "--console", "--console-port",
         str(console_port), "--no-auth", "--sweep-interval", "0", *extra],
        stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.stderr is not None
    lines: list[str] = []
    for line in proc.stderr:  # both processes say they listen (or the server dies)
        lines.append(line)
        if sum("Uvicorn running" in x for x in lines) == 2:
            break
    else:
        proc.wait()
        pytest.fail("edgeq serve --console did not start:\n" + "".join(lines))
    try:
        yield ServedConsole(proc, lines, port, console_port)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        _, rest = proc.communicate(timeout=20)
        lines.extend(rest.splitlines(keepends=True))

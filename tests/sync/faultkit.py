"""Fault injection for the sync tests, with real processes on loopback.

* :class:`ServerProcess`: ``edgeq serve`` as a subprocess (started, SIGKILLed,
  restarted on the same port; ready once uvicorn logs that it listens).
* :class:`FaultProxy`: a small HTTP/1.1 proxy (a thread in the test process)
  between device and server. One armed :class:`Fault` fires on the ``nth``
  request to a path: it SIGKILLs the device before forwarding, after forwarding
  or after answering, drops the request or the answer, duplicates the request
  (or replays it after the run), or SIGKILLs the server (before forwarding,
  then restarts it; or while the server handles the request).
* :class:`Rig`: both stores, the server, the proxy, and ``edgeq sync --once``
  runs of the device (each a subprocess), a ledger of every message put on the
  device, and :meth:`Rig.verify`: after a clean final run, every message is on
  the server exactly once, none is left on the device, and none was delivered
  after its deadline.

Nothing here sleeps to synchronise: the server is ready when its log says so,
the device run is over when its process has exited, the proxy is idle when its
in-flight request count is zero; every wait has a deadline and fails loudly.
"""

from __future__ import annotations

import contextlib
import http.client
import http.server
import json
import os
import queue
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgeq import Message, QueueManager
from edgeq.types import MessageState
from tests.sync.conftest import free_port
from tests.workers import check_payload, payload_key

__all__ = [
    "ACTIONS", "Fault", "FaultProxy", "Outcome", "Rig", "ServerProcess", "make_payload", "now_ms",
]

EDGEQ = [sys.executable, "-m", "edgeq"]
QUEUE = "ORDERS"
START_S = 30.0  # a server must listen within this
RUN_S = 90.0  # a device run must end within this
IDLE_S = 30.0  # the proxy must finish its in-flight requests within this
UPSTREAM_S = 60.0  # the proxy's wait for the server's answer

#: What a fault does to the request it fires on.
ACTIONS = (
    "kill-device-before",  # the device dies before the request leaves ("crash before put/confirm")
    "kill-device-after-forward",  # the server handles it; the device dies before the answer
    "kill-device-after-answer",  # the device gets the answer, then dies (mid local delete)
    "drop-request",  # lost on the way: connection closed, never forwarded
    "drop-response",  # the server handles it, the answer is lost
    "duplicate",  # forwarded twice back to back; the device gets one answer
    "replay",  # forwarded once now, and once more after the device run ended (a late duplicate)
    "kill-server-before",  # the server is SIGKILLed and restarted, then the request goes to the new one
    "kill-server-during",  # the request reaches the server, which is SIGKILLed before it answers
    "hook",  # run ``Fault.hook`` (e.g. tamper with the stopped server), then forward
)


def now_ms() -> int:
    """The machine's clock in epoch ms: the device's and the server's (same host)."""
    return int(time.time() * 1000)


def make_payload(tag: str, index: int, rng: random.Random) -> bytes:
    """Small checksummed data in the format of ``tests.workers.make_payload``
    (so ``check_payload`` and ``payload_key`` read it), kept small for speed."""
    import hashlib

    body = f"{tag}:{index}:".encode() + rng.randbytes(rng.choice((0, 16, 64, 200, 1000)))
    return body + hashlib.sha256(body).digest()


# -- processes --------------------------------------------------------------------------------


class _Logged:
    """A subprocess whose stderr is pumped by a thread into a list of lines;
    ``ready`` is set when a line contains ``marker`` or the stream ends."""

    def __init__(self, argv: list[str], marker: str) -> None:
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.lines: list[str] = []
        self.ready = threading.Event()
        self.ended = threading.Event()
        self._marker = marker
        self._pump = threading.Thread(target=self._read, name=f"pump-{self.proc.pid}", daemon=True)
        self._pump.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))
            if self._marker in line:
                self.ready.set()
        self.ended.set()
        self.ready.set()

    def finish(self, sig: int) -> int:
        """Signal the process (unless it is gone), reap it, collect its log."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(20)
        self._pump.join(20)
        assert self.proc.stderr is not None
        self.proc.stderr.close()
        return code

    def events(self) -> list[dict[str, Any]]:
        out = []
        for line in list(self.lines):
            with contextlib.suppress(ValueError):
                item = json.loads(line)
                if isinstance(item, dict):
                    out.append(item)
        return out


class ServerProcess:
    """``edgeq serve`` on a loopback port, restartable; thread-safe (the proxy kills it too)."""

    def __init__(self, db: Path, *, name: str = "HOME", sweep_interval: float = 1.0) -> None:
        self.db = db
        self.name = name
        self.sweep_interval = sweep_interval
        self.port = free_port()
        self._lock = threading.RLock()
        self._current: _Logged | None = None
        self._all: list[_Logged] = []
        self.starts = 0
        self.kills = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        with self._lock:
            return self._current is not None and self._current.proc.poll() is None

    def start(self) -> None:
        """Start the server and return once it listens (or fail with its log)."""
        with self._lock:
            assert self._current is None, "the server is already running"
            for _attempt in range(3):
                run = _Logged(
                    [*EDGEQ, "serve", "--db", str(self.db), "--name", self.name, "--host", "127.0.0.1",
                     "--port", str(self.port), "--log-level", "info", "--durability", "full",
                     "--sweep-interval", str(self.sweep_interval)],
                    marker="Uvicorn running",
                )
                self._all.append(run)
                if run.ready.wait(START_S) and not run.ended.is_set() and run.proc.poll() is None:
                    self._current = run
                    self.starts += 1
                    return
                run.finish(signal.SIGKILL)
                log = "\n".join(run.lines[-20:])
                if "address already in use" not in log.lower():
                    raise AssertionError(f"edgeq serve did not start within {START_S}s:\n{log}")
                self.port = free_port()  # someone took the port while it was free: use another
            raise AssertionError("edgeq serve found no free port in 3 attempts")

    def kill(self) -> None:
        """SIGKILL the server (a crash) and reap it."""
        with self._lock:
            run, self._current = self._current, None
            if run is not None:
                run.finish(signal.SIGKILL)
                self.kills += 1

    def restart(self) -> None:
        with self._lock:
            self.kill()
            self.start()

    def ensure_running(self) -> None:
        with self._lock:
            if not self.running:
                self.kill()  # reap a process that died by itself
                self.start()

    def stop(self) -> None:
        """A clean shutdown (SIGTERM): the store is closed properly."""
        with self._lock:
            run, self._current = self._current, None
            if run is not None:
                code = run.finish(signal.SIGTERM)
                # uvicorn shuts down, then re-raises the signal it caught: -SIGTERM is a clean end.
                clean = code in (0, -signal.SIGTERM) and any("Finished server process" in x
                                                             for x in run.lines)
                assert clean, f"edgeq serve exited {code} on SIGTERM:\n" + "\n".join(run.lines[-20:])

    def close(self) -> None:
        with self._lock:
            self._current = None
            for run in self._all:
                run.finish(signal.SIGKILL)

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        """Every JSON log event of every server process started, optionally of one kind."""
        with self._lock:
            runs = list(self._all)
        return [e for run in runs for e in run.events() if kind is None or e.get("event") == kind]

    def tail(self, lines: int = 30) -> str:
        with self._lock:
            runs = list(self._all)
        return "\n".join([line for run in runs for line in run.lines][-lines:])


# -- the proxy ----------------------------------------------------------------------------------


@dataclass
class Fault:
    """One fault, fired on the ``nth`` request to ``path`` after it is armed."""

    action: str
    path: str
    nth: int = 1
    answer: str = "first"  # duplicate: which of the two answers the device gets
    hook: Callable[[], None] | None = None  # action "hook": run before forwarding
    fired: bool = False

    def __post_init__(self) -> None:
        assert self.action in ACTIONS, self.action
        assert self.answer in ("first", "second"), self.answer

    def __str__(self) -> str:
        extra = f" ({self.answer} answer)" if self.action == "duplicate" else ""
        return f"{self.action} on {self.path} #{self.nth}{extra}"


_Reply = tuple[int, str, bytes]
_HOP_BY_HOP = frozenset({"host", "connection", "keep-alive", "content-length", "transfer-encoding", "te",
                         "upgrade", "proxy-connection"})


class _ProxyServer(http.server.ThreadingHTTPServer):
    daemon_threads = False  # server_close() joins the handler threads
    block_on_close = True
    proxy: FaultProxy

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A connection reset by a killed device is expected; anything else is kept, to fail the test."""
        error = sys.exc_info()[1]
        if not isinstance(error, (ConnectionError, TimeoutError)):
            self.proxy.errors.append(f"{type(error).__name__}: {error}")


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the agent's httpx client uses it
    timeout = IDLE_S  # an idle keep-alive connection ends, so closing the proxy is bounded
    server: _ProxyServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._relay()

    def do_POST(self) -> None:
        self._relay()

    def _relay(self) -> None:
        proxy = self.server.proxy
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        fault = proxy._begin(self.path)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
            reply = proxy._handle(fault, self.command, self.path, headers, body)
            if reply is None:  # no answer: the device sees the connection close
                self.close_connection = True
                return
            status, media, data = reply
            self.send_response(status)
            if media:
                self.send_header("Content-Type", media)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()
            if fault is not None and fault.action == "kill-device-after-answer":
                proxy.kill_device()
        except OSError:  # the device died under us (killed by another fault): nothing to answer
            self.close_connection = True
        finally:
            proxy._end()


class FaultProxy:
    """A loopback HTTP proxy in front of ``server`` that applies one armed fault at a time."""

    def __init__(self, server: ServerProcess) -> None:
        self.server = server
        self._httpd = _ProxyServer(("127.0.0.1", 0), _Handler)
        self._httpd.proxy = self
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fault-proxy", daemon=True)
        self._lock = threading.Condition()
        self._active = 0
        self._fault: Fault | None = None
        self._counts: Counter[str] = Counter()
        self.paths: Counter[str] = Counter()  # every request seen, by path
        self.device: subprocess.Popen[str] | None = None
        self.device_kills = 0
        self.replays: list[tuple[str, dict[str, str], bytes]] = []
        self.errors: list[str] = []  # unexpected exceptions in the proxy's handlers
        self.replayed: list[int] = []  # HTTP statuses the server gave replayed requests
        self._thread.start()

    # -- arming --------------------------------------------------------------------------

    def arm(self, fault: Fault | None) -> None:
        with self._lock:
            self._fault = fault
            self._counts.clear()

    def _begin(self, path: str) -> Fault | None:
        with self._lock:
            self._active += 1
            self._counts[path] += 1
            self.paths[path] += 1
            fault = self._fault
            if (fault is not None and not fault.fired and fault.path == path
                    and self._counts[path] == fault.nth):
                fault.fired = True
                return fault
            return None

    def _end(self) -> None:
        with self._lock:
            self._active -= 1
            self._lock.notify_all()

    def quiesce(self) -> None:
        """Wait until no request is in flight through the proxy."""
        with self._lock:
            if not self._lock.wait_for(lambda: self._active == 0, IDLE_S):
                raise AssertionError(
                    f"the proxy still has {self._active} request(s) in flight after {IDLE_S}s")

    # -- actions -------------------------------------------------------------------------

    def kill_device(self) -> None:
        with self._lock:
            device = self.device
        if device is not None and device.poll() is None:
            device.send_signal(signal.SIGKILL)
            self.device_kills += 1

    def _handle(self, fault: Fault | None, method: str, path: str, headers: dict[str, str],
                body: bytes) -> _Reply | None:
        action = fault.action if fault is not None else None
        if action == "kill-device-before":
            self.kill_device()
            return None
        if action == "drop-request":
            return None
        if action == "kill-server-before":
            self.server.restart()
        if action == "hook":
            assert fault is not None and fault.hook is not None
            fault.hook()
        if action == "kill-server-during":
            self._forward(method, path, headers, body, kill_server=True)
            return None
        reply = self._forward(method, path, headers, body)
        if action == "duplicate":
            second = self._forward(method, path, headers, body)
            reply = reply if fault is not None and fault.answer == "first" else second
        elif action == "replay":
            with self._lock:
                self.replays.append((path, headers, body))
        elif action == "kill-device-after-forward":
            self.kill_device()
            return None
        elif action == "drop-response":
            return None
        return reply

    def _forward(self, method: str, path: str, headers: dict[str, str], body: bytes, *,
                 kill_server: bool = False) -> _Reply:
        conn = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=UPSTREAM_S)
        try:
            conn.request(method, path, body=body if method == "POST" else None, headers=headers)
            if kill_server:
                self.server.kill()
            response = conn.getresponse()
            return response.status, response.getheader("Content-Type") or "", response.read()
        except (OSError, http.client.HTTPException) as exc:
            return 502, "text/plain", f"proxy: the server failed: {type(exc).__name__}: {exc}".encode()
        finally:
            conn.close()

    def send_replays(self) -> list[int]:
        """Send the requests held by ``replay`` faults to the server again; their HTTP statuses."""
        with self._lock:
            held, self.replays = self.replays, []
        statuses = [self._forward("POST", path, headers, body)[0] for path, headers, body in held]
        self.replayed += statuses
        return statuses

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(IDLE_S)


# -- a device run ------------------------------------------------------------------------------


@dataclass
class Outcome:
    """How one ``edgeq sync --once`` run ended."""

    code: int
    summary: dict[str, Any] | None
    stderr: str
    fault: Fault | None = None

    @property
    def killed(self) -> bool:
        return self.code == -signal.SIGKILL

    @property
    def pushed(self) -> dict[str, Any]:
        assert self.summary is not None, f"no summary (exit {self.code}):\n{self.stderr[-3000:]}"
        pushed: dict[str, Any] = self.summary["pushed"]
        return pushed

    def __str__(self) -> str:
        return f"exit {self.code}, fault {self.fault}, summary {self.summary}"


class _Worker:
    """``device_worker.py``: one agent across many pushes, each asked for on stdin."""

    SCRIPT = Path(__file__).with_name("device_worker.py")

    def __init__(self, db: Path, server_url: str, batch_size: int, key: Path | None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(self.SCRIPT), "--db", str(db), "--server", server_url,
             "--batch-size", str(batch_size), *(["--key", str(key)] if key else [])],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._err: list[str] = []
        self._pumps = [threading.Thread(target=self._out, daemon=True),
                       threading.Thread(target=self._errs, daemon=True)]
        for pump in self._pumps:
            pump.start()

    def _out(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def _errs(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self._err.append(line)

    @property
    def stderr(self) -> str:
        return "".join(self._err)

    def readline(self, timeout: float) -> str | None:
        """The next line, or None once the worker's stdout closed (it died)."""
        try:
            return self._lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(
                f"device worker printed nothing for {timeout}s:\n{self.stderr[-3000:]}") from None

    def send(self, command: str) -> bool:
        """Send a command; False if the worker is gone."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(command + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            return False
        return True

    def close(self) -> int:
        if self.proc.poll() is None:
            self.send("quit")
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        code = self.proc.wait(20)
        for pump in self._pumps:
            pump.join(20)
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                with contextlib.suppress(BrokenPipeError):
                    pipe.close()
        return code


# -- the rig -----------------------------------------------------------------------------------


@dataclass
class Sent:
    key: str
    deadline: int | None  # absolute, epoch ms on the device clock; None: never expires


@dataclass
class Ledger:
    """What the test put on the device, and what it consumed on the server meanwhile."""

    sent: dict[str, Sent] = field(default_factory=dict)
    consumed: Counter[str] = field(default_factory=Counter)


class Rig:
    """A home server process, a fault proxy, a device store, and device runs through the proxy."""

    def __init__(
        self, tmp_path: Path, *, batch_size: int = 100, context: str = "", signed: bool = False
    ) -> None:
        self.home_db = tmp_path / "home.db"
        self.device_db = tmp_path / "device.db"
        self.batch_size = batch_size
        self.context = context  # put in every assertion message (e.g. the seed)
        # signed: the device has a key registered on the server, so the server
        # requires signed requests and refuses replayed nonces (docs/security.md)
        self.key: Path | None = None
        with QueueManager(self.home_db, name="HOME", journal="server") as qm:
            qm.define_queue(QUEUE)
            if signed:
                from edgeq.sync.keys import new_key_pair

                self.key = tmp_path / "device.key"
                qm.register_device("DEV1", new_key_pair(self.key).public_key, queues=[QUEUE])
        with QueueManager(self.device_db, name="DEV1", journal="device") as qm:
            qm.define_remote_queue(QUEUE, target_qmgr="HOME")
        self.ledger = Ledger()
        self.server = ServerProcess(self.home_db)
        self.proxy: FaultProxy | None = None
        self.worker: _Worker | None = None
        self.outcomes: list[Outcome] = []

    def start(self) -> Rig:
        self.server.start()
        self.proxy = FaultProxy(self.server)
        return self

    def close(self) -> None:
        try:
            self.stop_worker()
            if self.proxy is not None:
                with self.proxy._lock:
                    device = self.proxy.device
                if device is not None and device.poll() is None:
                    device.kill()
                self.proxy.close()
        finally:
            self.server.close()

    def __enter__(self) -> Rig:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- filling the device -------------------------------------------------------------------

    def put(self, count: int, *, tag: str, rng: random.Random, expiring: float = 0.0,
            expiry_ms: tuple[int, int] = (-500, 3000)) -> list[str]:
        """Put ``count`` messages on the device's remote queue (no agent is running);
        a share ``expiring`` get an absolute deadline ``now + randint(*expiry_ms)``
        (a deadline already passed is discarded at once, MQe's "added" check point)."""
        messages, deadlines = [], []
        for index in range(count):
            message = Message(make_payload(tag, index, rng))
            deadline = None
            if rng.random() < expiring:
                deadline = now_ms() + rng.randint(*expiry_ms)
                message = message.expire_at(deadline)
            messages.append(message)
            deadlines.append(deadline)
        with QueueManager(self.device_db) as qm:
            uids = qm.put_many(QUEUE, messages)
        for uid, message, deadline in zip(uids, messages, deadlines, strict=True):
            self.ledger.sent[str(uid)] = Sent(payload_key(message.data), deadline)
        return [str(u) for u in uids]

    def consume(self, count: int) -> int:
        """An application on the server takes up to ``count`` messages (while the server runs)."""
        with QueueManager(self.home_db) as qm:
            got = qm.get_many(QUEUE, count)
        for message in got:
            assert check_payload(message.data), f"{self.context}: torn message {message.uid}"
            self.ledger.consumed[str(message.uid)] += 1
        return len(got)

    # -- device runs --------------------------------------------------------------------------

    def run(self, fault: Fault | None = None, *, timeout: float = RUN_S) -> Outcome:
        """One ``edgeq sync --once`` through the proxy, with ``fault`` armed; the server is
        started first if a fault killed it. Requests held by ``replay`` are sent after."""
        assert self.proxy is not None
        self.server.ensure_running()
        self.proxy.arm(fault)
        argv = [*EDGEQ, "sync", "--db", str(self.device_db), "--server", self.proxy.url, "--once",
                "--no-pull", "--batch-size", str(self.batch_size), "--timeout", "30", "--log-level", "info",
                "--no-progress", *(["--key", str(self.key)] if self.key else [])]
        with subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) as proc:
            with self.proxy._lock:
                self.proxy.device = proc
            try:
                out, err = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
                raise AssertionError(f"{self.context}: edgeq sync did not end within {timeout}s "
                                     f"(fault {fault}):\n{err[-3000:]}") from None
            finally:
                with self.proxy._lock:
                    self.proxy.device = None
        self.proxy.quiesce()
        self.proxy.arm(None)
        assert not self.proxy.errors, f"{self.context}: the proxy failed: {self.proxy.errors}"
        if self.proxy.replays:
            self.server.ensure_running()
            self.proxy.send_replays()
        summary = None
        if out.strip():
            summary = json.loads(out.strip().splitlines()[-1])
        outcome = Outcome(proc.returncode, summary, err, fault if fault is not None and fault.fired else None)
        assert outcome.code in (0, 1, -signal.SIGKILL), f"{self.context}: {outcome}\n{err[-3000:]}"
        if outcome.code == 0:
            assert summary is not None and summary["pushed"]["error"] is None, f"{self.context}: {outcome}"
        self.outcomes.append(outcome)
        return outcome

    def push(self, fault: Fault | None = None, *, timeout: float = RUN_S) -> Outcome:
        """One ``push_once`` of the long-lived device worker through the proxy, with
        ``fault`` armed; a worker killed by an earlier fault is started again first."""
        assert self.proxy is not None
        self.server.ensure_running()
        if self.worker is None:
            self.worker = _Worker(self.device_db, self.proxy.url, self.batch_size, self.key)
            with self.proxy._lock:
                self.proxy.device = self.worker.proc
            line = self.worker.readline(timeout)
            assert line == "ready", (
                f"{self.context}: device worker said {line!r}:\n{self.worker.stderr[-3000:]}")
        worker = self.worker
        self.proxy.arm(fault)
        line = worker.readline(timeout) if worker.send("push") else None
        if line is None:  # killed by the fault
            self.stop_worker()
        self.proxy.quiesce()
        self.proxy.arm(None)
        assert not self.proxy.errors, f"{self.context}: the proxy failed: {self.proxy.errors}"
        if self.proxy.replays:
            self.server.ensure_running()
            self.proxy.send_replays()
        fired = fault if fault is not None and fault.fired else None
        if line is None:
            outcome = Outcome(worker.proc.returncode, None, worker.stderr, fired)
            assert outcome.killed, (
                f"{self.context}: the device worker died: {outcome}\n{worker.stderr[-3000:]}")
        else:
            summary = json.loads(line)
            outcome = Outcome(1 if summary["pushed"]["error"] else 0, summary, "", fired)
        self.outcomes.append(outcome)
        return outcome

    def stop_worker(self) -> None:
        worker, self.worker = self.worker, None
        if worker is not None:
            worker.close()
            if self.proxy is not None:
                with self.proxy._lock:
                    self.proxy.device = None

    def settle(self, *, runs: int = 6) -> list[Outcome]:
        """Fault-free runs until one has nothing left to send."""
        done: list[Outcome] = []
        for _ in range(runs):
            outcome = self.run()
            done.append(outcome)
            assert outcome.code == 0, (
                f"{self.context}: a fault-free run failed: {outcome}\n{outcome.stderr[-3000:]}")
            if outcome.pushed["sent"] == 0 and outcome.pushed["requeued"] == 0:
                return done
        raise AssertionError(f"{self.context}: still sending after {runs} fault-free runs: "
                             f"{[str(o) for o in done]}")

    # -- verification -------------------------------------------------------------------------

    def verify(self) -> dict[str, int]:
        """Settle, stop the server, and check exactly-once delivery, an empty device, no
        expired delivery and both files' integrity. Returns counts for the test's report."""
        ctx = self.context
        self.stop_worker()
        self.settle()
        self.server.stop()
        # The server's expiry may be later than the device's by the latency of the
        # hello it was rebased with (docs/protocol.md): the largest one measured.
        latency = max([0, *(int(e["clock_offset_ms"]) for e in self.server.events("hello"))])
        for path in (self.home_db, self.device_db):
            _integrity(path)

        with QueueManager(self.device_db) as qm:
            assert qm.depth(QUEUE) == 0, f"{ctx}: {qm.depth(QUEUE)} message(s) left on the device"
            assert qm.journal_since(0) == [], f"{ctx}: device expiries never reported to the server"

        with QueueManager(self.home_db) as qm:
            drained: list[Message] = []
            while got := qm.get_many(QUEUE, 1000):
                drained += got
            journal = qm.journal_since(0, 10**9)  # after the drain: it discards expired ones
        left = _rows(self.home_db)

        sent = self.ledger.sent
        accepted = Counter(e.uid for e in journal if e.kind == "accepted")
        accepted_entry = {e.uid: e for e in journal if e.kind == "accepted"}
        accepted_at = {u: e.confirmed_ms for u, e in accepted_entry.items()}
        expired_server = {e.uid for e in journal if e.kind == "expired" and e.side == "server"}
        expired_device = Counter(e.uid for e in journal if e.kind == "expired" and e.side == "device")
        delivered = Counter(self.ledger.consumed)
        for message in drained:
            uid = str(message.uid)
            delivered[uid] += 1
            assert check_payload(message.data), f"{ctx}: torn message {uid} on the server"
            assert uid in sent and payload_key(message.data) == sent[uid].key, (
                f"{ctx}: {uid} on the server carries {payload_key(message.data)}, not what the device put")

        twice = {u: n for u, n in accepted.items() if n > 1}
        assert not twice, f"{ctx}: accepted more than once: {sorted(twice)[:10]}"
        twice = {u: n for u, n in delivered.items() if n > 1}
        assert not twice, f"{ctx}: delivered more than once: {sorted(twice)[:10]}"
        phantom = (set(accepted) | set(delivered)) - set(sent)
        assert not phantom, f"{ctx}: on the server but never put on the device: {sorted(phantom)[:10]}"
        unaccepted = set(delivered) - set(accepted)
        assert not unaccepted, f"{ctx}: delivered without an accepted entry: {sorted(unaccepted)[:10]}"
        reported_twice = [u for u, n in expired_device.items() if n > 1]
        assert not reported_twice, f"{ctx}: a device expiry recorded twice: {reported_twice[:10]}"

        delivered_entries = Counter(e.uid for e in journal if e.kind == "delivered")
        assert delivered_entries == delivered, (
            f"{ctx}: the journal's delivered entries disagree with what was got: "
            f"{sorted((delivered_entries - delivered) | (delivered - delivered_entries))[:10]}")
        # The server never accepts a message after it fired its own expiry for it.
        first_expired = {}
        for e in journal:
            if e.kind == "expired" and e.side == "server":
                first_expired.setdefault(e.uid, e)
        revived = [(u, first_expired[u].check_point) for u, e in accepted_entry.items()
                   if u in first_expired and first_expired[u].id < e.id]
        assert not revived, f"{ctx}: accepted after the server expired it (uid, where): {revived[:10]}"

        lasting = [u for u, s in sent.items() if s.deadline is None]
        missing = [u for u in lasting if accepted[u] != 1 or delivered[u] != 1]
        assert not missing, (
            f"{ctx}: {len(missing)} message(s) without expiry not delivered exactly once, e.g. "
            f"{[(u, accepted[u], delivered[u]) for u in missing[:10]]}")

        late, unaccounted, vanished = [], [], []
        for uid, item in sent.items():
            if item.deadline is None:
                continue
            if uid in accepted:
                if accepted_at[uid] is not None and accepted_at[uid] > item.deadline + latency + 1:
                    late.append((uid, accepted_at[uid] - item.deadline))
                if uid not in delivered and uid not in expired_server:
                    vanished.append(uid)
            elif uid not in expired_server and uid not in expired_device:
                unaccounted.append(uid)
        assert not late, (f"{ctx}: delivered after its deadline (ms late; hello latency {latency} ms): "
                          f"{late[:10]}")
        assert not vanished, f"{ctx}: accepted, neither delivered nor expired on the server: {vanished[:10]}"
        assert not unaccounted, (f"{ctx}: expiring message(s) neither delivered nor expired anywhere: "
                                 f"{unaccounted[:10]}")

        # What is left on the server: only locked copies of messages that expired on
        # the device before it could put them again (the server's sweep discards them).
        strays = [(uid, state) for uid, state, deadline in left
                  if state != MessageState.PUT_LOCKED or deadline is None or uid in accepted
                  or uid not in expired_device]
        assert not strays, f"{ctx}: rows left on the server after draining: {strays[:10]}"
        return {
            "sent": len(sent), "accepted": len(accepted), "delivered": len(delivered),
            "expired_server": len(expired_server & set(sent)), "expired_device": len(expired_device),
            "locked_left": len(left), "latency_ms": latency,
        }


def _integrity(path: Path) -> None:
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)], f"{path} is damaged"
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == [], f"{path}: foreign keys broken"
        rows = conn.execute("SELECT data FROM messages").fetchall()
    finally:
        conn.close()
    torn = [bytes(data[:40]) for (data,) in rows if not check_payload(bytes(data))]
    assert not torn, f"{path}: half-written messages: {torn[:5]}"


def _rows(path: Path) -> list[tuple[str, int, int | None]]:
    """(uid, state, deadline) of every message row left in a store."""
    conn = sqlite3.connect(path)
    try:
        return [(f"{origin}.{stamp}", state, deadline) for origin, stamp, state, deadline in
                conn.execute("SELECT origin, stamp, state, deadline FROM messages")]
    finally:
        conn.close()


def locked_confirm_ids(path: Path) -> list[int]:
    """The confirm ids of the assured puts a (stopped) server holds locked."""
    conn = sqlite3.connect(path)
    try:
        return [cid for (cid,) in conn.execute(
            "SELECT DISTINCT confirm_id FROM messages WHERE state = ?", (MessageState.PUT_LOCKED,))]
    finally:
        conn.close()

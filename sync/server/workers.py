"""``edgeq serve --workers N``, ``--console`` and the bridges: server processes on one store, each
listening socket bound once by a supervisor and inherited by the processes that serve it.

Each process opens the store itself; a worker or the console exiting stops the others, so the server
is up whole or not at all; the bridges' process exiting is started again after a back-off
(docs/bridges.md). What a worker keeps in memory, and why that is safe: docs/scaling.md.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from types import FrameType

__all__ = ["bind", "bridges_argv", "console_argv", "run_workers", "worker_argv"]

_log = logging.getLogger("edgeq.sync.server")

#: the options the supervisor sets anew for the processes it starts
_REPLACED = ("--workers", "--port", "--console-port")
#: The first and the longest wait before the bridges' process is started again (seconds).
BRIDGES_RESTART_S = (1.0, 60.0)
_BRIDGES = "the bridges' process"


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` that child processes may inherit."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def _without(argv: Sequence[str], options: Sequence[str]) -> list[str]:
    """``argv`` without ``options`` (each taking a value, given as ``--opt V`` or ``--opt=V``)."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in options:
            skip = True
        elif arg.partition("=")[0] not in options:
            out.append(arg)
    return out


def worker_argv(
    argv: Sequence[str], fd: int, index: int, port: int, console_port: int | None = None
) -> list[str]:
    """The command line of worker ``index``: ``argv`` (edgeq's arguments) without
    ``--workers``, told the socket's ``fd`` and the ports bound (``--port 0`` made one);
    only the first worker sweeps expiries.

    >>> worker_argv(["--db", "h.db", "serve", "--workers", "2", "--port=0"], 5, 1, 8470)
    ['--db', 'h.db', 'serve', '--worker-fd', '5', '--port', '8470', '--sweep-interval', '0']
    """
    out = [*_without(argv, _REPLACED), "--worker-fd", str(fd), "--port", str(port)]
    if console_port is not None:
        out += ["--console-port", str(console_port)]
    return out + (["--sweep-interval", "0"] if index else [])


def console_argv(argv: Sequence[str], fd: int, port: int) -> list[str]:
    """The console process's command line: ``argv`` told the console socket's ``fd`` and port.

    >>> console_argv(["serve", "--console", "--workers", "2"], 6, 8471)
    ['serve', '--console', '--console-fd', '6', '--console-port', '8471']
    """
    return [*_without(argv, _REPLACED), "--console-fd", str(fd), "--console-port", str(port)]


def bridges_argv(argv: Sequence[str]) -> list[str]:
    """The bridges' process's command line: ``argv`` told to run the store's bridges only.

    >>> bridges_argv(["serve", "--console", "--workers", "2", "--port", "0"])
    ['serve', '--console', '--bridges-process']
    """
    return [*_without(argv, _REPLACED), "--bridges-process"]


def run_workers(argv: Sequence[str], host: str, port: int, n: int,
                console: tuple[str, int] | None = None, *, bridges: bool = False) -> int:
    """Bind ``host:port`` and run ``n`` workers (``python -m edgeq`` + ``argv``) on it, with
    ``console`` (its host and port) bind that too and run the console's process on it, and with
    ``bridges`` run the bridges' process, until a worker or the console exits or a signal stops
    them all: 0 when stopped by a signal, else 1. The bridges' process exiting is started again."""
    sockets = [bind(host, port)] + ([bind(*console)] if console is not None else [])
    ports = [int(s.getsockname()[1]) for s in sockets]
    fds = [s.fileno() for s in sockets]
    children = [(worker_argv(argv, fds[0], i, ports[0], ports[1] if console else None), fds[0])
                for i in range(n)]
    if console is not None:
        children.append((console_argv(argv, fds[1], ports[1]), fds[1]))
    procs: dict[int, tuple[subprocess.Popen[bytes], str]] = {}
    for args, fd in children:
        proc = subprocess.Popen([sys.executable, "-m", "edgeq", *args], pass_fds=(fd,))
        procs[proc.pid] = (proc, "the console" if fd != fds[0] else "a worker")
    for sock in sockets:
        sock.close()  # the children hold them now
    stopping: list[int] = []
    lock = threading.RLock()  # procs, between this thread (and its signal handler) and a restart's timer
    restarts = _BridgesRestarts(argv, procs, stopping, lock)
    if bridges:
        restarts.launch()

    def stop(signum: int, frame: FrameType | None) -> None:
        with lock:
            stopping.append(signum)
            restarts.cancel()
            for proc, _ in procs.values():
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        while True:
            pid, status = os.wait()  # the first worker (or the console) to exit stops the rest
            code = os.waitstatus_to_exitcode(status)
            with lock:
                proc, what = procs.pop(pid)
                proc.returncode = code  # reaped here: Popen is told
                if what != _BRIDGES or stopping:
                    break
                restarts.exited(pid, code)
        signalled = bool(stopping)
        if not signalled:
            _log.error("%s (pid %d) exited (%s): stopping the server", what, pid, _status(code),
                       extra={"event": "child-exited", "pid": pid, "exit": code})
        stop(signal.SIGTERM, None)
        for other, _ in list(procs.values()):
            other.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return 0 if signalled else 1


class _BridgesRestarts:
    """Starts the bridges' process, and again after a wait doubling from ``BRIDGES_RESTART_S[0]`` up to
    ``BRIDGES_RESTART_S[1]`` each time it exits (the shortest again once it ran that long)."""

    def __init__(self, argv: Sequence[str], procs: dict[int, tuple[subprocess.Popen[bytes], str]],
                 stopping: list[int], lock: threading.RLock) -> None:
        self.argv, self.procs, self.stopping, self.lock = argv, procs, stopping, lock
        self.delay, self.started = BRIDGES_RESTART_S[0], 0.0
        self.timer: threading.Timer | None = None

    def launch(self) -> None:
        with self.lock:
            if self.stopping:
                return
            proc = subprocess.Popen([sys.executable, "-m", "edgeq", *bridges_argv(self.argv)])
            self.procs[proc.pid] = (proc, _BRIDGES)
            self.started = time.monotonic()

    def exited(self, pid: int, code: int) -> None:
        first, most = BRIDGES_RESTART_S
        self.delay = first if time.monotonic() - self.started >= most else self.delay
        _log.error("%s (pid %d) exited (%s): started again in %g s", _BRIDGES, pid, _status(code), self.delay,
                   extra={"event": "bridges-exited", "pid": pid, "exit": code, "restart_s": self.delay})
        self.timer = threading.Timer(self.delay, self.launch)
        self.timer.daemon = True
        self.timer.start()
        self.delay = min(self.delay * 2, most)

    def cancel(self) -> None:
        if self.timer is not None:
            self.timer.cancel()


def _status(code: int) -> str:
    """An exit code for a person: ``status 1``, ``killed by SIGKILL``."""
    return f"killed by {signal.Signals(-code).name}" if code < 0 else f"status {code}"

"""``edgeq serve --workers N`` and ``--console``: server processes on one store, each listening
socket bound once by a supervisor and inherited by the processes that serve it.

Each process opens the store itself; one exiting stops the others, so the server is up whole or
not at all. What a worker keeps in memory, and why that is safe: docs/scaling.md.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Sequence
from types import FrameType

__all__ = ["bind", "console_argv", "run_workers", "worker_argv"]

_log = logging.getLogger("edgeq.sync.server")

#: the options the supervisor sets anew for the processes it starts
_REPLACED = ("--workers", "--port", "--console-port")


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


def run_workers(argv: Sequence[str], host: str, port: int, n: int,
                console: tuple[str, int] | None = None) -> int:
    """Bind ``host:port`` and run ``n`` workers (``python -m edgeq`` + ``argv``) on it, and with
    ``console`` (its host and port) bind that too and run the console's process on it, until
    one process exits or a signal stops them all: 0 when stopped by a signal, else 1."""
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

    def stop(signum: int, frame: FrameType | None) -> None:
        stopping.append(signum)
        for proc, _ in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        pid, status = os.wait()  # the first process to exit stops the rest
        code, signalled = os.waitstatus_to_exitcode(status), bool(stopping)
        if not signalled:
            _log.error("%s (pid %d) exited (%s): stopping the server", procs[pid][1], pid, _status(code),
                       extra={"event": "child-exited", "pid": pid, "exit": code})
        stop(signal.SIGTERM, None)
        for other, _ in procs.values():
            if other.pid != pid:
                other.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return 0 if signalled else 1


def _status(code: int) -> str:
    """An exit code for a person: ``status 1``, ``killed by SIGKILL``."""
    return f"killed by {signal.Signals(-code).name}" if code < 0 else f"status {code}"

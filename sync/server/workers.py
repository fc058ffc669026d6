"""``edgeq serve --workers N``: N server processes on one store and one listening socket.

The supervisor (the ``edgeq serve`` the operator started) binds the address once and
starts N copies of the same command, each told the socket's file descriptor
(``--worker-fd``, inherited): every worker accepts connections on it (the kernel hands
each connection to one of them), opens the store itself and runs its own app, so a
worker shares nothing with another but the store and its nonce file. The supervisor
passes SIGTERM/SIGINT on, and when one worker exits it stops the others: the server
is up whole or not at all.

What lives in one worker's memory, and why that is safe:

* device sessions (clock offset since the hello, settled marks): a request landing on
  a worker that has not heard the device's hello is answered ``hello-required``, and
  the agent says hello to it and repeats the request; a settled mark is idempotent.
* the auth gate's one-second memory of "no device registered", and the held-quota
  refusal memory: both only delay what the store says by at most a second.
* metrics: each worker counts its own requests (``/metrics`` shows the worker that
  answered).

Nonces (``SqliteNonces``), device records, held puts and the console's credential and
sessions are in the store or the nonce file, so a request replayed to another worker
is refused as on the first.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Sequence
from types import FrameType

__all__ = ["bind", "run_workers", "worker_argv"]


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` that child processes may inherit."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def worker_argv(argv: Sequence[str], fd: int, index: int) -> list[str]:
    """The command line of worker ``index``: ``argv`` (edgeq's arguments) without
    ``--workers``, told the socket's ``fd``; only the first worker sweeps expiries.

    >>> worker_argv(["--db", "h.db", "serve", "--workers", "2", "--port=0"], 5, 1)
    ['--db', 'h.db', 'serve', '--port=0', '--worker-fd', '5', '--sweep-interval', '0']
    """
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--workers":
            skip = True
        elif not arg.startswith("--workers="):
            out.append(arg)
    out += ["--worker-fd", str(fd)]
    return out + (["--sweep-interval", "0"] if index else [])


def run_workers(argv: Sequence[str], host: str, port: int, n: int) -> int:
    """Bind ``host:port``, run ``n`` workers (``python -m edgeq`` + ``argv``) on it until
    one exits or a signal stops them all; the first non-zero exit status, else 0."""
    sock = bind(host, port)
    procs = [subprocess.Popen([sys.executable, "-m", "edgeq", *worker_argv(argv, sock.fileno(), i)],
                              pass_fds=(sock.fileno(),))
             for i in range(n)]
    sock.close()  # the workers hold it now

    def stop(signum: int, frame: FrameType | None) -> None:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        pid, status = os.wait()  # the first worker to exit stops the rest
        stop(signal.SIGTERM, None)
        codes = [os.waitstatus_to_exitcode(status)]
        codes += [p.wait() for p in procs if p.pid != pid]
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return next((c for c in codes if c not in (0, -signal.SIGTERM)), 0)

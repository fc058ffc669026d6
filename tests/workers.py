"""Subprocess entry points for the concurrency and crash tests.

Run as ``python tests/workers.py COMMAND [options]``; importing this module has
no side effects (the tests import :func:`make_payload` and :func:`check_payload`).

Every worker opens its own :class:`~edgeq.QueueManager` on the given file and
reports each *completed* operation as one line on stdout, flushed at once, so a
parent that kills it knows exactly which operations committed (all reported
ones, plus at most the one in flight). Lines are space separated::

    ready                       opened, waiting for "go" on stdin (with --wait)
    put UID KEY                 a put committed
    locked UID CONFIRM_ID KEY   an assured get locked UID under CONFIRM_ID
    confirmed UID               confirm_get(UID) committed
    got UID KEY                 a plain get committed
    busy                        StoreBusy surfaced (the worker then exits 3)
    empty                       the queue had nothing left to get
    done                        the worker finished its work

``KEY`` is the ``tag:index`` a payload was made with.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import queue
import random
import signal
import subprocess
import sys
import threading
from collections.abc import Callable

from edgeq import Message, QueueManager
from edgeq.errors import StoreBusy

_DIGEST = 32


def make_payload(tag: str, index: int, rng: random.Random | None = None) -> bytes:
    """Message data that carries its own checksum, so a torn row is detectable.

    >>> data = make_payload("p0", 7, random.Random(1))
    >>> check_payload(data), payload_key(data)
    (True, 'p0:7')
    >>> check_payload(data[:-1] + bytes([data[-1] ^ 1]))
    False
    """
    rng = rng or random.Random()
    size = rng.choice((0, 10, 300, 5000, 20000))
    body = f"{tag}:{index}:".encode() + rng.randbytes(size)
    return body + hashlib.sha256(body).digest()


def check_payload(data: bytes) -> bool:
    """Whether ``data`` is a whole payload made by :func:`make_payload`."""
    if len(data) < _DIGEST:
        return False
    body, digest = data[:-_DIGEST], data[-_DIGEST:]
    return hashlib.sha256(body).digest() == digest


def payload_key(data: bytes) -> str:
    """The ``tag:index`` a payload was made with."""
    tag, index, _rest = data[:-_DIGEST].split(b":", 2)
    return f"{tag.decode()}:{int(index)}"


class Child:
    """A worker process run from a test, its stdout read line by line.

    Lines are pumped by a thread into a queue, so :meth:`readline` can time out
    instead of hanging the suite if a worker wedges. Use as a context manager:
    the process is killed (if still running) and reaped on exit.
    """

    def __init__(self, command: str, *options: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), command, *options],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self.pid = self.proc.pid
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._stderr: list[str] = []
        self._eof = False
        self._pumps = [
            threading.Thread(target=self._pump_out, daemon=True),
            threading.Thread(target=self._pump_err, daemon=True),
        ]
        for pump in self._pumps:
            pump.start()

    def _pump_out(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def _pump_err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self._stderr.append(line)

    @property
    def stderr(self) -> str:
        return "".join(self._stderr)

    def readline(self, timeout: float = 60.0) -> str | None:
        """The next line the worker printed, or None once its stdout is closed."""
        if self._eof:
            return None
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(
                f"worker {self.pid} printed nothing for {timeout}s; stderr:\n{self.stderr}"
            ) from None
        if line is None:
            self._eof = True
        return line

    def expect(self, word: str, timeout: float = 60.0) -> None:
        line = self.readline(timeout)
        if line != word:
            raise AssertionError(
                f"worker {self.pid}: expected {word!r}, got {line!r}; stderr:\n{self.stderr}")

    def send(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()

    def rest(self, timeout: float = 120.0) -> list[str]:
        """Every remaining line, up to the end of the worker's stdout."""
        out: list[str] = []
        while (line := self.readline(timeout)) is not None:
            out.append(line)
        return out

    def sigkill(self) -> None:
        """SIGKILL the worker and reap it."""
        os.kill(self.pid, signal.SIGKILL)
        self.proc.wait()

    def wait(self, timeout: float = 120.0) -> int:
        return self.proc.wait(timeout)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.sigkill()
        for pump in self._pumps:
            pump.join(timeout=30)
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                with contextlib.suppress(BrokenPipeError):
                    pipe.close()

    def __enter__(self) -> Child:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _say(*parts: object) -> None:
    sys.stdout.write(" ".join(str(p) for p in parts) + "\n")
    sys.stdout.flush()


def _await_go(wait: bool) -> None:
    _say("ready")
    if wait:
        line = sys.stdin.readline()
        if line.strip() != "go":
            raise SystemExit(f"expected 'go' on stdin, got {line!r}")


def _guard(body: Callable[[], None]) -> int:
    try:
        body()
    except StoreBusy:
        _say("busy")
        return 3
    _say("done")
    return 0


def _open(args: argparse.Namespace) -> QueueManager:
    return QueueManager(args.path, name=args.name, durability=args.durability)


def cmd_put(args: argparse.Namespace) -> int:
    """Put ``--count`` messages (forever if 0), reporting each."""
    rng = random.Random(args.seed)
    qm = _open(args)
    _await_go(args.wait)

    def body() -> None:
        index = args.start
        while args.count == 0 or index < args.start + args.count:
            data = make_payload(args.tag, index, rng)
            uid = qm.put(args.queue, Message(data, priority=rng.randint(0, 9) if args.priorities else None))
            _say("put", uid, payload_key(data))
            index += 1

    code = _guard(body)
    qm.close()
    return code


def cmd_get(args: argparse.Namespace) -> int:
    """Get messages (plain, or assured with confirm) until the queue is empty.

    Assured gets use confirm ids ``--confirm-base``, +1, +2, ... With
    ``--hold-after N`` the worker stops after locking its N-th message, before
    confirming it, and waits on stdin (to be killed holding the lock). With
    ``--forever`` an empty queue is polled again instead of ending the worker.
    """
    qm = _open(args)
    _await_go(args.wait)

    def body() -> None:
        confirm_id = args.confirm_base
        locked = 0
        while True:
            msg = qm.get(args.queue, confirm_id=confirm_id if args.assured else None)
            if msg is None:
                if args.forever:
                    continue
                _say("empty")
                return
            if args.assured:
                _say("locked", msg.uid, confirm_id, payload_key(msg.data))
                locked += 1
                if args.hold_after and locked >= args.hold_after:
                    sys.stdin.readline()  # hold the lock until killed
                    return
                qm.confirm_get(args.queue, msg.uid)
                _say("confirmed", msg.uid)
                confirm_id += 1
            else:
                _say("got", msg.uid, payload_key(msg.data))

    code = _guard(body)
    qm.close()
    return code


def cmd_hammer(args: argparse.Namespace) -> int:
    """Alternate puts and gets as fast as possible for ``--count`` rounds."""
    rng = random.Random(args.seed)
    qm = _open(args)
    _await_go(args.wait)

    def body() -> None:
        for index in range(args.count):
            data = make_payload(args.tag, index, rng)
            uid = qm.put(args.queue, Message(data))
            _say("put", uid, payload_key(data))
            if args.assured:
                msg = qm.get(args.queue, confirm_id=args.confirm_base + index)
                if msg is not None:
                    _say("locked", msg.uid, args.confirm_base + index, payload_key(msg.data))
                    qm.confirm_get(args.queue, msg.uid)
                    _say("confirmed", msg.uid)
            else:
                msg = qm.get(args.queue)
                if msg is not None:
                    _say("got", msg.uid, payload_key(msg.data))
            qm.depth(args.queue)
            qm.browse(args.queue, limit=5)

    code = _guard(body)
    qm.close()
    return code


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="workers.py", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, func in (("put", cmd_put), ("get", cmd_get), ("hammer", cmd_hammer)):
        p = sub.add_parser(name)
        p.set_defaults(func=func)
        p.add_argument("--path", required=True)
        p.add_argument("--name", default="DEV1")
        p.add_argument("--queue", default="Q")
        p.add_argument("--durability", choices=("full", "normal"), default="full")
        p.add_argument("--wait", action="store_true", help="print 'ready', then wait for 'go' on stdin")
        p.add_argument("--seed", type=int, default=None)
        p.add_argument("--tag", default="w")
        p.add_argument("--start", type=int, default=0)
        p.add_argument("--count", type=int, default=0)
        p.add_argument("--priorities", action="store_true", help="put with random priorities")
        p.add_argument("--assured", action="store_true", help="get with a confirm id, then confirm_get")
        p.add_argument("--confirm-base", type=int, default=1)
        p.add_argument("--hold-after", type=int, default=0)
        p.add_argument("--forever", action="store_true")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())

"""A loopback TCP relay that counts bytes: what crosses the wire, both ways, headers,
framing and handshakes included (every byte either end wrote to its socket).

Child side, :func:`child_proxy`: listens on a free loopback port, relays every
connection to ``target_port``, prints ``READY <port>``, then answers commands on
stdin: ``COUNT`` prints the bytes relayed since the last ``COUNT`` (and starts
again from zero), ``STOP`` ends it. Runner side, :class:`CountingProxy` drives it.

The count is of TCP payload (what the applications sent): the IP and TCP headers
below it are the same per segment for every protocol measured, and depend on the
MTU, not on the protocol.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from dataclasses import dataclass
from types import TracebackType
from typing import Any

__all__ = ["CountingProxy", "Traffic", "child_proxy"]

_CHUNK = 65_536


@dataclass
class Traffic:
    """Bytes relayed: ``up`` (client to server), ``down`` (server to client), and connections."""

    up: int = 0
    down: int = 0
    connections: int = 0

    @property
    def total(self) -> int:
        """Both directions."""
        return self.up + self.down


async def _pump(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, traffic: Traffic, up: bool
) -> None:
    try:
        while chunk := await reader.read(_CHUNK):
            if up:
                traffic.up += len(chunk)
            else:
                traffic.down += len(chunk)
            writer.write(chunk)
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        try:
            writer.write_eof()  # pass the half-close on: the other direction may still run
        except (OSError, RuntimeError):
            writer.close()


async def _serve(target_port: int) -> None:
    traffic = Traffic()

    async def relay(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        traffic.connections += 1
        try:
            server_r, server_w = await asyncio.open_connection("127.0.0.1", target_port)
        except OSError:
            client_w.close()
            return
        await asyncio.gather(_pump(client_r, server_w, traffic, True),
                             _pump(server_r, client_w, traffic, False))
        server_w.close()
        client_w.close()

    server = await asyncio.start_server(relay, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    print(f"READY {port}", flush=True)
    loop = asyncio.get_running_loop()
    while True:
        command = (await loop.run_in_executor(None, sys.stdin.readline)).strip()
        if command == "COUNT":
            print(json.dumps({"up": traffic.up, "down": traffic.down, "connections": traffic.connections}),
                  flush=True)
            traffic.up = traffic.down = traffic.connections = 0
        elif command in ("STOP", ""):
            break
    server.close()


def child_proxy(spec: dict[str, Any]) -> dict[str, Any]:
    """Relay to ``spec["target_port"]`` until told to stop (see the module docstring)."""
    asyncio.run(_serve(int(spec["target_port"])))
    return {"metrics": {}}


class CountingProxy:
    """A :func:`child_proxy` in front of ``target_port``, started by ``spawn`` (the
    runner's :meth:`~benchmarks.runner.Context.spawn`); :attr:`port` is where to connect."""

    def __init__(self, spawn: Any, target_port: int, *, deadline_s: float = 20.0) -> None:
        self._proc: subprocess.Popen[str] = spawn("proxy", {"target_port": target_port})
        line = self._line(deadline_s)
        if not line.startswith("READY "):
            self.close()
            raise RuntimeError(f"the counting proxy did not start: {line!r}")
        self.port = int(line.split()[1])

    def _line(self, deadline_s: float) -> str:
        import select

        assert self._proc.stdout is not None
        ready, _, _ = select.select([self._proc.stdout], [], [], deadline_s)
        return self._proc.stdout.readline().strip() if ready else ""

    def count(self) -> Traffic:
        """The bytes relayed since the last count (the counters start again from zero)."""
        assert self._proc.stdin is not None
        self._proc.stdin.write("COUNT\n")
        self._proc.stdin.flush()
        line = self._line(20.0)
        if not line:
            raise RuntimeError("the counting proxy did not answer")
        data = json.loads(line)
        return Traffic(int(data["up"]), int(data["down"]), int(data["connections"]))

    def close(self) -> None:
        """Stop the relay."""
        if self._proc.poll() is None:
            try:
                assert self._proc.stdin is not None
                self._proc.stdin.write("STOP\n")
                self._proc.stdin.flush()
                self._proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self._proc.kill()
                self._proc.wait()

    def __enter__(self) -> CountingProxy:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

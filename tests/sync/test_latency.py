"""Network latency never extends a lifetime, pushed or pulled (issue 16, defect 4).

The real system clock on both sides (one shared clock, so deadlines compare directly),
a real home server on loopback, and between them :class:`DelayProxy`, a TCP proxy that
holds every chunk it relays for ``DELAY_S`` in each direction. Before the fix a
receiver's deadline was 205-247 ms later than the sender's through such a proxy.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from edgeq import Int64, Message, QueueManager
from edgeq.clock import system_clock
from edgeq.sync.agent.agent import SyncAgent
from tests.sync.conftest import LiveServer

DELAY_S = 0.2  # each way
#: What a receiver may lose besides the round trip (scheduling on a loaded machine).
SLACK_MS = 300
HOURS_3 = 3 * 3_600_000


class DelayProxy:
    """A TCP proxy on 127.0.0.1 (its own asyncio loop in a thread) to ``upstream_port``:
    each chunk read from either side is written to the other ``delay_s`` later, in order."""

    def __init__(self, upstream_port: int, delay_s: float) -> None:
        self.upstream_port = upstream_port
        self.delay_s = delay_s
        self.port = 0
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), name="delay-proxy",
                                        daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> DelayProxy:
        self._thread.start()
        if not self._ready.wait(10) or not self.port:
            raise RuntimeError("the delay proxy did not start")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
        self._thread.join(10)

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        connections: set[asyncio.Task[None]] = set()

        def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.create_task(self._relay(reader, writer))
            connections.add(task)
            task.add_done_callback(connections.discard)

        server = await asyncio.start_server(accepted, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            await self._stopping.wait()
        finally:
            server.close()
            for task in list(connections):
                task.cancel()
            await asyncio.gather(*connections, return_exceptions=True)

    async def _relay(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        writers = [client_w]
        try:
            server_r, server_w = await asyncio.open_connection("127.0.0.1", self.upstream_port)
            writers.append(server_w)
            await asyncio.gather(self._pipe(client_r, server_w), self._pipe(server_r, client_w))
        except (ConnectionError, OSError):
            pass
        finally:
            for writer in writers:
                writer.close()
                with contextlib.suppress(ConnectionError, OSError):
                    await writer.wait_closed()

    async def _pipe(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        held: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def deliver() -> None:
            while True:
                due, chunk = await held.get()
                await asyncio.sleep(max(0.0, due - loop.time()))  # the latency being simulated
                if not chunk:
                    sink.close()
                    return
                sink.write(chunk)
                await sink.drain()

        delivering = asyncio.create_task(deliver())
        try:
            while chunk := await source.read(65_536):
                held.put_nowait((loop.time() + self.delay_s, chunk))
        except (ConnectionError, OSError):
            pass
        held.put_nowait((loop.time() + self.delay_s, b""))  # end of stream, after the rest
        with contextlib.suppress(ConnectionError, OSError):
            await delivering


class Rig:
    """HOME (system clock) behind a DelayProxy; DEV1's clock is the system's plus ``offset_ms``."""

    def __init__(self, tmp_path: Path, offset_ms: int) -> None:
        self.offset_ms = offset_ms
        self.home = QueueManager(tmp_path / "home.db", name="HOME")
        self.home.define_queue("ORDERS")
        self.home.define_queue("DEV1.INBOX")
        self.device = QueueManager(tmp_path / "device.db", name="DEV1", clock=self.device_clock)
        self.device.define_remote_queue("ORDERS", target_qmgr="HOME")
        self.device.define_home_server_queue("INBOX", server="HOME")
        self.server = LiveServer(self.home, None).start()
        self.proxy = DelayProxy(self.server.port, DELAY_S).start()
        self.agent = SyncAgent(self.device, self.proxy.url, clock=self.device_clock, timeout=10)

    def device_clock(self) -> int:
        return system_clock() + self.offset_ms

    def close(self) -> None:
        self.agent.close()
        self.proxy.stop()
        self.server.stop()
        self.device.close()
        self.home.close()


@pytest.fixture(params=[0, HOURS_3], ids=["shared-clock", "device-3h-ahead"])
def rig(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Rig]:
    rig = Rig(tmp_path, request.param)
    yield rig
    rig.close()


def check(sender: dict[str, int], receiver: dict[str, int]) -> None:
    """Per uid: the receiver's deadline is never later than the sender's (1 ms of
    rounding), and it loses at most about a round trip."""
    assert receiver.keys() == sender.keys()
    late = {u: receiver[u] - d for u, d in sender.items() if receiver[u] > d + 1}
    assert not late, f"{len(late)} deadline(s) later than the sender's: {sorted(late.values())[-5:]} ms"
    lost = max(d - receiver[u] for u, d in sender.items())
    assert lost <= 2 * DELAY_S * 1000 + SLACK_MS, f"a lifetime lost {lost} ms"


def test_latency_never_extends_a_pushed_or_pulled_lifetime(rig: Rig) -> None:
    # Push: deadlines set on the device, compared on the shared clock.
    pushed: dict[str, int] = {}
    for i in range(40):
        deadline = rig.device_clock() + 20_000 + 250 * i
        uid = rig.device.put("ORDERS", Message(b"%d" % i, expiry=Int64(deadline)))
        pushed[str(uid)] = deadline - rig.offset_ms
    report = rig.agent.push_once()
    assert report.ok and report.transmitted == 40, report
    check(pushed, {str(m.uid): m.expiry_deadline_ms or 0 for m in rig.home.browse("ORDERS")})

    # Pull: deadlines set on the server, compared on the shared clock.
    pulled: dict[str, int] = {}
    for i in range(40):
        deadline = system_clock() + 20_000 + 250 * i
        uid = rig.home.put("DEV1.INBOX", Message(b"%d" % i, expiry=Int64(deadline)))
        pulled[str(uid)] = deadline
    report = rig.agent.pull_once()
    assert report.ok and report.received == 40, report
    check(pulled,
          {str(m.uid): (m.expiry_deadline_ms or 0) - rig.offset_ms for m in rig.device.browse("INBOX")})

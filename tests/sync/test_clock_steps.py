"""Wall-clock steps on either side never stretch a message's lifetime, and a device's
clock stepped after the hello no longer shortens it (issue 16, defect 3).

Deterministic: one :class:`ManualClock` is the true time; each side's wall clock is
that plus an offset a test steps, and the device's monotonic clock follows the true
time (so it never steps). A real home server (uvicorn on loopback) and real HTTP; the
client's transport advances the true time while a request travels (``UP_MS``) and
while its answer comes back (``DOWN_MS``), so latency is exact and nothing sleeps.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from edgeq import Int32, ManualClock, Message, QueueManager
from edgeq.sync.agent.agent import SyncAgent
from tests.sync.conftest import T0, LiveServer

UP_MS, DOWN_MS = 40, 60  # one-way latencies, deliberately unequal
RTT_MS = UP_MS + DOWN_MS
LIFETIME_MS = 60_000
HOURS_3 = 3 * 3_600_000


class Wall:
    """A wall clock: the true time plus an offset that :meth:`step` changes (NTP, an operator)."""

    def __init__(self, truth: ManualClock, offset_ms: int = 0) -> None:
        self.truth = truth
        self.offset_ms = offset_ms

    def __call__(self) -> int:
        return self.truth() + self.offset_ms

    def step(self, by_ms: int) -> None:
        self.offset_ms += by_ms


class Latency(httpx.BaseTransport):
    """Real HTTP; the true time advances by ``up_ms`` before the request reaches the server
    and by ``down_ms`` after its answer left it."""

    def __init__(self, truth: ManualClock, up_ms: int, down_ms: int) -> None:
        self.inner = httpx.HTTPTransport()
        self.truth, self.up_ms, self.down_ms = truth, up_ms, down_ms

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.truth.advance(self.up_ms)
        response = self.inner.handle_request(request)
        response.read()
        self.truth.advance(self.down_ms)
        return response

    def close(self) -> None:
        self.inner.close()


class Rig:
    """Home server HOME and device DEV1 (remote queue ORDERS, home-server queue INBOX)."""

    def __init__(self, tmp_path: Path, device_offset_ms: int = 0) -> None:
        self.truth = ManualClock(T0)
        self.server_wall = Wall(self.truth)
        self.device_wall = Wall(self.truth, device_offset_ms)
        self.home = QueueManager(tmp_path / "home.db", name="HOME", clock=self.server_wall)
        self.home.define_queue("ORDERS")
        self.home.define_queue("DEV1.INBOX")
        self.device = QueueManager(tmp_path / "device.db", name="DEV1", clock=self.device_wall)
        self.device.define_remote_queue("ORDERS", target_qmgr="HOME")
        self.device.define_home_server_queue("INBOX", server="HOME")
        self.server = LiveServer(self.home, self.server_wall).start()  # any Clock will do
        self.client = httpx.Client(transport=Latency(self.truth, UP_MS, DOWN_MS), timeout=10)
        self.agent = SyncAgent(self.device, self.server.url, clock=self.device_wall, client=self.client,
                               monotonic=self.monotonic)

    def monotonic(self) -> float:
        """The device's monotonic clock (seconds): the true time from an arbitrary origin."""
        return 5_000.0 + (self.truth() - T0) / 1000

    def push(self, count: int) -> tuple[int, list[int]]:
        """Put ``count`` messages of LIFETIME_MS on the device and push them; returns the
        sender's deadline on the server's clock and the deadlines the server stored."""
        for i in range(count):
            self.device.put("ORDERS", Message(b"%d" % i, expiry=Int32(LIFETIME_MS)))
        # The device reads what is left before the true time moves again (at its put request).
        sender_deadline = self.server_wall() + LIFETIME_MS
        report = self.agent.push_once()
        assert report.ok and (report.transmitted, report.expired) == (count, 0), report
        got = self.home.browse("ORDERS")
        assert len(got) == count
        self.home.get_many("ORDERS", count)  # empty it for the next round
        return sender_deadline, [m.expiry_deadline_ms or 0 for m in got]

    def pull(self, count: int) -> tuple[int, list[int]]:
        """Put ``count`` messages of LIFETIME_MS for DEV1 on the server and pull them; returns
        the server's deadline and the device's, both on the server's clock."""
        for i in range(count):
            self.home.put("DEV1.INBOX", Message(b"%d" % i, expiry=Int32(LIFETIME_MS)))
        server_deadline = self.server_wall() + LIFETIME_MS
        self.truth.advance(250)  # they wait a little before the device asks
        report = self.agent.pull_once()
        assert report.ok and (report.received, report.expired) == (count, 0), report
        got = self.device.get_many("INBOX", count)
        assert len(got) == count
        to_server = self.server_wall.offset_ms - self.device_wall.offset_ms
        return server_deadline, [(m.expiry_deadline_ms or 0) + to_server for m in got]

    def close(self) -> None:
        self.agent.close()
        self.client.close()
        self.server.stop()
        self.device.close()
        self.home.close()


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    rig = Rig(tmp_path)
    yield rig
    rig.close()


def never_later_and_whole(sender: int, receiver: list[int]) -> None:
    """Every receiver deadline is at most the sender's (1 ms of rounding) and loses at
    most a round trip (plus 1 ms of rounding and the drift allowance's few ms)."""
    late = [d - sender for d in receiver if d > sender + 1]
    assert not late, f"{len(late)} deadline(s) later than the sender's, by up to {max(late)} ms"
    short = [sender - d for d in receiver if d < sender - RTT_MS - 2]
    assert not short, f"{len(short)} lifetime(s) shortened beyond a round trip, by up to {max(short)} ms"


STEPS = [pytest.param(s, id=f"{s:+d}ms") for s in (-600_000, -2_000, 2_000, 600_000)]


@pytest.mark.parametrize("step_ms", STEPS)
def test_a_device_clock_step_after_the_hello_keeps_pushed_lifetimes(rig: Rig, step_ms: int) -> None:
    """Before the fix, the server measured every request against the smallest offset seen
    since the hello: 10 minutes back and 100 of 100 fresh 60 s messages were discarded as
    expired; 2 s back and each lost 2 s; a step forward made them late by the latency."""
    rig.agent.hello()
    rig.truth.advance(1_000)
    rig.device_wall.step(step_ms)
    sender, stored = rig.push(100)
    never_later_and_whole(sender, stored)
    rig.truth.advance(5_000)  # and a later round, after more exchanges, still
    never_later_and_whole(*rig.push(10))


@pytest.mark.parametrize("step_ms", STEPS)
def test_a_device_clock_step_after_the_hello_keeps_pulled_lifetimes(rig: Rig, step_ms: int) -> None:
    rig.agent.hello()
    rig.truth.advance(1_000)
    rig.device_wall.step(step_ms)
    server, received = rig.pull(20)
    never_later_and_whole(server, received)


@pytest.mark.parametrize("offset_ms", [HOURS_3, -HOURS_3], ids=["3h-ahead", "3h-behind"])
def test_a_device_clock_hours_off_still_gets_the_whole_lifetime(tmp_path: Path, offset_ms: int) -> None:
    rig = Rig(tmp_path, device_offset_ms=offset_ms)
    try:
        never_later_and_whole(*rig.push(20))
        rig.truth.advance(2_000)
        never_later_and_whole(*rig.pull(20))
        rig.truth.advance(2_000)
        never_later_and_whole(*rig.push(20))
    finally:
        rig.close()


@pytest.mark.parametrize("step_ms", [pytest.param(s, id=f"{s:+d}ms") for s in (-600_000, -2_000, 2_000)])
def test_a_server_clock_step_never_makes_a_deadline_later(rig: Rig, step_ms: int) -> None:
    """The device's bounds on the server's clock were measured before the server's clock
    stepped: the put's answer shows it, the bounds restart, and the batch (still locked on
    the server) is put again, rebased on the new bounds."""
    rig.push(5)
    rig.truth.advance(1_000)
    rig.server_wall.step(step_ms)
    sender, stored = rig.push(20)
    never_later_and_whole(sender, stored)
    never_later_and_whole(*rig.pull(5))


def test_a_server_clock_step_beyond_a_lifetime_expires_the_message_rather_than_extend_it(rig: Rig) -> None:
    """Ten minutes forward between two exchanges: a put rebased on the old bounds says the
    60 s messages are long gone, so the server discards them (conservative: never late).
    The bounds restart at once, and the next messages keep their lifetime."""
    rig.push(5)
    rig.truth.advance(1_000)
    rig.server_wall.step(600_000)
    for i in range(3):
        rig.device.put("ORDERS", Message(b"%d" % i, expiry=Int32(LIFETIME_MS)))
    report = rig.agent.push_once()
    assert report.ok and (report.transmitted, report.expired) == (0, 3)
    rig.truth.advance(LIFETIME_MS)  # the device's own copies expire too
    never_later_and_whole(*rig.push(10))


def test_a_push_after_a_quiet_hour_measures_the_servers_clock_afresh(rig: Rig) -> None:
    """An hour without an exchange widens the bounds by the drift allowance (360 ms each
    way): the agent says hello before it pushes rather than lose that much lifetime."""
    rig.push(5)
    rig.truth.advance(3_600_000)
    never_later_and_whole(*rig.push(10))

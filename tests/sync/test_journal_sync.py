"""What the home server journals through the real HTTP path: accepted messages with the
device and its clock offset, and the device's own expiries reported at its next sync."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from edgeq.sync.agent import SyncAgent

from edgeq import Int32, ManualClock, Message, QueueManager

from .conftest import T0, LiveServer


def test_accepted_entries_carry_device_and_offset_and_device_expiries_are_reported(
    tmp_path: Path, server_clock: ManualClock, make_server: Callable[..., LiveServer],
    make_agent: Callable[..., SyncAgent],
) -> None:
    device_clock = ManualClock(T0 + 1_500)  # the device runs 1.5 s ahead of the server
    home = QueueManager(tmp_path / "home.db", name="HOME", clock=server_clock, journal="server")
    device = QueueManager(tmp_path / "dev.db", name="DEV1", clock=device_clock, journal="device")
    try:
        home.define_queue("ORDERS")
        device.define_remote_queue("ORDERS", target_qmgr="HOME")
        server = make_server(home)
        agent = make_agent(device, server.url, clock=device_clock)
        kept = [device.put("ORDERS", Message(b"order %d" % i)) for i in range(2)]
        doomed = device.put("ORDERS", Message(b"stale", expiry=Int32(100)))
        device_clock.advance(100)
        server_clock.advance(100)

        report = agent.push_once()

        assert report.ok and report.transmitted == 2 and report.expiries_reported == 1
        entries = home.journal_since()
        accepted = [e for e in entries if e.kind == "accepted"]
        assert sorted(e.uid for e in accepted) == sorted(str(u) for u in kept)
        assert {(e.device, e.clock_offset_ms) for e in accepted} == {("DEV1", 1_500)}
        (expired,) = [e for e in entries if e.kind == "expired"]
        assert (expired.uid, expired.side, expired.device, expired.check_point) == (str(doomed), "device", "DEV1", "get")
        assert expired.at_ms == T0 + 100  # the device's T0 + 1,600, rebased to the server clock
        assert device.journal_since() == []  # the outbox was trimmed once the server had it
        (record,) = home.devices()
        assert (record.name, record.clock_offset_ms) == ("DEV1", 1_500)
        assert agent.push_once().expiries_reported == 0  # nothing reported twice
    finally:
        device.close()
        home.close()

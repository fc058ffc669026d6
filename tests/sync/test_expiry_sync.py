"""Expiry across the wire: remaining ms rebased on the receiver, MQe's "expires twice"."""

from __future__ import annotations

from datetime import UTC, datetime

from edgeq import Int32, Int64, ManualClock, Message, QueueManager
from edgeq.sync.agent.agent import SyncAgent
from tests.sync.conftest import LiveServer, Network, Recorder


def at(hhmm: str) -> int:
    hour, minute = map(int, hhmm.split(":"))
    return int(datetime(2005, 1, 1, hour, minute, tzinfo=UTC).timestamp() * 1000)


def test_a_message_expiring_between_the_two_stages_expires_on_both_sides_once(
    device_qm: QueueManager, home_qm: QueueManager, flaky_agent: SyncAgent, network: Network,
    device_clock: ManualClock, server_clock: ManualClock,
) -> None:
    """The seed's scenario: due to expire at 10:00 1st Jan 2005, put stage at 09:55,
    network down until 10:05."""
    device_clock.set(at("09:55"))
    server_clock.set(at("09:55"))
    on_device, on_server = Recorder(), Recorder()
    device_qm.add_rule("ORDERS", on_device)
    home_qm.add_rule("ORDERS", on_server)
    uid = device_qm.put("ORDERS", Message(b"order 42").expire_at(at("10:00")))

    network.down_for.add("/v1/confirm")  # the network fails after the first stage
    first = flaky_agent.push_once()
    assert not first.ok and first.sent == 1
    assert home_qm.browse("ORDERS") == [] and device_qm.depth("ORDERS") == 1  # locked there, kept here

    device_clock.set(at("10:05"))
    server_clock.set(at("10:05"))
    network.down_for.clear()
    again = flaky_agent.push_once()  # the device's copy has expired: nothing is sent
    home_qm.sweep_expired()  # the server's periodic expiry scan (edgeq serve --sweep-interval)
    flaky_agent.push_once()
    home_qm.sweep_expired()

    assert again.ok and again.sent == 0
    device_expiries = [e for e in on_device.events if e.kind == "expired"]
    server_expiries = [e for e in on_server.events if e.kind == "expired"]
    assert [(e.message.uid, e.message.data) for e in device_expiries if e.message] == [(uid, b"order 42")]
    assert [(e.message.uid, e.message.data) for e in server_expiries if e.message] == [(uid, b"order 42")]
    assert home_qm.depth("ORDERS") == 0 and device_qm.depth("ORDERS") == 0
    assert not [e for e in on_server.events if e.kind == "removed"]  # never delivered


def test_a_late_confirm_of_an_expired_lock_reports_expired(
    device_qm: QueueManager, home_qm: QueueManager, flaky_agent: SyncAgent, network: Network,
    device_clock: ManualClock, server_clock: ManualClock, server: LiveServer,
) -> None:
    """The confirm arrives, but only after the locked copy's deadline: the server
    discards it (its rule fires once) and the device never puts it again."""
    on_server = Recorder()
    home_qm.add_rule("ORDERS", on_server)
    device_qm.put("ORDERS", Message(b"x", expiry=Int32(60_000)))

    def confirm_delayed() -> None:  # the confirm is held up in the network for 2 minutes
        server_clock.advance(120_000)
        device_clock.advance(120_000)

    network.before["/v1/confirm"] = confirm_delayed
    report = flaky_agent.push_once()
    assert report.ok and (report.transmitted, report.expired) == (0, 1)
    assert [e.where for e in on_server.events if e.kind == "expired"] == ["add"]
    assert server.metrics.value("expired_locked") == 1
    assert flaky_agent.push_once().sent == 0  # the device's own copy expired as well
    assert device_qm.depth("ORDERS") == 0


def test_a_message_that_expires_in_transit_is_discarded_on_arrival(
    device_qm: QueueManager, home_qm: QueueManager, flaky_agent: SyncAgent, network: Network,
    device_clock: ManualClock, server_clock: ManualClock, server: LiveServer,
) -> None:
    on_device, on_server = Recorder(), Recorder()
    device_qm.add_rule("ORDERS", on_device)
    home_qm.add_rule("ORDERS", on_server)
    uid = device_qm.put("ORDERS", Message(b"perishable", expiry=Int32(30_000)))
    flaky_agent.hello()

    def held_in_a_proxy() -> None:  # the put reaches the server 10 minutes after it was sent
        server_clock.advance(600_000)
        device_clock.advance(600_000)

    network.before["/v1/put"] = held_in_a_proxy
    report = flaky_agent.push_once()

    assert (report.expired, report.transmitted) == (1, 0)
    assert [(e.message.uid, e.where) for e in on_server.events if e.kind == "expired" and e.message] == [
        (uid, "add")]
    assert home_qm.depth("ORDERS") == 0
    assert server.metrics.value("expired_on_arrival") == 1
    assert flaky_agent.push_once().sent == 0  # never sent again; it expires here too, once
    assert [(e.message.uid, e.where) for e in on_device.events if e.kind == "expired" and e.message] == [
        (uid, "get")]


def test_expiry_is_rebased_on_the_servers_clock_whatever_the_device_clock_says(
    device_qm: QueueManager, home_qm: QueueManager, agent: SyncAgent,
    device_clock: ManualClock, server_clock: ManualClock, server: LiveServer,
) -> None:
    device_clock.set(server_clock() - 3_600_000)  # the device's clock is an hour slow
    device_qm.put("ORDERS", Message(b"x", expiry=Int32(60_000)))
    device_clock.advance(10_000)  # 50 s left; the device is now 59m50s behind
    hello = agent.hello()
    assert hello.server_offset_ms == 3_590_000 and hello.offset_ms == -3_590_000
    assert server.sessions.get("DEV1").clock_offset_ms == 3_590_000
    assert agent.push_once().transmitted == 1
    got = home_qm.browse("ORDERS")[0]
    assert got.expiry == Int64(server_clock() + 50_000) and got.remaining_expiry_ms == 50_000


def test_a_slow_hello_does_not_make_later_deadlines_late(
    device_qm: QueueManager, home_qm: QueueManager, flaky_agent: SyncAgent, network: Network,
    device_clock: ManualClock, server_clock: ManualClock,
) -> None:
    """The clocks agree, but the hello spends 500 ms in the network, so the offset it
    measures is 500 ms too high; a later put delayed 300 ms must still be rebased by 300."""

    def slow_hello() -> None:
        device_clock.advance(500)
        server_clock.advance(500)

    network.before["/v1/hello"] = slow_hello
    device_qm.put("ORDERS", Message(b"first"))
    assert flaky_agent.push_once().ok  # its prompt put shows the offset is really 0

    def slow_put() -> None:
        device_clock.advance(300)
        server_clock.advance(300)

    network.before["/v1/put"] = slow_put
    deadline = device_clock() + 1_000
    device_qm.put("ORDERS", Message(b"second", expiry=Int32(1_000)))
    assert flaky_agent.push_once().ok
    (second,) = [m for m in home_qm.browse("ORDERS") if m.data == b"second"]
    assert second.remaining_expiry_ms == deadline - server_clock()  # the device's deadline, not 300 ms later

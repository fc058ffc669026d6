"""The home server's device sessions: clock offsets, last seen, settled marks; and the
per-device gauges Metrics renders from them."""

from __future__ import annotations

import threading

from edgeq.sync.server.metrics import Metrics
from edgeq.sync.server.sessions import DeviceSessions
from tests.sync.conftest import T0


def test_a_device_has_no_session_until_its_hello() -> None:
    sessions = DeviceSessions()
    assert sessions.current("DEV1") is None and sessions.get("DEV1") is None
    state = sessions.device("DEV1")
    assert sessions.device("DEV1") is state and sessions.get("DEV1") is state
    assert sessions.current("DEV1") is None  # known, but no clock offset yet
    assert state.said_hello(sent_ms=T0 - 1_500, now_ms=T0, agent="edgeq/0.1") == 1_500
    assert sessions.current("DEV1") is state
    assert ((state.clock_offset_ms, state.last_seen_ms, state.hellos, state.agent)
            == (1_500, T0, 1, "edgeq/0.1"))


def test_each_hello_renews_the_offset_and_keeps_a_bounded_agent_string() -> None:
    state = DeviceSessions().device("DEV1")
    state.said_hello(sent_ms=T0, now_ms=T0 + 250, agent="x" * 1_000)
    state.said_hello(sent_ms=T0 + 10_000, now_ms=T0 + 9_900, agent=42)
    assert (state.clock_offset_ms, state.hellos, state.agent) == (-100, 2, "")
    state.said_hello(sent_ms=T0, now_ms=T0, agent="y" * 1_000)
    assert state.agent == "y" * 200


def test_the_journal_offset_comes_from_the_latest_puts_bounds_else_the_hello() -> None:
    state = DeviceSessions().device("DEV1")
    assert state.journal_offset_ms is None
    state.said_hello(sent_ms=T0 - 400, now_ms=T0)  # the hello measured 400 ms (latency included)
    assert state.journal_offset_ms == -400  # device minus server
    state.put_bounds(T0 - 100, None)  # an older agent: no bounds, nothing learnt
    assert state.journal_offset_ms == -400
    state.put_bounds(T0 - 100, T0 - 250)  # the device read T0-100 when the server was at least T0-250
    assert (state.device_offset_ms, state.journal_offset_ms, state.clock_offset_ms) == (150, 150, 400)


def test_a_settled_mark_is_due_only_when_it_moves_forward() -> None:
    sessions = DeviceSessions()
    origin = "DEV1:abcdefghij"
    assert sessions.settle_due(origin, 0)
    sessions.settled(origin, 10)
    assert not sessions.settle_due(origin, 10) and not sessions.settle_due(origin, 5)
    assert sessions.settle_due(origin, 11) and sessions.settle_due("DEV1:klmnopqrst", 1)
    sessions.settled(origin, 5)  # a late writer never moves the mark back
    assert not sessions.settle_due(origin, 10)


def test_clear_forgets_what_a_restart_forgets() -> None:
    sessions = DeviceSessions()
    sessions.device("DEV1").said_hello(sent_ms=T0, now_ms=T0)
    sessions.settled("DEV1:abcdefghij", 10)
    sessions.clear()
    assert sessions.all() == [] and sessions.current("DEV1") is None
    assert sessions.settle_due("DEV1:abcdefghij", 10)


def test_devices_are_listed_by_name_and_created_once_under_contention() -> None:
    sessions = DeviceSessions()
    got: list[object] = []
    threads = [threading.Thread(target=lambda: got.append(sessions.device("DEV2"))) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    sessions.device("DEV1")
    assert len({id(s) for s in got}) == 1
    assert [s.name for s in sessions.all()] == ["DEV1", "DEV2"]


def test_metrics_render_the_per_device_gauges_from_the_sessions() -> None:
    sessions, metrics = DeviceSessions(), Metrics()
    sessions.device("DEV1").said_hello(sent_ms=T0 - 250, now_ms=T0)
    sessions.device('odd"name').seen(T0)  # heard from, no hello: seen but no offset
    text = metrics.render(sessions)
    assert "edgeq_sync_devices 2" in text
    assert f'edgeq_sync_device_last_seen_timestamp_seconds{{device="DEV1"}} {T0 / 1000}' in text
    assert f'edgeq_sync_device_last_seen_timestamp_seconds{{device="odd\\"name"}} {T0 / 1000}' in text
    assert 'edgeq_sync_device_clock_offset_seconds{device="DEV1"} 0.25' in text
    assert "odd" not in text.split("edgeq_sync_device_clock_offset_seconds")[-1]
    alone = metrics.render()  # counters only
    assert "edgeq_sync_devices 0" in alone and "DEV1" not in alone


def test_each_device_has_its_own_put_lock() -> None:
    """HoldGate serialises one device's puts (its quota) without holding up another's."""
    sessions = DeviceSessions()
    one, two = sessions.device("DEV1"), sessions.device("DEV2")
    with one.put_lock:
        assert not one.put_lock.acquire(blocking=False)
        assert two.put_lock.acquire(blocking=False)
        two.put_lock.release()
    assert sessions.device("DEV1").put_lock is one.put_lock
    assert "put_lock" not in repr(one)


def test_a_reported_backlog_is_stored_when_it_reaches_or_leaves_zero_else_every_10_s_per_queue() -> None:
    state = DeviceSessions().device("DEV1")
    due = [state.backlog_due("ORDERS", n, at) for n, at in (
        (50, T0), (40, T0 + 1_000), (0, T0 + 2_000), (0, T0 + 3_000), (7, T0 + 4_000), (6, T0 + 5_000),
        (5, T0 + 14_000))]
    assert due == [True, False, True, False, True, False, True]
    assert state.backlog_due("METRICS", 3, T0 + 12_000)  # each queue on its own
    assert state.backlog_due("ORDERS", 5, T0 + 1_000)  # the server's clock stepped back: stored

"""The sync status per queue (``edgeq sync status``, ``SyncAgent.status()`` and the agent's
metrics), read from the device's store: a real agent against the real home server on
loopback, the device's clock a ManualClock, and the figures read again by a fresh queue
manager on the same file, as the CLI does while (or after) the agent runs."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from edgeq import ManualClock, Message, QueueManager
from edgeq.sync.agent.agent import SyncAgent
from edgeq.sync.agent.status import QueueStatus, SyncStatus, render_metrics, sync_status
from tests.sync.conftest import T0


def by_queue(status: SyncStatus) -> dict[str, QueueStatus]:
    return {q.queue: q for q in status.queues}


def test_each_queue_shows_backlog_age_success_error_refusals_and_next_retry(
    device_qm: QueueManager, home_qm: QueueManager, agent: SyncAgent, device_clock: ManualClock
) -> None:
    home_qm.define_queue("DEV1.INBOX")
    device_qm.define_remote_queue("METRICS", target_qmgr="HOME")  # missing on the server
    device_qm.define_home_server_queue("INBOX", server="HOME")
    device_qm.put("METRICS", Message(b"a"))
    device_clock.advance(60_000)
    device_qm.put("ORDERS", Message(b"o"))
    agent.sync_once()
    device_clock.advance(5_000)

    status = agent.status()

    queues = by_queue(status)
    metrics, orders, inbox = queues["METRICS"], queues["ORDERS"], queues["INBOX"]
    assert (metrics.direction, metrics.target, metrics.backlog, metrics.oldest_age_ms) == (
        "push", "HOME/METRICS", 1, 65_000)
    assert (metrics.refused, metrics.refusals, metrics.dead_lettered) == (1, 1, 0)
    assert (metrics.last_error_code, metrics.last_error_ms, metrics.last_success_ms) == (
        "no-queue", T0 + 60_000, None)
    assert metrics.failing and metrics.next_retry_ms == T0 + 61_000  # its own backoff: 1 s, then 2 s, ...
    assert metrics.last_error is not None and "edgeq queue define METRICS" in metrics.last_error
    assert (orders.backlog, orders.oldest_age_ms, orders.last_success_ms, orders.failing) == (
        0, None, T0 + 60_000, False)
    assert orders.next_retry_ms is None and orders.last_error is None
    assert (inbox.direction, inbox.target, inbox.backlog, inbox.last_success_ms) == (
        "pull", "HOME/DEV1.INBOX", None, T0 + 60_000)
    assert status.server == "HOME" and status.failing
    assert status.now_ms == T0 + 65_000


def test_the_figures_survive_the_agent_and_read_the_same_from_the_store(
    device_qm: QueueManager, agent: SyncAgent, device_clock: ManualClock, tmp_path: Path
) -> None:
    device_qm.define_remote_queue("METRICS", target_qmgr="HOME")
    device_qm.put("METRICS", Message(b"a"))
    agent.push_once()
    while_running = agent.status()
    agent.close()

    with QueueManager(tmp_path / "device.db", clock=device_clock) as again:
        after = sync_status(again)

    # All but the retries: with the agent gone (and no daemon on the store) nothing is retried.
    assert by_queue(while_running)["METRICS"].next_retry_ms is not None
    assert after == dataclasses.replace(
        while_running, queues=[dataclasses.replace(q, next_retry_ms=None) for q in while_running.queues])


def test_the_metrics_carry_the_same_figures(
    device_qm: QueueManager, agent: SyncAgent, device_clock: ManualClock
) -> None:
    device_qm.define_remote_queue("METRICS", target_qmgr="HOME")
    device_qm.put("METRICS", Message(b"a"))
    device_qm.put("ORDERS", Message(b"o"))
    agent.push_once()
    device_clock.advance(2_500)

    text = agent.metrics()

    assert text == render_metrics(agent.status())
    lines = set(text.splitlines())
    assert 'edgeq_agent_queue_backlog_messages{queue="METRICS",direction="push"} 1' in lines
    assert 'edgeq_agent_queue_oldest_message_age_seconds{queue="METRICS",direction="push"} 2.5' in lines
    assert 'edgeq_agent_queue_refused_messages{queue="METRICS",direction="push"} 1' in lines
    assert 'edgeq_agent_queue_refusals{queue="METRICS",direction="push"} 1' in lines
    assert 'edgeq_agent_queue_dead_lettered_total{queue="METRICS",direction="push"} 0' in lines
    assert 'edgeq_agent_queue_failing{queue="METRICS",direction="push",code="no-queue"} 1' in lines
    assert (
        f'edgeq_agent_queue_next_retry_timestamp_seconds{{queue="METRICS",direction="push"}} '
        f'{(T0 + 1000) / 1000}'
        in lines)
    assert 'edgeq_agent_queue_failing{queue="ORDERS",direction="push",code=""} 0' in lines
    assert (f'edgeq_agent_queue_last_success_timestamp_seconds{{queue="ORDERS",direction="push"}} {T0 / 1000}'
            in lines)
    assert not any(line.startswith('edgeq_agent_queue_oldest_message_age_seconds{queue="ORDERS"')
                   for line in lines)
    assert "# TYPE edgeq_agent_queue_dead_lettered_total counter" in lines


def test_a_store_that_never_synced_shows_its_queues_waiting(device_qm: QueueManager) -> None:
    device_qm.put("ORDERS", Message(b"o"))
    status = sync_status(device_qm)
    (orders,) = status.queues
    assert ((orders.backlog, orders.last_success_ms, orders.last_error_code, orders.failing)
            == (1, None, None, False))
    assert status.server is None and not status.failing

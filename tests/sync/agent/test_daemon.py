"""The agent's background loop, running the agent's real cycle (push, then pull, over a real
link to the real home server on loopback; faults from ``Network``): a cycle at start, one
at once after a put while online (never while offline), backoff after a failure, clean stops."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator

import pytest

from edgeq import ManualClock, Message, QueueManager
from edgeq.rules import QueueRule
from edgeq.rules.base import RuleEvent
from edgeq.sync.agent.agent import SyncAgent
from edgeq.sync.agent.daemon import Daemon
from edgeq.sync.agent.expiries import ExpiryReporter
from edgeq.sync.agent.link import ServerLink
from edgeq.sync.agent.pull import Puller
from edgeq.sync.agent.push import Pusher
from edgeq.sync.agent.reports import Progress
from edgeq.sync.agent.signer import DeviceSigner
from edgeq.sync.server.nonces import MemoryNonces
from tests.sync.conftest import LiveServer, Network, free_port
from tests.sync.test_refusals import forbidding


class Cycles:
    """The agent's cycle (push with ``progress``, then pull; whether both succeeded) over
    ``link``, counted as each one ends, however it ends."""

    def __init__(self, link: ServerLink) -> None:
        self.pusher = Pusher(link, ExpiryReporter(link))
        self.puller = Puller(link)
        self.progress: Callable[[Progress], None] | None = None
        self.count = 0
        self._changed = threading.Condition()

    def __call__(self) -> bool:
        try:
            return self.pusher.push_once(self.progress).ok and self.puller.pull_once().ok
        finally:
            with self._changed:
                self.count += 1
                self._changed.notify_all()

    def wait_for(self, n: int, timeout: float = 10) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: self.count >= n, timeout)


@pytest.fixture
def link(make_link: Callable[..., ServerLink]) -> ServerLink:
    return make_link()


@pytest.fixture
def cycles(link: ServerLink) -> Iterator[Cycles]:
    made = Cycles(link)
    yield made
    made.pusher.close()


@pytest.fixture
def make_daemon(device_qm: QueueManager, link: ServerLink, cycles: Cycles) -> Iterator[Callable[[], Daemon]]:
    made: list[Daemon] = []

    def _make() -> Daemon:
        daemon = Daemon(device_qm, cycles, online=lambda: link.online, backoff_base_s=0.01,
                        backoff_max_s=0.05, server_url=link.transport.server_url)
        made.append(daemon)
        return daemon

    yield _make
    for daemon in made:
        daemon.stop()


def datas(qm: QueueManager) -> list[bytes]:
    return [m.data for m in qm.browse("ORDERS")]


def test_a_cycle_runs_at_start_and_at_once_after_a_put(
    make_daemon: Callable[[], Daemon], cycles: Cycles, device_qm: QueueManager, home_qm: QueueManager
) -> None:
    make_daemon().start(interval_s=3600)  # the tick never comes in this test
    assert cycles.wait_for(1)
    device_qm.put("ORDERS", Message(b"go"))
    assert cycles.wait_for(2)
    assert datas(home_qm) == [b"go"] and device_qm.depth("ORDERS") == 0


def test_a_put_while_offline_waits_for_the_next_tick(
    make_daemon: Callable[[], Daemon], cycles: Cycles, link: ServerLink, network: Network,
    device_qm: QueueManager, home_qm: QueueManager,
) -> None:
    device_qm.define_home_server_queue("INBOX", server="HOME")
    home_qm.define_queue("DEV1.INBOX")
    make_daemon().start(interval_s=3600)
    assert cycles.wait_for(1)
    network.down = True
    by_hand = Puller(link)  # the application pulls by hand too, and finds the server unreachable
    assert not by_hand.pull_once().ok and not link.online
    device_qm.put("ORDERS", Message(b"later"))
    assert not cycles.wait_for(2, timeout=0.3)
    network.down = False
    assert by_hand.pull_once().ok and link.online  # reachable again: a put wakes the loop at once
    device_qm.put("ORDERS", Message(b"now"))
    assert cycles.wait_for(2)
    assert datas(home_qm) == [b"later", b"now"]


def test_the_interval_ticks(make_daemon: Callable[[], Daemon], cycles: Cycles) -> None:
    make_daemon().start(interval_s=0.05)
    assert cycles.wait_for(3)


def test_failures_are_retried_with_backoff_and_a_raising_cycle_is_one(
    make_daemon: Callable[[], Daemon], cycles: Cycles, network: Network, device_qm: QueueManager,
    home_qm: QueueManager, caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(progress: Progress) -> None:
        raise RuntimeError("a bug in the application's progress callback")

    device_qm.put("ORDERS", Message(b"once"))
    network.lose_once.append("/v1/put")  # cycle 1: the put's answer is lost, a failure
    cycles.progress = broken  # cycle 2 transmits, then the callback raises; cycle 3 has nothing to show
    daemon = make_daemon()
    with caplog.at_level(logging.INFO, logger="edgeq.sync.agent"):
        daemon.start(interval_s=3600)
        assert cycles.wait_for(3)
        daemon.stop()  # waits for the loop: every line of the three cycles is logged
    events = [(getattr(r, "event", None), getattr(r, "failures", None)) for r in caplog.records]
    assert ("cycle-error", None) in events
    assert [f for e, f in events if e == "backoff"] == [1, 2]
    assert all(0.005 <= getattr(r, "delay_s", 0.01) <= 0.05 for r in caplog.records)
    assert datas(home_qm) == [b"once"] and device_qm.depth("ORDERS") == 0


def test_start_checks_its_arguments_and_stop_allows_a_new_start(
    make_daemon: Callable[[], Daemon], cycles: Cycles, device_qm: QueueManager, home_qm: QueueManager
) -> None:
    daemon = make_daemon()
    with pytest.raises(ValueError, match="positive"):
        daemon.start(interval_s=0)
    daemon.start(interval_s=3600)
    with pytest.raises(RuntimeError, match="already running"):
        daemon.start(interval_s=3600)
    assert cycles.wait_for(1)
    daemon.stop()
    daemon.stop()  # a no-op
    device_qm.put("ORDERS", Message(b"while stopped"))
    assert cycles.count == 1 and datas(home_qm) == []
    daemon.start(interval_s=3600)
    assert cycles.wait_for(2)  # the cycle at start pushes it
    assert datas(home_qm) == [b"while stopped"]
    device_qm.put("ORDERS", Message(b"woken"))
    assert cycles.wait_for(3)
    assert datas(home_qm) == [b"while stopped", b"woken"]


def test_run_returns_once_a_stop_is_requested(make_daemon: Callable[[], Daemon], cycles: Cycles) -> None:
    daemon = make_daemon()
    runner = threading.Thread(target=daemon.run, kwargs={"interval_s": 3600})
    runner.start()
    assert cycles.wait_for(1)
    daemon.request_stop()
    runner.join(10)
    assert not runner.is_alive()


def test_a_forbidden_queue_neither_stops_the_pulls_nor_backs_off_the_daemon(
    device_qm: QueueManager, home_qm: QueueManager, server_clock: ManualClock, device_clock: ManualClock,
    make_server: Callable[..., LiveServer], make_agent: Callable[..., SyncAgent],
    caplog: pytest.LogCaptureFixture,
) -> None:
    nonces = MemoryNonces()
    server, key = forbidding(home_qm, device_qm, make_server, server_clock, nonces)  # AUDIT is forbidden
    arrived, sent = Seen(), Seen()
    device_qm.add_rule("INBOX", arrived)
    device_qm.add_rule("ORDERS", sent)
    agent = make_agent(device_qm, server.url, auth=DeviceSigner("DEV1", key, clock=device_clock),
                       backoff_base_s=60, backoff_max_s=300)

    with caplog.at_level(logging.INFO, logger="edgeq.sync.agent"):
        agent.start(interval_s=3600)
        assert arrived.wait_for("added", 1)  # the first cycle pulled, although AUDIT was forbidden
        device_qm.put("ORDERS", Message(b"woken"))  # still online: a put wakes the loop at once
        assert sent.wait_for("removed", 1)  # transmitted
        agent.stop()

    events = [getattr(r, "event", None) for r in caplog.records]
    assert "backoff" not in events and "forbidden" in events
    assert device_qm.depth("AUDIT") == 1 and [m.data for m in home_qm.browse("ORDERS")] == [b"woken"]
    nonces.close()


class Seen(QueueRule):
    """Counts the messages added to and removed from the queue it is bound to, for a test to wait on."""

    def __init__(self) -> None:
        self.counts = {"added": 0, "removed": 0}
        self._changed = threading.Condition()

    def _count(self, event: RuleEvent) -> None:
        with self._changed:
            self.counts[event.kind] += 1
            self._changed.notify_all()

    on_added = on_removed = _count

    def wait_for(self, kind: str, n: int, timeout: float = 10) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: self.counts[kind] >= n, timeout)


def test_a_failed_cycle_records_when_the_agent_tries_again(
    device_qm: QueueManager, make_agent: Callable[..., SyncAgent], device_clock: ManualClock,
) -> None:
    backed_off = threading.Event()

    class Told(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if getattr(record, "event", None) == "backoff":
                backed_off.set()

    handler = Told(logging.INFO)
    logger = logging.getLogger("edgeq.sync.agent")
    logger.addHandler(handler)
    previous = logger.level
    logger.setLevel(logging.INFO)
    try:
        agent = make_agent(device_qm, f"http://127.0.0.1:{free_port()}", timeout=5, backoff_base_s=60)
        agent.start(interval_s=3600)
        assert backed_off.wait(10)
        agent.stop()  # returns once the loop has recorded its retry and waits for it
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)

    status = agent.status()
    assert status.stopped and status.error_code == "unreachable" and status.failing
    assert (status.next_retry_ms is not None
            and device_clock() + 30_000 <= status.next_retry_ms <= device_clock() + 60_000)

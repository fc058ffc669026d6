"""The agent's background loop, with a stand-in cycle: a cycle at start, one at once
after a put while online (never while offline), backoff after a failure, clean stops."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from edgeq.sync.daemon import Daemon

from edgeq import Message, QueueManager


class Cycles:
    """A stand-in cycle: answers from ``results`` in turn (then True); an exception is raised."""

    def __init__(self, *results: bool | Exception) -> None:
        self.results = list(results)
        self.count = 0
        self._changed = threading.Condition()

    def __call__(self) -> bool:
        with self._changed:
            self.count += 1
            self._changed.notify_all()
        result = self.results.pop(0) if self.results else True
        if isinstance(result, Exception):
            raise result
        return result

    def wait_for(self, n: int, timeout: float = 10) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: self.count >= n, timeout)


@pytest.fixture
def make_daemon(device_qm: QueueManager) -> Iterator[Callable[..., Daemon]]:
    made: list[Daemon] = []

    def _make(cycle: Callable[[], bool], online: bool = True) -> Daemon:
        daemon = Daemon(device_qm, cycle, online=lambda: online, backoff_base_s=0.01, backoff_max_s=0.05,
                        server_url="http://home:8470")
        made.append(daemon)
        return daemon

    yield _make
    for daemon in made:
        daemon.stop()


def test_a_cycle_runs_at_start_and_at_once_after_a_put(make_daemon: Callable[..., Daemon],
                                                          device_qm: QueueManager) -> None:
    cycles = Cycles()
    make_daemon(cycles).start(interval_s=3600)  # the tick never comes in this test
    assert cycles.wait_for(1)
    device_qm.put("ORDERS", Message(b"go"))
    assert cycles.wait_for(2)


def test_a_put_while_offline_waits_for_the_next_tick(make_daemon: Callable[..., Daemon],
                                                     device_qm: QueueManager) -> None:
    cycles = Cycles()
    make_daemon(cycles, online=False).start(interval_s=3600)
    assert cycles.wait_for(1)
    device_qm.put("ORDERS", Message(b"later"))
    assert not cycles.wait_for(2, timeout=0.3)


def test_the_interval_ticks(make_daemon: Callable[..., Daemon]) -> None:
    cycles = Cycles()
    make_daemon(cycles).start(interval_s=0.05)
    assert cycles.wait_for(3)


def test_failures_are_retried_with_backoff_and_a_raising_cycle_is_one(
    make_daemon: Callable[..., Daemon], caplog: pytest.LogCaptureFixture
) -> None:
    cycles = Cycles(False, RuntimeError("bug"), True)
    with caplog.at_level(logging.INFO, logger="edgeq.sync.agent"):
        make_daemon(cycles).start(interval_s=3600)
        assert cycles.wait_for(3)
        time.sleep(0.05)
    events = [(getattr(r, "event", None), getattr(r, "failures", None)) for r in caplog.records]
    assert ("cycle-error", None) in events
    assert [f for e, f in events if e == "backoff"] == [1, 2]
    assert all(0.005 <= getattr(r, "delay_s", 0.01) <= 0.05 for r in caplog.records)


def test_start_checks_its_arguments_and_stop_allows_a_new_start(make_daemon: Callable[..., Daemon],
                                                                device_qm: QueueManager) -> None:
    cycles = Cycles()
    daemon = make_daemon(cycles)
    with pytest.raises(ValueError, match="positive"):
        daemon.start(interval_s=0)
    daemon.start(interval_s=3600)
    with pytest.raises(RuntimeError, match="already running"):
        daemon.start(interval_s=3600)
    assert cycles.wait_for(1)
    daemon.stop()
    daemon.stop()  # a no-op
    device_qm.put("ORDERS", Message(b"while stopped"))
    daemon.start(interval_s=3600)
    assert cycles.wait_for(2)
    device_qm.put("ORDERS", Message(b"woken"))
    assert cycles.wait_for(3)


def test_run_returns_once_a_stop_is_requested(make_daemon: Callable[..., Daemon]) -> None:
    cycles = Cycles()
    daemon = make_daemon(cycles)
    runner = threading.Thread(target=daemon.run, kwargs={"interval_s": 3600})
    runner.start()
    assert cycles.wait_for(1)
    daemon.request_stop()
    runner.join(10)
    assert not runner.is_alive()

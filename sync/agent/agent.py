"""The device side: push remote queues to the home server, pull home-server queues from it.

    agent = SyncAgent(qm, "http://home:8470")
    pushed, pulled = agent.sync_once()  # push, then pull (what `edgeq sync --once` does)
    agent.run(interval_s=5)      # or a daemon: ticks, backoff, wake on put

How it works, and why every step is safe to repeat: docs/protocol.md, "The agent".
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

import httpx

from edgeq.args import check_positive
from edgeq.clock import system_clock
from edgeq.errors import EdgeqError
from edgeq.manager import QueueManager
from edgeq.sync.agent.admin import AdminRelay, merged
from edgeq.sync.agent.clockbounds import ServerClockBounds
from edgeq.sync.agent.daemon import Daemon, DaemonState
from edgeq.sync.agent.expiries import ExpiryReporter
from edgeq.sync.agent.link import ServerLink
from edgeq.sync.agent.pull import Puller
from edgeq.sync.agent.push import Pusher
from edgeq.sync.agent.reports import HelloInfo, Progress, PullReport, PushReport, QueueReport
from edgeq.sync.agent.status import SyncStatus, render_metrics, sync_status
from edgeq.sync.agent.transport import SyncError, Transport
from edgeq.types import Clock

__all__ = ["HelloInfo", "Progress", "PullReport", "PushReport", "QueueReport", "SyncAgent",
           "SyncError"]

log = logging.getLogger("edgeq.sync.agent")


class SyncAgent:
    """Synchronise one device queue manager with its home server (thread-safe). ``clock``: the
    device's (epoch ms); ``monotonic``: seconds no wall-clock step moves."""

    def __init__(
        self,
        qm: QueueManager,
        server_url: str,
        *,
        batch_size: int = 500,
        client: httpx.Client | None = None,
        clock: Clock | None = None,
        timeout: float = 30.0,
        auth: httpx.Auth | None = None,
        backoff_base_s: float = 1.0,
        backoff_max_s: float = 300.0,
        ca_file: Path | None = None,
        allow_insecure_http: bool = False,
        monotonic: Callable[[], float] = time.monotonic,
        admin: bool | None = None,
    ) -> None:
        check_positive(batch_size, "batch_size")
        self.qm = qm
        self.transport = Transport(server_url, client=client, timeout=timeout, auth=auth,
                                   ca_file=ca_file, allow_insecure_http=allow_insecure_http)
        self._link = ServerLink(qm, self.transport, clock=clock or system_clock,
                                monotonic=monotonic, batch_size=batch_size)
        #: bounds on the server's clock from this agent's exchanges (reset by each hello)
        self.server_clock: ServerClockBounds = self._link.server_clock
        # A failing queue waits as the daemon does after a failure, on its own schedule.
        self._link.health.backoff_base_s, self._link.health.backoff_max_s = (
            backoff_base_s, backoff_max_s)
        self._pusher = Pusher(self._link, ExpiryReporter(self._link))
        self._puller = Puller(self._link)
        #: the device's part in remote administration (its ``enabled`` is the ``admin`` option)
        self.admin = AdminRelay(self._link, admin)
        self._daemon = Daemon(qm, self._cycle, online=lambda: self._link.online,
                              backoff_base_s=backoff_base_s, backoff_max_s=backoff_max_s,
                              server_url=self.transport.server_url,
                              on_backoff=self._backing_off, on_state=self._daemon_state)
        #: whether the daemon's cycles also pull home-server queues
        self.pull_enabled = True
        #: whether the daemon also runs the store's bridges (``edgeq sync``'s ``--bridges``)
        self.bridges_enabled = False
        self.progress: Callable[[Progress], None] | None = None
        qm.exchange.set_transmitter(self._pusher.transmit)

    # -- lifecycle ---------------------------------------------------------------------

    def close(self) -> None:
        """Stop the daemon, write the status not yet written, unregister the transmitter, close."""
        self.stop()
        try:
            self._link.health.flush(force=True)
        except EdgeqError as exc:  # the store closed first: the status is older than the agent knows
            log.warning("the last sync state could not be written: %s", exc, extra={"event": "state-lost"})
        self.qm.exchange.set_transmitter(None)
        self._pusher.close()
        self.transport.close()

    def __enter__(self) -> SyncAgent:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- state -------------------------------------------------------------------------

    @property
    def online(self) -> bool:
        """Whether the last exchange with the server succeeded."""
        return self._link.online

    @property
    def batch_size(self) -> int:
        """The most messages (or expiry entries) sent or asked for in one request."""
        return self._link.batch_size

    @batch_size.setter
    def batch_size(self, size: int) -> None:
        self._link.batch_size = size

    @property
    def progress_interval_s(self) -> float:
        """At least this long (seconds) between two calls of the progress callback."""
        return self._pusher.progress_interval_s

    @progress_interval_s.setter
    def progress_interval_s(self, seconds: float) -> None:
        self._pusher.progress_interval_s = seconds

    @property
    def last_push(self) -> PushReport | None:
        return self._pusher.last

    # -- exchanges ---------------------------------------------------------------------

    def hello(self) -> HelloInfo:
        """Handshake: learn the server's name and limits; restarts :attr:`server_clock`."""
        return self._link.hello()

    def push_once(self, *, progress: Callable[[Progress], None] | None = None,
                  due_only: bool = False) -> PushReport:
        """Transmit every remote queue addressed to this server until none is left or a failure;
        never raises for network problems. ``due_only``: skip queues in their own backoff."""
        return self._pusher.push_once(progress or self.progress, due_only=due_only)

    def pull_once(self, *, due_only: bool = False) -> PullReport:
        """Fetch every home-server queue's messages; never raises for network problems."""
        return self._puller.pull_once(due_only=due_only)

    def sync_once(self, *, due_only: bool = False) -> tuple[PushReport, PullReport | None]:
        """Push, then pull (unless the push ``stopped``), then run pulled admin requests and push
        their replies: one round, as ``edgeq sync --once`` and each daemon cycle do."""
        pushed = self.push_once(due_only=due_only)
        if pushed.stopped or not self.pull_enabled:
            return pushed, None
        self.admin.prepare()
        pulled = self.pull_once(due_only=due_only)
        if self.admin.process():
            # Replies go back now, whatever backoff a queue is in: the operator is waiting.
            pushed = merged(pushed, self.push_once())
        return pushed, pulled

    # -- status ------------------------------------------------------------------------

    def status(self) -> SyncStatus:
        """What ``edgeq sync status`` shows, with what this agent has not written to the store yet."""
        queues, agent = self._link.health.snapshot()
        return sync_status(self.qm, queues, agent)

    def metrics(self) -> str:
        """:meth:`status` in Prometheus' text format (``edgeq_agent_queue_*{queue,direction}``)."""
        return render_metrics(self.status())

    # -- daemon ------------------------------------------------------------------------

    def start(self, interval_s: float = 5.0) -> None:
        """Run :meth:`sync_once` in the background every ``interval_s``, at once after a put while
        online, with backoff after a failure."""
        self._daemon.start(interval_s, bridges=self.bridges_enabled)

    def run(self, interval_s: float = 5.0) -> None:
        self._daemon.run(interval_s, bridges=self.bridges_enabled)

    def request_stop(self, reason: str = "stopped") -> None:
        """Ask :meth:`run` to return (safe from a signal handler); ``reason`` is logged and kept."""
        self._daemon.request_stop(reason)

    def stop(self) -> None:
        """Stop the background cycle, waiting for one in progress."""
        self._daemon.stop()

    def _cycle(self) -> bool:
        """One daemon cycle: whether the server could be reached."""
        pushed, pulled = self.sync_once(due_only=True)
        return not pushed.stopped and (pulled is None or not pulled.stopped)

    def _daemon_state(self, state: DaemonState, reason: str | None) -> None:
        """Keep the daemon's pid, start, last cycle and exit where ``edgeq sync status`` reads them."""
        now, health = self._link.clock(), self._link.health
        if state == "start":
            health.agent(pid=os.getpid(), started_ms=now, last_cycle_ms=None, exited_ms=None,
                         exit_reason=None)
        elif state == "cycle":
            health.agent(last_cycle_ms=now)
        else:
            health.agent(exited_ms=now, exit_reason=reason)
        health.flush(force=state != "cycle")

    def _backing_off(self, delay_s: float) -> None:
        """Keep when the daemon retries after a failed cycle, for the status."""
        self._link.health.agent(next_retry_ms=self._link.clock() + round(delay_s * 1000))
        self._link.health.flush()

"""The device side: push remote queues to the home server, pull home-server queues from it.

    agent = SyncAgent(qm, "http://home:8470")
    report = agent.push_once()   # put + confirm batches until the transmission store is empty
    pushed, pulled = agent.sync_once()  # push, then pull (what `edgeq sync --once` does)
    agent.run(interval_s=5)      # or a daemon: APScheduler ticks, backoff, wake on put
    agent.status()               # per queue: backlog, oldest age, last success/error, refusals

Each batch is MQe's two-stage transmission: **put** (the server stores it
locked), **confirm** (it becomes visible), then the local copies are deleted in
one local transaction (``qm.exchange.transmitted``). Every step is safe to repeat; the
crash-point reasoning is in ``docs/protocol.md``.

Expiry crosses the wire as remaining milliseconds. The agent times every exchange
on a monotonic clock to bound the server's clock
(:class:`~edgeq.sync.clockbounds.ServerClockBounds`, :attr:`SyncAgent.server_clock`):
a put carries the lower bound at the instant its batch was read (``server_ms``),
and pulled lifetimes are shortened by the most time the upper bound allows since
the server read them, so no deadline ever comes out later on the other side, and
neither wall clock (nor a step of one) matters.

:class:`SyncAgent` is a facade: it builds its parts once and delegates to them. The
:class:`~edgeq.sync.link.ServerLink` (requests, hello, the bounds on the server's
clock), the :class:`~edgeq.sync.push.Pusher`, the :class:`~edgeq.sync.pull.Puller`,
the :class:`~edgeq.sync.expiries.ExpiryReporter` (after each push) and the
:class:`~edgeq.sync.daemon.Daemon` (the background loop); how each queue is doing is the
link's :class:`~edgeq.sync.health.Health`, shown by :mod:`edgeq.sync.status`.

Queues and directions fail independently: a queue the server refuses or does not have
waits on its own backoff while the others, and the pull, go on; only a server that
cannot be reached (or refuses the device) makes the daemon back off as a whole.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

import httpx

from edgeq.clock import system_clock
from edgeq.errors import EdgeqError
from edgeq.manager import QueueManager
from edgeq.sync.adminagent import AdminRelay, merged
from edgeq.sync.clockbounds import ServerClockBounds
from edgeq.sync.daemon import Daemon, DaemonState
from edgeq.sync.expiries import ExpiryReporter
from edgeq.sync.link import ServerLink
from edgeq.sync.pull import Puller
from edgeq.sync.push import Pusher
from edgeq.sync.reports import HelloInfo, Progress, PullReport, PushReport, QueueReport
from edgeq.sync.status import SyncStatus, render_metrics, sync_status
from edgeq.sync.transport import SyncError, Transport
from edgeq.types import Clock

__all__ = ["HelloInfo", "Progress", "PullReport", "PushReport", "QueueReport", "SyncAgent", "SyncError"]

log = logging.getLogger("edgeq.sync.agent")


class SyncAgent:
    """Synchronise one device queue manager with its home server.

    ``client``: an ``httpx.Client`` to use (else one is made, with keep-alive);
    ``clock``: the device clock in epoch ms (the queue manager's, normally);
    ``monotonic``: a clock in seconds that no wall-clock step moves (``time.monotonic``;
    tests inject one), on which the agent times its exchanges to bound the server's
    clock (:class:`~edgeq.sync.clockbounds.ServerClockBounds`) and rebase expiries;
    ``auth``: an ``httpx.Auth`` to sign requests (:class:`~edgeq.sync.signer.DeviceSigner`);
    ``ca_file``: the CA to verify an ``https://`` server with (None: the system
    store); plain ``http://`` to a non-loopback host is refused unless
    ``allow_insecure_http`` (:class:`~edgeq.sync.tls.InsecureTransport`). The agent registers itself as
    ``qm``'s transmitter, so ``put`` on a ``mode="sync"`` remote queue pushes at
    once. Thread-safe: pushes and pulls are serialised. ``admin``: whether the device
    takes part in remote administration (:class:`~edgeq.sync.adminagent.AdminRelay`): True,
    False, or None (the default) once it trusts an operator key (``edgeq keys trust-admin``).
    """

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
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, not {batch_size!r}")
        self.qm = qm
        self.transport = Transport(server_url, client=client, timeout=timeout, auth=auth, ca_file=ca_file,
                                   allow_insecure_http=allow_insecure_http)
        self._link = ServerLink(qm, self.transport, clock=clock or system_clock, monotonic=monotonic,
                                batch_size=batch_size)
        #: bounds on the server's clock from this agent's exchanges (reset by each hello)
        self.server_clock: ServerClockBounds = self._link.server_clock
        # A failing queue waits as the daemon does after a failure, on its own schedule.
        self._link.health.backoff_base_s, self._link.health.backoff_max_s = backoff_base_s, backoff_max_s
        self._pusher = Pusher(self._link, ExpiryReporter(self._link))
        self._puller = Puller(self._link)
        #: the device's part in remote administration (its ``enabled`` is the ``admin`` option)
        self.admin = AdminRelay(self._link, admin)
        self._daemon = Daemon(qm, self._cycle, online=lambda: self._link.online, backoff_base_s=backoff_base_s,
                              backoff_max_s=backoff_max_s, server_url=self.transport.server_url,
                              on_backoff=self._backing_off, on_state=self._daemon_state)
        #: whether the daemon's cycles also pull home-server queues
        self.pull_enabled = True
        self.progress: Callable[[Progress], None] | None = None
        qm.exchange.set_transmitter(self._pusher.transmit)

    # -- lifecycle ---------------------------------------------------------------------

    def close(self) -> None:
        """Stop the daemon (if running), write what the status has not been told yet (times the
        store is spared between writes), unregister the transmitter, close the HTTP client."""
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
        """What the last :meth:`push_once` did (None before the first)."""
        return self._pusher.last

    @property
    def last_pull(self) -> PullReport | None:
        """What the last :meth:`pull_once` did (None before the first)."""
        return self._puller.last

    # -- exchanges ---------------------------------------------------------------------

    def hello(self) -> HelloInfo:
        """Handshake: learn the server's name and limits, and let it record this device's clock offset.

        It also restarts the bounds on the server's clock (:attr:`server_clock`) from
        this exchange."""
        return self._link.hello()

    def push_once(self, *, progress: Callable[[Progress], None] | None = None, due_only: bool = False) -> PushReport:
        """Transmit every remote queue addressed to this server until none is left,
        or until a failure (``report.error``); never raises for network problems.
        ``report.queues`` says how each queue went; ``report.complete`` whether all went.
        With ``due_only`` a queue still in its own backoff after a failure is skipped."""
        return self._pusher.push_once(progress or self.progress, due_only=due_only)

    def pull_once(self, *, due_only: bool = False) -> PullReport:
        """Fetch every home-server queue's messages from the server (assured get, then
        a local assured put, then a confirm to the server). Never raises for network problems."""
        return self._puller.pull_once(due_only=due_only)

    def sync_once(self, *, due_only: bool = False) -> tuple[PushReport, PullReport | None]:
        """Push, then pull (if :attr:`pull_enabled`): one round, as ``edgeq sync --once`` and
        each daemon cycle do. A queue that fails does not stop the others nor the pull; the
        pull is not tried only when the push could not reach the server (``pushed.stopped``).
        Admin requests pulled are executed next (:attr:`admin`), and their replies pushed
        in the same round (the two pushes make one report).

        For example (``edgeq sync --once`` exits 1 unless this holds)::

            pushed, pulled = agent.sync_once()
            everything_moved = pushed.complete and (pulled is None or pulled.complete)
        """
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
        """Per remote and home-server queue: backlog, oldest message's age, last success,
        last error with its code, refused messages, next retry (what ``edgeq sync status``
        shows, with what this agent has not written to the store yet)."""
        queues, agent = self._link.health.snapshot()
        return sync_status(self.qm, queues, agent)

    def metrics(self) -> str:
        """:meth:`status` in Prometheus' text format (``edgeq_agent_queue_*{queue,direction}``)."""
        return render_metrics(self.status())

    # -- daemon ------------------------------------------------------------------------

    def start(self, interval_s: float = 5.0) -> None:
        """Run in the background: a cycle (push, then pull) every ``interval_s`` seconds
        (APScheduler), at once after a put while online, and with exponential backoff
        plus jitter after a failure. :meth:`stop` ends it."""
        self._daemon.start(interval_s)

    def run(self, interval_s: float = 5.0) -> None:
        """:meth:`start`, then block until :meth:`stop` (or Ctrl-C)."""
        self._daemon.run(interval_s)

    def request_stop(self, reason: str = "stopped") -> None:
        """Ask :meth:`run` to return (safe from a signal handler); it stops the agent and logs
        its exit with ``reason`` (a signal's name, say), kept for ``edgeq sync status``."""
        self._daemon.request_stop(reason)

    def stop(self) -> None:
        """Stop the background cycle, waiting for one in progress. No-op if not running."""
        self._daemon.stop()

    def _cycle(self) -> bool:
        """One daemon cycle (:meth:`sync_once`, queues in their own backoff skipped): whether
        the server could be reached. A queue that failed alone waits on its own backoff."""
        pushed, pulled = self.sync_once(due_only=True)
        return not pushed.stopped and (pulled is None or not pulled.stopped)

    def _daemon_state(self, state: DaemonState, reason: str | None) -> None:
        """Keep the daemon's own record where ``edgeq sync status`` reads it: its pid and start,
        its last cycle (timestamps alone written at most every minute), its exit and why."""
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
        """The daemon waits ``delay_s`` after a failed cycle: keep when it retries, for the status."""
        self._link.health.agent(next_retry_ms=self._link.clock() + round(delay_s * 1000))
        self._link.health.flush()

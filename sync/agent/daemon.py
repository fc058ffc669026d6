"""The agent's background loop (one thread): docs/protocol.md, "The agent". While it runs it
holds the store's agent lock, so another process can tell that it runs."""

from __future__ import annotations

import logging
import os
import random
import threading
from collections.abc import Callable
from typing import Literal, TypeAlias

from edgeq.args import check_seconds
from edgeq.errors import EdgeqError
from edgeq.manager import QueueManager
from edgeq.rules import QueueRule
from edgeq.rules.base import RuleEvent
from edgeq.sync.agent.lock import AgentLock
from edgeq.sync.bridges.runner import BridgeThread, start_bridges

__all__ = ["Daemon", "DaemonState"]

log = logging.getLogger("edgeq.sync.agent")

#: What the daemon reports to ``on_state``: it started, finished a cycle, or stopped.
DaemonState: TypeAlias = Literal["start", "cycle", "stop"]


class _WakeRule(QueueRule):
    """Wakes the daemon when a message is put on a remote queue."""

    def __init__(self, daemon: Daemon) -> None:
        self._daemon = daemon

    def on_added(self, event: RuleEvent) -> None:
        self._daemon.wake_on_put()


class Daemon:
    """Run ``cycle`` (False: the server could not be reached) in a background thread; a put wakes
    it at once only while ``online()``."""

    def __init__(
        self, qm: QueueManager, cycle: Callable[[], bool], *, online: Callable[[], bool],
        backoff_base_s: float, backoff_max_s: float, server_url: str,
        on_backoff: Callable[[float], None] | None = None,
        on_state: Callable[[DaemonState, str | None], None] | None = None,
    ) -> None:
        self.qm = qm
        self._cycle = cycle
        self._online = online
        self._backoff = (backoff_base_s, backoff_max_s)
        self._server_url = server_url
        self._on_backoff = on_backoff
        self._on_state = on_state
        self._lock = AgentLock(qm.path)
        self._reason = "stopped"  #: why it stops: a signal's name, or "stopped" (stop() called)
        self._cycles = 0
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._interval_s = 5.0
        self._worker: threading.Thread | None = None
        self._rules: list[tuple[str, _WakeRule]] = []
        self._bridges: BridgeThread | None = None

    def wake_on_put(self) -> None:
        """Run a cycle now, if the server is reachable."""
        if self._online():
            self._wake.set()

    def start(self, interval_s: float = 5.0, *, bridges: bool = False) -> None:
        """Start the loop: a cycle at once, then ``interval_s`` seconds after the last one; with
        ``bridges``, the store's bridges too (docs/bridges.md), stopped with it."""
        check_seconds(interval_s, "interval_s")
        if self._worker is not None:
            raise RuntimeError("the sync agent is already running")
        self._take_lock()
        self._reason, self._cycles = "stopped", 0
        self._tell("start")
        self._stop.clear()
        self._wake.clear()  # a stop() while stopped leaves it set: no cycle but the start's own
        for attrs in self.qm.remote_queues():
            rule = _WakeRule(self)
            self.qm.add_rule(attrs.name, rule)
            self._rules.append((attrs.name, rule))
        self._interval_s = interval_s
        self._worker = threading.Thread(target=self._loop, name="edgeq-sync-agent", daemon=True)
        self._worker.start()
        if bridges:
            try:
                self._bridges = start_bridges(self.qm)
            except EdgeqError as exc:  # a damaged definition: the agent syncs all the same
                log.error("the bridges cannot run: %s", exc, extra={"event": "bridges-error"})
        log.info("agent started", extra={"event": "start", "server": self._server_url,
                                         "interval_s": interval_s, "pid": os.getpid()})

    def run(self, interval_s: float = 5.0, *, bridges: bool = False) -> None:
        """:meth:`start`, then block until :meth:`stop` (or Ctrl-C)."""
        self.start(interval_s, bridges=bridges)
        try:
            self._stop.wait()
        except KeyboardInterrupt:
            self._reason = "SIGINT"
            raise
        finally:
            self.stop()

    def request_stop(self, reason: str = "stopped") -> None:
        """Ask :meth:`run` to return (safe from a signal handler); ``reason`` is logged and kept."""
        self._reason = reason
        self._stop.set()
        self._wake.set()

    def stop(self) -> None:
        """Stop the loop, waiting for a cycle in progress, and let the agent lock go."""
        running = self._worker is not None
        self._stop.set()
        self._wake.set()
        worker, self._worker = self._worker, None
        if worker is not None and worker is not threading.current_thread():
            worker.join()
        bridges, self._bridges = self._bridges, None
        if bridges is not None:
            bridges.stop()
        for queue, rule in self._rules:
            self.qm.remove_rule(queue, rule)
        self._rules.clear()
        if running:
            self._tell("stop", self._reason)
            log.info("agent stopped (%s) after %d cycle(s)", self._reason, self._cycles,
                     extra={"event": "stop", "reason": self._reason, "pid": os.getpid(),
                            "cycles": self._cycles, "server": self._server_url})
        self._lock.release()

    def _take_lock(self) -> None:
        """Hold the agent lock while running; without it the loop runs all the same (logged)."""
        path = str(self._lock.path)
        try:
            taken = self._lock.acquire()
        except OSError as exc:
            log.warning("cannot take the agent lock %s (%s): `edgeq sync status` cannot tell that this agent "
                        "runs", path, exc, extra={"event": "agent-lock", "path": path})
            return
        if not taken:
            log.warning("another sync agent holds %s: two agents run on this store, and `edgeq sync status` "
                        "shows only one of them", path, extra={"event": "agent-lock", "path": path})

    def _tell(self, state: DaemonState, reason: str | None = None) -> None:
        if self._on_state is None:
            return
        try:
            self._on_state(state, reason)
        except Exception:
            log.exception("could not record the agent's %s", state, extra={"event": "cycle-error"})

    def _loop(self) -> None:
        failures = 0
        while not self._stop.is_set():
            ok = self._run_cycle()
            self._cycles += 1
            self._tell("cycle")
            if ok:
                failures = 0
                self._wake.wait(self._interval_s)  # a put (or a stop) wakes it early
                self._wake.clear()
            else:
                failures += 1
                base, most = self._backoff
                delay = min(most, base * 2 ** min(failures - 1, 30))
                delay = random.uniform(delay / 2, delay)  # jitter: devices do not retry in step
                log.info("retry in %.1fs", delay, extra={"event": "backoff", "failures": failures,
                                                          "delay_s": round(delay, 3)})
                if self._on_backoff is not None:
                    try:
                        self._on_backoff(delay)
                    except Exception:  # the record of a retry must never stop the retries
                        log.exception("could not record the backoff", extra={"event": "cycle-error"})
                self._stop.wait(delay)

    def _run_cycle(self) -> bool:
        try:
            return self._cycle()
        except Exception:
            log.exception("sync cycle failed", extra={"event": "cycle-error"})
            return False

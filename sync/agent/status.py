"""The sync status of a device per queue, read from its store (so ``edgeq sync status`` in another
process shows what the running agent knows), and as Prometheus metrics (docs/protocol.md, 'Sync status')."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from edgeq.errors import EdgeqError
from edgeq.exchange.restored import Restoration
from edgeq.exchange.transmit import SyncQueue
from edgeq.manager import QueueManager
from edgeq.sync.agent.health import Direction, QueueHealth
from edgeq.sync.agent.lock import running_daemon
from edgeq.sync.bridges.views import BridgeView, bridge_views
from edgeq.sync.protocol import device_queue_name

__all__ = ["AgentProcess", "QueueStatus", "SyncStatus", "render_metrics", "sync_status"]


@dataclass(frozen=True, slots=True)
class AgentProcess:
    """The store's sync agent daemon, as its lock and record tell: running now, or the last one."""

    #: a daemon holds the store's agent lock now (a reused pid cannot pass for it)
    running: bool = False
    pid: int | None = None  #: the running daemon's pid, else the last one's
    started_ms: int | None = None  #: when it started (device clock)
    #: when its last cycle ended (written at once the first time, then at most every minute)
    last_cycle_ms: int | None = None
    exited_ms: int | None = None  #: when the last one stopped (None: it runs, or it was killed)
    exit_reason: str | None = None  #: why it stopped: a signal's name (SIGTERM, SIGINT), or ``stopped``


@dataclass(frozen=True, slots=True)
class QueueStatus:
    """One queue's sync, as ``edgeq sync status`` shows it (times in epoch ms, device clock)."""

    queue: str
    direction: str  #: ``"push"`` (a remote queue) or ``"pull"`` (a home-server queue)
    target: str  #: where it goes (push) or comes from (pull): ``SERVER/QUEUE``
    #: messages waiting here to be pushed (None for a pull: they wait on the server)
    backlog: int | None
    oldest_age_ms: int | None  #: how long the longest-waiting of them has waited
    last_success_ms: int | None  #: the last round that moved everything offered
    last_error: str | None  #: the last error, with what to do about it
    #: ``no-queue``, ``forbidden``, ``queue-full``, ``too-large``, ``unreachable``, ...
    last_error_code: str | None
    last_error_ms: int | None
    refused: int  #: messages held here that the server refused (each is offered again)
    refusals: int  #: how often they were refused, all together
    refusal_limit: int | None  #: refusals before a message moves to the dead-letter queue (push only)
    dead_lettered: int  #: messages moved to the dead-letter queue at their refusal limit, in all
    next_retry_ms: int | None  #: the queue waits for its own backoff until then (None: every round)
    failing: bool  #: its last error is newer than its last success, or it holds refused messages

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class SyncStatus:
    """The agent's state and every queue's :class:`QueueStatus`, as of ``now_ms``."""

    now_ms: int
    server: str | None  #: the home server the agent last spoke to (None: it never has)
    stopped: bool  #: the agent's last round could not reach the server (or was refused as a device)
    error: str | None  #: why, if so
    error_code: str | None
    next_retry_ms: int | None  #: when the agent tries again after such a failure
    queues: list[QueueStatus]
    dead_letter_queue: str = ""  #: the store's dead-letter queue
    dead_letter_depth: int = 0  #: the messages it holds, waiting for an operator (``edgeq dlq``)
    #: when the store was last found restored from an older copy, and what was done (None: never)
    restored: Restoration | None = None
    #: whether a daemon runs, its pid and last cycle; with none running nothing is retried,
    #: so no ``next_retry_ms`` is given (unless the status is a live agent's own)
    agent: AgentProcess = AgentProcess()
    #: the store's bridges (docs/bridges.md): running, connected, last forward, backlog, errors
    bridges: list[BridgeView] = field(default_factory=list)

    @property
    def failing(self) -> bool:
        """Whether anything needs attention: the agent stopped, a queue fails, messages wait in the
        dead-letter queue, or a running bridge is not connected."""
        return (self.stopped or self.dead_letter_depth > 0 or any(q.failing for q in self.queues)
                or any(b.running and not b.connected for b in self.bridges))

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "bridges": [b.as_dict() for b in self.bridges], "failing": self.failing}


def sync_status(
    qm: QueueManager, live: Mapping[str, QueueHealth] | None = None,
    agent: Mapping[str, Any] | None = None,
) -> SyncStatus:
    """The sync status of ``qm``'s store as of its clock; ``live`` and ``agent``: a live agent's
    newer states. With neither and no daemon running nothing will retry: no next retry is given."""
    overview = qm.sync_overview()
    now = qm.now_ms()
    record = {**overview.agent, **(agent or {})}
    process = _process(qm, record)
    queues = [_queue(q, now, (live or {}).get(q.name), qm.name) for q in overview.queues]
    retrying = process.running or live is not None
    if not retrying:
        queues = [replace(q, next_retry_ms=None) for q in queues]
    return SyncStatus(
        now, record.get("server"), bool(record.get("stopped")), record.get("last_error"),
        record.get("last_error_code"),
        record.get("next_retry_ms") if record.get("stopped") and retrying else None, queues,
        overview.dead_letter_queue, overview.dead_letter_depth,
        restored=qm.exchange.restoration(), agent=process,
        bridges=bridge_views(qm.path, {u.name: u.depth for u in qm.store_usage().queues}),
    )


def _process(qm: QueueManager, record: Mapping[str, Any]) -> AgentProcess:
    """The daemon as its lock (running or not, the holder's pid) and its record tell."""
    running, pid = running_daemon(qm.path)
    return AgentProcess(
        running, pid if pid is not None else record.get("pid"), record.get("started_ms"),
        record.get("last_cycle_ms"), None if running else record.get("exited_ms"),
        None if running else record.get("exit_reason"),
    )


def _queue(q: SyncQueue, now: int, live: QueueHealth | None, device: str) -> QueueStatus:
    direction: Direction = "push" if q.kind == "remote" else "pull"
    h = (live if live is not None and live.direction == direction
         else QueueHealth.from_state(direction, q.state))
    if q.kind == "remote":
        target = f"{q.peer}/{q.target_queue}"
    else:
        try:
            target = f"{q.peer}/{device_queue_name(device, q.name)}"
        except EdgeqError:
            target = f"{q.peer}/?"
    oldest = None if q.oldest_arrived_ms is None else max(0, now - q.oldest_arrived_ms)
    return QueueStatus(
        q.name, direction, target, q.depth if q.kind == "remote" else None, oldest, h.last_success_ms,
        h.last_error, h.last_error_code, h.last_error_ms, q.refused_messages, q.refusals, q.refusal_limit,
        h.dead_lettered, h.next_retry_ms, h.failing or q.refused_messages > 0,
    )


# -- metrics -----------------------------------------------------------------------------------

_GAUGES: tuple[tuple[str, str, str], ...] = (
    ("backlog_messages", "gauge", "Messages waiting on the device to be pushed."),
    ("oldest_message_age_seconds", "gauge", "How long the longest-waiting of them has waited."),
    ("last_success_timestamp_seconds", "gauge",
     "The last round that moved everything offered (device clock)."),
    ("last_error_timestamp_seconds", "gauge", "The queue's last error (device clock); label code."),
    ("refused_messages", "gauge", "Messages held on the device that the server refused."),
    ("refusals", "gauge", "How often those messages were refused, all together."),
    ("dead_lettered_total", "counter", "Messages moved to the dead-letter queue at their refusal limit."),
    ("next_retry_timestamp_seconds", "gauge", "When a failing queue is tried again (device clock)."),
    ("failing", "gauge",
     "1 while the queue fails (last error newer than last success, or refused messages held)."),
)


def render_metrics(status: SyncStatus) -> str:
    """The status in Prometheus' text format (0.0.4); a figure without a value is left out."""
    lines: list[str] = []
    for name, kind, text in _GAUGES:
        metric = f"edgeq_agent_queue_{name}"
        lines += [f"# HELP {metric} {text}", f"# TYPE {metric} {kind}"]
        for q in status.queues:
            labels = f'queue="{q.queue}",direction="{q.direction}"'
            for extra, value in _values(name, q):
                lines.append(f"{metric}{{{labels}{extra}}} {value}")
    lines += ["# HELP edgeq_agent_stopped 1 while the agent cannot reach its server "
              "(or is refused as a device).",
              "# TYPE edgeq_agent_stopped gauge", f"edgeq_agent_stopped {int(status.stopped)}",
              "# HELP edgeq_agent_running 1 while a sync agent daemon runs on this store "
              "(holds its agent lock).",
              "# TYPE edgeq_agent_running gauge", f"edgeq_agent_running {int(status.agent.running)}",
              "# HELP edgeq_agent_dead_letter_messages Messages waiting in the store's dead-letter queue.",
              "# TYPE edgeq_agent_dead_letter_messages gauge",
              f'edgeq_agent_dead_letter_messages{{queue="{_label(status.dead_letter_queue)}"}} '
              f"{status.dead_letter_depth}"]
    return "\n".join(lines) + "\n"


def _values(name: str, q: QueueStatus) -> Iterator[tuple[str, str]]:
    """(extra labels, value) of one figure of one queue; nothing if it has no value."""
    if name == "failing":
        yield f',code="{_label(q.last_error_code) if q.failing else ""}"', str(int(q.failing))
        return
    if name == "last_error_timestamp_seconds":
        if q.last_error_ms is not None:
            yield f',code="{_label(q.last_error_code)}"', _seconds(q.last_error_ms)
        return
    value: int | None = {
        "backlog_messages": q.backlog, "refused_messages": q.refused, "refusals": q.refusals,
        "dead_lettered_total": q.dead_lettered,
    }.get(name)
    if name in ("backlog_messages", "refused_messages", "refusals", "dead_lettered_total"):
        if value is not None:
            yield "", str(value)
        return
    ms = {"oldest_message_age_seconds": q.oldest_age_ms,
          "last_success_timestamp_seconds": q.last_success_ms,
          "next_retry_timestamp_seconds": q.next_retry_ms}[name]
    if ms is not None:
        yield "", _seconds(ms)


def _seconds(ms: int) -> str:
    return str(ms / 1000)


def _label(value: str | None) -> str:
    return (value or "").replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

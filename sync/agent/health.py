"""How each queue's sync is going, as the agent sees it, kept in the device's store for ``edgeq sync
status`` (docs/protocol.md, 'Sync status'); the hints it shows are :mod:`edgeq.sync.refusals`."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from edgeq.manager import QueueManager
from edgeq.types import Clock

__all__ = ["QUEUE_CODES", "REFRESH_MS", "Direction", "Health", "QueueHealth"]

Direction = Literal["push", "pull"]
#: Refusals of a whole request that concern its queue, not the device: that queue fails
#: alone (any other refusal, e.g. ``unauthorized``, and an unreachable server stop a push or pull).
QUEUE_CODES = frozenset({"forbidden", "invalid", "too-large", "not-found"})
#: At most this long (ms) between two writes of a state whose only change is its timestamps.
REFRESH_MS = 60_000
_TIMESTAMPS = ("last_attempt_ms", "last_success_ms", "last_cycle_ms", "updated_ms")
@dataclass(slots=True)
class QueueHealth:
    """What the agent knows of one queue's sync (times are device epoch ms)."""

    direction: Direction
    last_attempt_ms: int | None = None
    last_success_ms: int | None = None  #: the last attempt that moved everything it was offered
    last_error: str | None = None  #: what went wrong last time (kept after a later success)
    last_error_code: str | None = None
    last_error_ms: int | None = None
    failures: int = 0  #: attempts in a row that moved nothing and failed
    next_retry_ms: int | None = None  #: the queue waits for its backoff until then (None: every round)
    dead_lettered: int = 0  #: messages moved to the dead-letter queue at their refusal limit, in all
    retry_at: float | None = field(default=None, compare=False)  #: monotonic seconds (this process only)

    def state(self) -> dict[str, Any]:
        out = asdict(self)
        del out["retry_at"]
        return out

    @classmethod
    def from_state(cls, direction: Direction, state: dict[str, Any]) -> QueueHealth:
        """From a stored state (unknown keys ignored; a bad one starts afresh)."""
        known = {k: v for k, v in state.items()
                 if k in cls.__dataclass_fields__ and k not in ("direction", "retry_at")}
        try:
            return cls(direction, **known)
        except TypeError:
            return cls(direction)

    @property
    def failing(self) -> bool:
        """Whether its last error is newer than its last success."""
        return self.last_error_ms is not None and (
            self.last_success_ms is None or self.last_error_ms > self.last_success_ms)


class Health:
    """Every queue's :class:`QueueHealth` for one agent over ``qm``: a failing queue waits
    ``backoff_base_s`` doubled per failure in a row, at most ``backoff_max_s``. Thread-safe."""

    def __init__(self, qm: QueueManager, *, clock: Clock, monotonic: Callable[[], float],
                 backoff_base_s: float = 1.0, backoff_max_s: float = 300.0) -> None:
        self.qm = qm
        self.clock = clock
        self.monotonic = monotonic
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self._queues: dict[str, QueueHealth] | None = None  # loaded from the store when first needed
        self._agent: dict[str, Any] = {}
        self._written: dict[str, tuple[dict[str, Any], int]] = {}  # name -> (state written, when)
        self._lock = threading.Lock()

    def _load(self) -> dict[str, QueueHealth]:
        if self._queues is None:
            overview = self.qm.sync_overview()
            self._agent = dict(overview.agent)
            self._queues = {}
            for q in overview.queues:
                direction: Direction = "push" if q.kind == "remote" else "pull"
                self._queues[q.name] = QueueHealth.from_state(direction, q.state)
                self._written[q.name] = (q.state, self.clock())
        return self._queues

    def _of(self, queue: str, direction: Direction) -> QueueHealth:
        queues = self._load()
        found = queues.get(queue)
        if found is None or found.direction != direction:
            found = queues[queue] = QueueHealth(direction)
        return found

    def due(self, queue: str, direction: Direction) -> bool:
        """Whether the queue's backoff (if any) has run out."""
        with self._lock:
            retry_at = self._of(queue, direction).retry_at
            return retry_at is None or self.monotonic() >= retry_at

    def succeeded(self, queue: str, direction: Direction) -> None:
        """An attempt moved everything it was offered (or had nothing to do)."""
        now = self.clock()
        with self._lock:
            h = self._of(queue, direction)
            h.last_attempt_ms = h.last_success_ms = now
            h.failures, h.retry_at, h.next_retry_ms = 0, None, None

    def failed(self, queue: str, direction: Direction, code: str, error: str, *, moved: bool = False) -> None:
        """An attempt failed with ``code``: retried next round if it ``moved`` some, else on backoff."""
        now, mono = self.clock(), self.monotonic()
        with self._lock:
            h = self._of(queue, direction)
            h.last_attempt_ms = h.last_error_ms = now
            h.last_error, h.last_error_code = error, code
            if moved:
                h.failures, h.retry_at, h.next_retry_ms = 0, None, None
                return
            h.failures += 1
            delay = min(self.backoff_max_s, self.backoff_base_s * 2 ** min(h.failures - 1, 30))
            h.retry_at = mono + delay
            h.next_retry_ms = now + round(delay * 1000)

    def moved_to_dlq(self, queue: str, count: int) -> None:
        """``count`` messages of the remote queue moved to the dead-letter queue at their limit."""
        with self._lock:
            self._of(queue, "push").dead_lettered += count

    def agent(self, **fields: Any) -> None:
        """Update the agent's own record (``server``, ``last_error``, ``next_retry_ms``, ...)."""
        with self._lock:
            self._load()
            self._agent.update(fields)
            self._agent["updated_ms"] = self.clock()

    def snapshot(self) -> tuple[dict[str, QueueHealth], dict[str, Any]]:
        """Copies of every queue's record and of the agent's, as they are now."""
        with self._lock:
            queues = self._load()
            return ({name: QueueHealth(**{**h.state(), "retry_at": h.retry_at})
                     for name, h in queues.items()},
                    dict(self._agent))

    def flush(self, *, force: bool = False) -> None:
        """Write the states that changed (one transaction); timestamps alone every :data:`REFRESH_MS`."""
        now = self.clock()
        with self._lock:
            if force and self._queues is None:
                return  # nothing learnt yet: nothing to write
            queues = self._load()
            changed: dict[str, dict[str, Any]] = {}
            for name, h in queues.items():
                state = h.state()
                before, when = self._written.get(name, ({}, 0))
                if _significant(state) != _significant(before) or (
                        state != before and (force or now - when >= REFRESH_MS)):
                    changed[name] = state
            agent_before, agent_when = self._written.get("", ({}, 0))
            if _significant(self._agent) != _significant(agent_before) or (
                    self._agent != agent_before and (force or now - agent_when >= REFRESH_MS)):
                changed[""] = dict(self._agent)
            if not changed:
                return
            self.qm.exchange.record_sync_state(changed)
            for name, written in changed.items():
                self._written[name] = (written, now)


def _significant(state: dict[str, Any]) -> dict[str, Any]:
    """What a change of must be written at once: all but the timestamps' values (set or not counts)."""
    return {k: v is None if k in _TIMESTAMPS else v for k, v in state.items()}

"""What the sync agent reports: the hello's answer, push and pull summaries, progress."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["HelloInfo", "Progress", "PullReport", "PushReport", "QueueReport"]


@dataclass(frozen=True, slots=True)
class HelloInfo:
    """The server's answer to a hello."""

    server: str
    #: device clock minus server clock (ms), as this device measured it
    offset_ms: int
    #: server clock minus device clock (ms), as the server recorded it
    server_offset_ms: int
    rtt_ms: int
    max_body_bytes: int
    max_batch: int


@dataclass(slots=True)
class QueueReport:
    """What one push or pull did with one queue."""

    queue: str
    direction: str  #: ``"push"`` (a remote queue) or ``"pull"`` (a home-server queue)
    moved: int = 0  #: transmitted (push) or received (pull)
    refused: int = 0  #: refused by the server (push) or by the local queue (pull): kept where they were
    dead_lettered: int = 0  #: refused ``refusal_limit`` times: moved to the dead-letter queue
    dlq_kept: int = 0  #: refused ``refusal_limit`` times, the dead-letter queue could not take them: kept
    error: str | None = None  #: what went wrong, and what to do about it
    #: ``no-queue``, ``forbidden``, ``queue-full``, ``too-large``, ``unreachable``, ...
    code: str | None = None

    @property
    def ok(self) -> bool:
        """Whether everything offered moved (no error, nothing refused)."""
        return self.error is None

    def as_dict(self) -> dict[str, object]:
        return {"direction": self.direction, "moved": self.moved, "refused": self.refused,
                "dead_lettered": self.dead_lettered, "dlq_kept": self.dlq_kept, "error": self.error,
                "code": self.code}


@dataclass(slots=True)
class PushReport:
    """What one :meth:`SyncAgent.push_once` did."""

    sent: int = 0  #: messages put (stage one), resends included
    transmitted: int = 0  #: confirmed by the server and deleted here
    duplicates: int = 0  #: the server already had them confirmed
    expired: int = 0  #: the server discarded them as expired (on arrival or while locked)
    refused: int = 0  #: the server refused them (queue full, too large, no such queue): kept here
    dead_lettered: int = 0  #: refused ``refusal_limit`` times: moved to the dead-letter queue
    dlq_kept: int = 0  #: refused ``refusal_limit`` times, the dead-letter queue could not take them: kept
    requeued: int = 0  #: the server did not know them at confirm: they will be put again
    batches: int = 0
    expiries_reported: int = 0  #: this device's journaled expiries sent to the server
    seconds: float = 0.0
    error: str | None = None  #: why the push stopped early, or which queues failed
    refusals: list[tuple[str, str]] = field(default_factory=list)  #: (uid, why), the first 100
    queues: dict[str, QueueReport] = field(default_factory=dict)  #: per remote queue tried
    stopped: bool = False  #: the server could not be reached (or refused this device): no queue was finished

    @property
    def ok(self) -> bool:
        """Whether the push ran to the end (no ``error``)."""
        return self.error is None

    @property
    def complete(self) -> bool:
        """Whether everything went: no error, nothing refused or dead-lettered."""
        return self.ok and not self.refused and not self.dead_lettered

    @property
    def rate(self) -> float:
        return self.transmitted / self.seconds if self.seconds > 0 else 0.0


@dataclass(slots=True)
class PullReport:
    """What one :meth:`SyncAgent.pull_once` did."""

    received: int = 0  #: new messages stored on home-server queues here
    duplicates: int = 0  #: already received before (acknowledged again)
    expired: int = 0  #: expired on arrival here (rules fired here)
    refused: int = 0  #: could not be stored here (queue full, too large): left on the server
    acknowledged: int = 0  #: deleted on the server after being stored here
    batches: int = 0
    error: str | None = None  #: why the pull stopped early, or which queues failed
    queues: dict[str, QueueReport] = field(default_factory=dict)  #: per home-server queue tried
    stopped: bool = False  #: the server could not be reached (or refused this device)

    @property
    def ok(self) -> bool:
        """Whether the pull ran to the end (no ``error``)."""
        return self.error is None

    @property
    def complete(self) -> bool:
        """Whether everything came: no error, nothing refused here."""
        return self.ok and not self.refused


@dataclass(frozen=True, slots=True)
class Progress:
    """Progress of a push, for a progress display."""

    queue: str
    done: int
    left: int | None
    rate: float

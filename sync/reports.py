"""What the sync agent reports: the hello's answer, push and pull summaries, progress."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["HelloInfo", "Progress", "PullReport", "PushReport"]


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
class PushReport:
    """What one :meth:`SyncAgent.push_once` did."""

    sent: int = 0  #: messages put (stage one), resends included
    transmitted: int = 0  #: confirmed by the server and deleted here
    duplicates: int = 0  #: the server already had them confirmed
    expired: int = 0  #: the server discarded them as expired (on arrival or while locked)
    refused: int = 0  #: the server refused them (queue full, too large, no such queue): kept here
    requeued: int = 0  #: the server did not know them at confirm: they will be put again
    batches: int = 0
    expiries_reported: int = 0  #: this device's journaled expiries sent to the server
    seconds: float = 0.0
    error: str | None = None  #: why the push stopped early (server unreachable, refused request)
    refusals: list[tuple[str, str]] = field(default_factory=list)  #: (uid, why), the first 100

    @property
    def ok(self) -> bool:
        """Whether the push ran to the end (no ``error``)."""
        return self.error is None

    @property
    def rate(self) -> float:
        """Messages transmitted per second."""
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
    error: str | None = None

    @property
    def ok(self) -> bool:
        """Whether the pull ran to the end (no ``error``)."""
        return self.error is None


@dataclass(frozen=True, slots=True)
class Progress:
    """Progress of a push, for a progress display."""

    queue: str
    done: int
    left: int | None
    rate: float

"""The knobs of a run: sizes, operation counts and time budgets, full and smoke presets."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

__all__ = ["FULL", "SMOKE", "Settings"]


@dataclass(frozen=True)
class Settings:
    """Everything a run needs to know; serialised into the JSON report as is."""

    #: Backlog sizes for get+confirm; the largest also serves depth, expiry and memory.
    sizes: tuple[int, ...] = (1_000, 40_000, 100_000, 1_000_000)
    #: Bytes of data per message (ASCII, so peers that take ``str`` store the same bytes).
    payload_bytes: int = 256
    #: Single durable puts per library.
    put_ops: int = 10_000
    #: get+confirm operations measured on top of each backlog.
    get_ops: int = 10_000
    #: Messages per batch put, and how many batches (the median batch is reported).
    batch_size: int = 10_000
    batch_repeats: int = 5
    #: Messages drained by ``drain_consumers`` processes sharing one file.
    drain_messages: int = 10_000
    drain_consumers: int = 4
    #: depth() / qsize() calls timed (the median is reported).
    depth_calls: int = 200
    #: Expired messages discarded in one sweep.
    expiry_messages: int = 1_000_000
    #: Fresh interpreters started per import-time measurement.
    import_repeats: int = 15
    #: Rounds of every measured case (each a fresh process per library, libraries
    #: interleaved within a round); the median round is reported.
    rounds: int = 3
    #: Wall-clock budget of one timed loop, in seconds: a loop stops early past it
    #: (and reports how many operations it did), so a slow peer cannot stall the run.
    budget_s: float = 30.0
    #: Seconds before a child process is killed and the case reported as an error.
    child_timeout_s: float = 900.0
    #: The backlog the "≥ 20x persist-queue" get+confirm target is judged at.
    target_backlog: int = 40_000
    #: Sync case: messages pushed device -> server (and published at QoS 2 for MQTT),
    #: the agent's batch size, and the MQTT clients' inflight window.
    sync_messages: int = 20_000
    sync_batch: int = 500
    mqtt_inflight: int = 1_000
    #: Install mosquitto from Debian packages (apt-get) when it is missing.
    install_mosquitto: bool = True
    smoke: bool = False
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def small(self) -> int:
        """The smallest backlog (the 1k side of the flatness and memory comparisons)."""
        return min(self.sizes)

    @property
    def large(self) -> int:
        """The largest backlog (the 1M side of flatness, depth and memory)."""
        return max(self.sizes)

    def replace(self, **changes: object) -> Settings:
        """A copy with some fields changed."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def to_json(self) -> dict[str, object]:
        """The settings as a JSON-ready dict."""
        return dataclasses.asdict(self)


FULL = Settings()

#: Tiny sizes for the test suite: the whole run takes well under 30 s.
SMOKE = Settings(
    sizes=(200, 1_000),
    put_ops=100,
    get_ops=100,
    batch_size=200,
    batch_repeats=2,
    drain_messages=200,
    drain_consumers=4,
    depth_calls=20,
    expiry_messages=1_000,
    import_repeats=2,
    rounds=1,
    budget_s=5.0,
    child_timeout_s=60.0,
    target_backlog=1_000,
    sync_messages=500,
    sync_batch=100,
    mqtt_inflight=100,
    smoke=True,
)

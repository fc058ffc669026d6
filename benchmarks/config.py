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
    #: Thread-scaling cases: the thread counts, and the operations of one measurement
    #: (shared out among its threads).
    thread_counts: tuple[int, ...] = (1, 2, 4, 8, 16)
    thread_ops: int = 8_000
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
    #: Runs of each command the command-line start case times (the median is reported).
    cli_repeats: int = 7
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
    #: Bytes on the wire: edgeq's batch sizes, and the readings each row sends (a quarter
    #: at batch 1; MQTT publishes this many).
    wire_batches: tuple[int, ...] = (1, 10, 100, 500)
    wire_messages: int = 5_000
    #: Many devices at once: the fleet sizes, each device's backlog and batch size, and
    #: the processes that drive the devices (each device a thread with its own store).
    fleet_devices: tuple[int, ...] = (10, 50, 200)
    fleet_messages: int = 500
    fleet_batch: int = 100
    fleet_processes: int = 2
    #: ``edgeq serve --workers``: each fleet size is run with each of these
    fleet_workers: tuple[int, ...] = (1,)
    #: Waiting gets: wake-ups timed per measurement, the pause before each put (between
    #: this and twice this, in ms), and how long the idle get waits (its CPU is measured).
    wakeups: int = 100
    wakeup_gap_ms: float = 50.0
    idle_s: float = 10.0
    #: ``put_threads_slowsync``: what the slowsync shim adds to every flush (µs), and the thread counts.
    slowsync_us: int = 3_000
    slowsync_threads: tuple[int, ...] = (1, 8)
    #: ``bridge_out``, ``bridge_in``: messages each bridge and its broker's client carry, and the larger
    #: backlog of the bridges' memory comparison.
    bridge_messages: int = 10_000
    bridge_backlog: int = 100_000
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
    thread_counts=(1, 4),
    thread_ops=100,
    batch_size=200,
    batch_repeats=2,
    drain_messages=200,
    drain_consumers=4,
    depth_calls=20,
    expiry_messages=1_000,
    cli_repeats=3,
    import_repeats=5,  # the wall delta is the median of paired runs: two pairs are all noise
    rounds=1,
    budget_s=5.0,
    child_timeout_s=60.0,
    target_backlog=1_000,
    sync_messages=500,
    sync_batch=100,
    mqtt_inflight=100,
    wire_batches=(10, 100),
    wire_messages=200,
    fleet_devices=(2, 4),
    fleet_messages=40,
    fleet_batch=20,
    wakeups=10,
    wakeup_gap_ms=10.0,
    idle_s=0.5,
    bridge_messages=300,
    bridge_backlog=1_000,
    smoke=True,
)

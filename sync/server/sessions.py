"""What the home server knows of each device since it started: its clock offsets and
its settled marks, which the service's correctness depends on.

A device's session begins with its ``hello`` (the clock offset the server measures
then), is refreshed by every request (last seen: also written to the store's
``devices`` table, at most every :data:`SEEN_WRITE_MS`), and carries the device's own
bounds of the server's clock from its latest put (``device_offset_ms``, the journal's
offset). Sessions live in memory: after a restart the server answers
``hello-required`` until each device says hello again, so losing them loses no
message. :class:`~edgeq.sync.server.home.HomeService` owns one :class:`DeviceSessions`;
:class:`~edgeq.sync.server.metrics.Metrics` only reads it to render its per-device gauges.

>>> sessions = DeviceSessions()
>>> state = sessions.device("DEV1")
>>> sessions.current("DEV1") is None  # no session before its hello
True
>>> state.said_hello(sent_ms=1_000, now_ms=1_250, agent="edgeq/1")
250
>>> state.clock_offset_ms, state.last_seen_ms, state.hellos
(250, 1250, 1)
>>> sessions.current("DEV1") is state, sessions.current("DEV2")
(True, None)
>>> sessions.settle_due("DEV1:abcdefghij", 5)
True
>>> sessions.settled("DEV1:abcdefghij", 5); sessions.settle_due("DEV1:abcdefghij", 5)
False
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

__all__ = ["SEEN_WRITE_MS", "DeviceSessions", "DeviceState"]

#: An agent string is the device's to choose: keep no more of it than this.
MAX_AGENT_CHARS = 200
#: At most this often (ms) is a device's last contact written to the store (table ``devices``),
#: per device and process: every request counts, the writes are coalesced.
SEEN_WRITE_MS = 10_000


@dataclass(slots=True)
class DeviceState:
    """What the server knows of one device (by its queue manager name)."""

    name: str
    last_seen_ms: int | None = None
    #: server clock minus device clock at the last hello (ms; includes one-way latency)
    clock_offset_ms: int | None = None
    #: device clock minus the server clock, from the latest put carrying ``server_ms`` (the
    #: device's lower bound of the server clock at its ``now_ms``): the journal's offset
    device_offset_ms: int | None = None
    hellos: int = 0
    agent: str = ""
    #: when this process last wrote the device's last contact to the store (None: never)
    stored_seen_ms: int | None = None
    #: held by each of the device's puts while its quota is checked and the batch stored
    #: (:class:`~edgeq.sync.server.holds.HoldGate`), so concurrent puts cannot overshoot it
    put_lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def seen(self, now_ms: int) -> bool:
        """Note that the device was heard from at ``now_ms``; return whether that contact
        is due to be written to the store (:data:`SEEN_WRITE_MS` since the last write)."""
        self.last_seen_ms = now_ms
        return self.stored_seen_ms is None or not 0 <= now_ms - self.stored_seen_ms < SEEN_WRITE_MS

    def seen_stored(self, now_ms: int) -> None:
        """Note that the contact at ``now_ms`` was written to the store."""
        self.stored_seen_ms = now_ms

    def said_hello(self, *, sent_ms: int, now_ms: int, agent: object = None) -> int:
        """Begin (or renew) the session: the hello was sent at ``sent_ms`` on the device's
        clock and arrived at ``now_ms`` on ours; ``agent`` is what the device says it runs.
        Returns the clock offset measured (server minus device)."""
        offset = now_ms - sent_ms
        self.last_seen_ms = now_ms
        self.agent = agent[:MAX_AGENT_CHARS] if isinstance(agent, str) else ""
        self.clock_offset_ms = offset
        self.hellos += 1
        return offset

    def put_bounds(self, sent_ms: int, server_ms: int | None) -> None:
        """Note a put's clocks: the device read ``sent_ms`` on its clock when its lower
        bound of ours was ``server_ms`` (None: an older agent sends none)."""
        if server_ms is not None:
            self.device_offset_ms = sent_ms - server_ms  # device minus server, at one instant

    @property
    def journal_offset_ms(self) -> int | None:
        """Device clock minus server clock, for the journal: from the latest put's bounds,
        else from the hello (None before either)."""
        if self.device_offset_ms is not None:
            return self.device_offset_ms
        return None if self.clock_offset_ms is None else -self.clock_offset_ms


class DeviceSessions:
    """Thread-safe registry of device sessions and settled marks (request handlers run
    in a thread pool)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._devices: dict[str, DeviceState] = {}
        # The last low-water mark applied per device store (origin): repeats cost nothing.
        self._settled: dict[str, int] = {}

    def device(self, name: str) -> DeviceState:
        """The state of device ``name`` (created on first use: a hello)."""
        with self._lock:
            state = self._devices.get(name)
            if state is None:
                state = self._devices[name] = DeviceState(name)
            return state

    def current(self, name: str) -> DeviceState | None:
        """``name``'s session if it has one (it said hello since the server started), else None."""
        with self._lock:
            state = self._devices.get(name)
        return state if state is not None and state.clock_offset_ms is not None else None

    def get(self, name: str) -> DeviceState | None:
        """The state of device ``name``, or None if it was never heard from."""
        with self._lock:
            return self._devices.get(name)

    def all(self) -> list[DeviceState]:
        """Every known device's state, by name."""
        with self._lock:
            return sorted(self._devices.values(), key=lambda d: d.name)

    def clear(self) -> None:
        """Forget every session and settled mark, as a restart of the server does."""
        with self._lock:
            self._devices.clear()
            self._settled.clear()

    def settle_due(self, origin: str, below: int) -> bool:
        """Whether ``origin``'s low-water mark ``below`` moved past the last one applied."""
        with self._lock:
            return below > self._settled.get(origin, -1)

    def settled(self, origin: str, below: int) -> None:
        """Note that ``origin``'s confirmed uids below ``below`` were forgotten."""
        with self._lock:
            if below > self._settled.get(origin, -1):
                self._settled[origin] = below

"""What the home server knows of each device since it started: clock offsets, last contact and
settled marks. In memory: after a restart devices must say hello again (``hello-required``).

>>> sessions = DeviceSessions()
>>> sessions.device("DEV1").said_hello(sent_ms=1_000, now_ms=1_250, agent="edgeq/1")
250
>>> sessions.current("DEV1").clock_offset_ms
250
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

__all__ = ["SEEN_WRITE_MS", "DeviceSessions", "DeviceState"]

#: An agent string is the device's to choose: keep no more of it than this.
MAX_AGENT_CHARS = 200
#: At most this often (ms), per device and process, is a device's last contact written to the store.
SEEN_WRITE_MS = 10_000


@dataclass(slots=True)
class DeviceState:
    """What the server knows of one device (by its queue manager name)."""

    name: str
    last_seen_ms: int | None = None
    #: server clock minus device clock at the last hello (ms; includes one-way latency)
    clock_offset_ms: int | None = None
    #: device clock minus server clock, from the latest put's ``server_ms``: the journal's offset
    device_offset_ms: int | None = None
    hellos: int = 0
    agent: str = ""
    #: when this process last wrote the device's last contact to the store (None: never)
    stored_seen_ms: int | None = None
    #: the backlog this process last stored per queue: (messages, when)
    backlogs: dict[str, tuple[int, int]] = field(default_factory=dict, repr=False)
    #: serialises the device's puts while its quota is checked (HoldGate)
    put_lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def seen(self, now_ms: int) -> bool:
        """Note contact at ``now_ms``; return whether it is due to be written to the store."""
        self.last_seen_ms = now_ms
        return self.stored_seen_ms is None or not 0 <= now_ms - self.stored_seen_ms < SEEN_WRITE_MS

    def seen_stored(self, now_ms: int) -> None:
        self.stored_seen_ms = now_ms

    def backlog_due(self, queue: str, messages: int, now_ms: int) -> bool:
        """Note a reported backlog; return whether it is due to be stored: the first, one that reached or
        left 0, or one :data:`SEEN_WRITE_MS` after the last stored."""
        last = self.backlogs.get(queue)
        if last is not None and (messages == 0) == (last[0] == 0) and 0 <= now_ms - last[1] < SEEN_WRITE_MS:
            return False
        self.backlogs[queue] = (messages, now_ms)
        return True

    def said_hello(self, *, sent_ms: int, now_ms: int, agent: object = None) -> int:
        """Begin (or renew) the session; return the clock offset measured (server minus device)."""
        offset = now_ms - sent_ms
        self.last_seen_ms = now_ms
        self.agent = agent[:MAX_AGENT_CHARS] if isinstance(agent, str) else ""
        self.clock_offset_ms = offset
        self.hellos += 1
        return offset

    def put_bounds(self, sent_ms: int, server_ms: int | None) -> None:
        """Note a put's clocks: ``sent_ms`` on the device's, ``server_ms`` its lower bound of ours."""
        if server_ms is not None:
            self.device_offset_ms = sent_ms - server_ms  # device minus server, at one instant

    @property
    def journal_offset_ms(self) -> int | None:
        """Device minus server clock, for the journal: from the latest put, else the hello."""
        if self.device_offset_ms is not None:
            return self.device_offset_ms
        return None if self.clock_offset_ms is None else -self.clock_offset_ms


class DeviceSessions:
    """Thread-safe registry of device sessions and settled marks."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._devices: dict[str, DeviceState] = {}
        # The last low-water mark applied per device store (origin): repeats cost nothing.
        self._settled: dict[str, int] = {}

    def device(self, name: str) -> DeviceState:
        with self._lock:
            state = self._devices.get(name)
            if state is None:
                state = self._devices[name] = DeviceState(name)
            return state

    def current(self, name: str) -> DeviceState | None:
        """``name``'s session if it said hello since the server started, else None."""
        with self._lock:
            state = self._devices.get(name)
        return state if state is not None and state.clock_offset_ms is not None else None

    def get(self, name: str) -> DeviceState | None:
        with self._lock:
            return self._devices.get(name)

    def all(self) -> list[DeviceState]:
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
        with self._lock:
            if below > self._settled.get(origin, -1):
                self._settled[origin] = below

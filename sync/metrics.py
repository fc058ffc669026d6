"""The home server's counters and per-device state, rendered in Prometheus' text format.

Per-device state (last seen, clock offset) is kept in memory: it is rebuilt by
each device's next ``hello`` after a restart (the server answers
``hello-required`` until then), so losing it loses no message.

>>> m = Metrics()
>>> m.count("received", 3); m.device("DEV1").seen(1_763_683_200_000)
>>> text = m.render()
>>> "edgeq_sync_messages_received_total 3" in text
True
>>> 'edgeq_sync_device_last_seen_timestamp_seconds{device="DEV1"} 1763683200.0' in text
True
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

__all__ = ["DeviceState", "Metrics"]

# name -> help; each is exported as edgeq_sync_<name>_total
_COUNTERS: dict[str, str] = {
    "messages_received": "Messages stored (locked) by the put stage, replacements of resends included.",
    "messages_confirmed": "Messages made visible by the confirm stage.",
    "messages_duplicate": "Puts of a uid the server already holds or confirmed: acknowledged, not stored again.",
    "messages_expired_on_arrival": "Messages that expired before their put arrived: discarded, rules fired.",
    "messages_expired_locked": "Messages that expired while locked between put and confirm.",
    "messages_refused": "Messages refused by the put stage (queue full, too large, no such queue).",
    "messages_pulled": "Messages sent to devices by pulls (home-server queues).",
    "messages_pull_confirmed": "Pulled messages the devices confirmed (deleted here).",
    "device_expiries": "Expiries devices reported from their own journals (recorded in the server's journal).",
}
_ALIASES = {
    "received": "messages_received",
    "confirmed": "messages_confirmed",
    "duplicates": "messages_duplicate",
    "expired_on_arrival": "messages_expired_on_arrival",
    "expired_locked": "messages_expired_locked",
    "refused": "messages_refused",
    "pulled": "messages_pulled",
    "pull_confirmed": "messages_pull_confirmed",
}


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

    def seen(self, now_ms: int) -> None:
        """Note that the device was heard from at ``now_ms``."""
        self.last_seen_ms = now_ms


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class Metrics:
    """Thread-safe counters plus the device table."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters = dict.fromkeys(_COUNTERS, 0)
        self._requests: dict[tuple[str, int], int] = {}
        self._devices: dict[str, DeviceState] = {}

    def count(self, name: str, n: int = 1) -> None:
        """Add ``n`` to a counter (short names such as ``received`` are accepted)."""
        if n:
            key = _ALIASES.get(name, name)
            with self._lock:
                self._counters[key] += n

    def request(self, endpoint: str, status: int) -> None:
        """Count one request to ``endpoint`` answered with HTTP ``status``."""
        with self._lock:
            self._requests[(endpoint, status)] = self._requests.get((endpoint, status), 0) + 1

    def value(self, name: str) -> int:
        """The current value of a counter (short names such as ``received`` are accepted)."""
        with self._lock:
            return self._counters[_ALIASES.get(name, name)]

    def device(self, name: str) -> DeviceState:
        """The state of device ``name`` (created on first use)."""
        with self._lock:
            state = self._devices.get(name)
            if state is None:
                state = self._devices[name] = DeviceState(name)
            return state

    def known_device(self, name: str) -> DeviceState | None:
        """The state of device ``name``, or None if it was never seen (unlike :meth:`device`)."""
        with self._lock:
            return self._devices.get(name)

    def devices(self) -> list[DeviceState]:
        """Every known device's state, by name."""
        with self._lock:
            return sorted(self._devices.values(), key=lambda d: d.name)

    def render(self) -> str:
        """The Prometheus text exposition format (version 0.0.4)."""
        lines: list[str] = []
        with self._lock:
            counters = dict(self._counters)
            requests = sorted(self._requests.items())
            devices = sorted(self._devices.values(), key=lambda d: d.name)
        for name, text in _COUNTERS.items():
            metric = f"edgeq_sync_{name}_total"
            lines += [f"# HELP {metric} {text}", f"# TYPE {metric} counter", f"{metric} {counters[name]}"]
        metric = "edgeq_sync_requests_total"
        lines += [f"# HELP {metric} HTTP requests handled, by endpoint and status.", f"# TYPE {metric} counter"]
        lines += [f'{metric}{{endpoint="{_escape(e)}",status="{s}"}} {n}' for (e, s), n in requests]
        metric = "edgeq_sync_devices"
        lines += [f"# HELP {metric} Devices that said hello since the server started.", f"# TYPE {metric} gauge"]
        lines.append(f"{metric} {len(devices)}")
        metric = "edgeq_sync_device_last_seen_timestamp_seconds"
        lines += [f"# HELP {metric} When each device last made a request (server clock).", f"# TYPE {metric} gauge"]
        lines += [
            f'{metric}{{device="{_escape(d.name)}"}} {d.last_seen_ms / 1000}'
            for d in devices if d.last_seen_ms is not None
        ]
        metric = "edgeq_sync_device_clock_offset_seconds"
        lines += [
            f"# HELP {metric} Server clock minus device clock, measured at the device's last hello.",
            f"# TYPE {metric} gauge",
        ]
        lines += [
            f'{metric}{{device="{_escape(d.name)}"}} {d.clock_offset_ms / 1000}'
            for d in devices if d.clock_offset_ms is not None
        ]
        return "\n".join(lines) + "\n"

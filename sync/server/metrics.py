"""The home server's counters, rendered in Prometheus' text format (docs/protocol.md, "Metrics").

>>> from edgeq.sync.server.sessions import DeviceSessions
>>> m, sessions = Metrics(), DeviceSessions()
>>> m.count("received", 3); _ = sessions.device("DEV1").seen(1_763_683_200_000)
>>> 'edgeq_sync_device_last_seen_timestamp_seconds{device="DEV1"} 1763683200.0' in m.render(sessions)
True
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    from edgeq.queues.attributes import StoreUsage
    from edgeq.store.devices import DeviceRefusal
    from edgeq.sync.bridges.views import BridgeView
    from edgeq.sync.server.backlog import Backlog
    from edgeq.sync.server.sessions import DeviceSessions

__all__ = ["Metrics"]

# name -> help; each is exported as edgeq_sync_<name>_total
_COUNTERS: dict[str, str] = {
    "messages_received": "Messages stored (locked) by the put stage, replacements of resends included.",
    "messages_confirmed": "Messages made visible by the confirm stage.",
    "messages_duplicate": "Puts of a uid the server already holds or confirmed: "
                          "acknowledged, not stored again.",
    "messages_expired_on_arrival": "Messages that expired before their put arrived: discarded, rules fired.",
    "messages_expired_locked": "Messages that expired while locked between put and confirm.",
    "messages_refused": "Messages refused by the put stage (queue full, too large, no such queue).",
    "messages_pulled": "Messages sent to devices by pulls (home-server queues).",
    "messages_pull_confirmed": "Pulled messages the devices confirmed (deleted here).",
    "device_expiries": "Expiries devices reported from their own journals "
                       "(recorded in the server's journal).",
    "device_dead_lettered": "Messages devices reported moved to their dead-letter queues (refused by this "
                            "server refusal_limit times): waiting there for an operator.",
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


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class Metrics:
    """Thread-safe counters: messages by outcome, requests by endpoint and status."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters = dict.fromkeys(_COUNTERS, 0)
        self._requests: dict[tuple[str, str], int] = {}

    def count(self, name: str, n: int = 1) -> None:
        """Add ``n`` to a counter (short names such as ``received`` are accepted)."""
        if n:
            key = _ALIASES.get(name, name)
            with self._lock:
                self._counters[key] += n

    def request(self, endpoint: str, status: int | str) -> None:
        """Count one request by HTTP ``status``, or ``"disconnected"`` (the client hung up first)."""
        key = (endpoint, str(status))
        with self._lock:
            self._requests[key] = self._requests.get(key, 0) + 1

    def value(self, name: str) -> int:
        with self._lock:
            return self._counters[_ALIASES.get(name, name)]

    def render(self, sessions: DeviceSessions | None = None, usage: StoreUsage | None = None,
               refusals: Sequence[DeviceRefusal] | None = None,
               bridges: Sequence[BridgeView] | None = None, backlog: Backlog | None = None) -> str:
        """The Prometheus text format (0.0.4), with the gauges of ``sessions`` and ``usage``
        (``qm.store_usage()``), ``refusals`` (``qm.exchange.device_refusals()``), ``bridges``
        (``bridge_views``) and ``backlog`` (``read_backlog``) when given."""
        lines: list[str] = []
        with self._lock:
            counters = dict(self._counters)
            requests = sorted(self._requests.items())
        devices = sessions.all() if sessions is not None else []
        for name, text in _COUNTERS.items():
            metric = f"edgeq_sync_{name}_total"
            lines += [f"# HELP {metric} {text}", f"# TYPE {metric} counter", f"{metric} {counters[name]}"]
        metric = "edgeq_sync_requests_total"
        lines += [f"# HELP {metric} HTTP requests handled, by endpoint and status "
                  "('disconnected': the client hung up first).", f"# TYPE {metric} counter"]
        lines += [f'{metric}{{endpoint="{_escape(e)}",status="{s}"}} {n}' for (e, s), n in requests]
        metric = "edgeq_sync_devices"
        lines += [f"# HELP {metric} Devices that said hello since the server started.",
                  f"# TYPE {metric} gauge"]
        lines.append(f"{metric} {len(devices)}")
        metric = "edgeq_sync_device_last_seen_timestamp_seconds"
        lines += [f"# HELP {metric} When each device last made a request (server clock).",
                  f"# TYPE {metric} gauge"]
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
        if usage is not None:
            lines += _usage_lines(usage)
        if refusals is not None:
            lines += _refusal_lines(refusals)
        if bridges is not None:
            lines += _bridge_lines(bridges)
        if backlog is not None:
            lines += _backlog_lines(backlog)
        return "\n".join(lines) + "\n"


def _bridge_lines(bridges: Sequence[BridgeView]) -> list[str]:
    """Each bridge's state as its runner last stored it (docs/bridges.md); its counters restart with it."""
    families: list[tuple[str, str, str, list[tuple[BridgeView, float | int | None]]]] = [
        ("edgeq_bridge_info", "gauge", "1 for each bridge defined; labels kind and queue.",
         [(b, 1) for b in bridges]),
        ("edgeq_bridge_running", "gauge", "1 while the process running the bridge is alive.",
         [(b, int(b.running)) for b in bridges]),
        ("edgeq_bridge_connected", "gauge", "1 while the bridge runs connected to its broker.",
         [(b, int(b.connected)) for b in bridges]),
        ("edgeq_bridge_backlog_messages", "gauge", "Messages waiting on an out-bridge's queue.",
         [(b, b.backlog) for b in bridges]),
        ("edgeq_bridge_forwarded_messages_total", "counter", "Messages the bridge moved since it started.",
         [(b, b.state.forwarded) for b in bridges]),
        ("edgeq_bridge_errors_total", "counter", "Errors of the bridge since it started (the last: "
         "edgeq bridge status).", [(b, b.state.errors) for b in bridges]),
        ("edgeq_bridge_last_forward_timestamp_seconds", "gauge", "When the bridge last moved a message.",
         [(b, None if b.state.last_forward_ms is None else b.state.last_forward_ms / 1000) for b in bridges]),
    ]
    lines: list[str] = []
    for metric, kind, text, samples in families:
        lines += [f"# HELP {metric} {text}", f"# TYPE {metric} {kind}"]
        for b, value in samples:
            if value is None:
                continue
            info = metric == "edgeq_bridge_info"
            extra = f',kind="{_escape(b.kind)}",queue="{_escape(b.queue)}"' if info else ""
            lines.append(f'{metric}{{bridge="{_escape(b.name)}"{extra}}} {value}')
    return lines


def _family(metric: str, kind: str, text: str, samples: Sequence[tuple[str, str, float | None]]) -> list[str]:
    """One metric's HELP, TYPE and samples ``(label, value, number)``; a None number is left out."""
    return [f"# HELP {metric} {text}", f"# TYPE {metric} {kind}",
            *(f'{metric}{{{label}="{_escape(value)}"}} {n}' for label, value, n in samples if n is not None)]


def _seconds(ms: int | None) -> float | None:
    return None if ms is None else ms / 1000


def _backlog_lines(b: Backlog) -> list[str]:
    """The backlog figures (docs/console.md, "Backlog"): per queue, per device, dead-lettered and given up."""
    queues = b.queues
    return [
        *_family("edgeq_queue_oldest_message_age_seconds", "gauge", "Age of each queue's oldest unexpired "
                 "message, from its creation (none when empty).",
                 [("queue", q.name, _seconds(q.oldest_age_ms)) for q in queues]),
        *_family("edgeq_queue_out_rate_messages_per_second", "gauge", "Messages each queue delivered per "
                 "second over the last 15 minutes (journal).",
                 [("queue", q.name, q.out_per_s) for q in queues]),
        *_family("edgeq_queue_drain_estimate_seconds", "gauge", "Depth / out-rate: the time to drain each "
                 "queue at its recent rate (none when nothing went out).",
                 [("queue", q.name, _seconds(q.drain_ms)) for q in queues]),
        *_family("edgeq_queue_expiry_interval_seconds", "gauge", "Each queue's expiry_ms, for alerts (none "
                 "when it has none).", [("queue", q.name, _seconds(q.expiry_ms)) for q in queues]),
        *_family("edgeq_device_backlog_messages", "gauge", "Messages each device last reported waiting to "
                 "be pushed, over its queues.", [("device", d.name, d.backlog) for d in b.devices]),
        *_family("edgeq_device_backlog_reported_timestamp_seconds", "gauge", "When each device last "
                 "reported its backlog (server clock).",
                 [("device", d.name, _seconds(d.reported_ms)) for d in b.devices]),
        *_family("edgeq_dead_lettered_total", "counter", "Messages moved to a dead-letter queue, by reason "
                 "(journal; devices' reports included).",
                 [("reason", r, n) for r, n in b.dead_lettered.items()]),
        *_family("edgeq_given_up_total", "counter", "Messages dropped for good, by reason (journal "
                 "'discarded': deleted from a dead-letter queue).",
                 [("reason", r, n) for r, n in b.given_up.items()]),
    ]


def _refusal_lines(refusals: Sequence[DeviceRefusal]) -> list[str]:
    """What the server refused, per device, queue and reason: kept in the store, so it survives restarts."""
    metric = "edgeq_sync_device_refusals_total"
    lines = [f"# HELP {metric} Messages the server refused, per device, queue and reason "
             "(kept in its store).", f"# TYPE {metric} counter"]
    lines += [f'{metric}{{device="{_escape(r.device)}",queue="{_escape(r.queue)}",'
              f'reason="{_escape(r.reason)}"}} {r.count}'
              for r in sorted(refusals, key=lambda r: (r.device, r.queue, r.reason))]
    return lines


def _usage_lines(usage: StoreUsage) -> list[str]:
    """The flash budget: bytes, limits and depths of the store and each queue, and ``on_full``
    discards since the queue manager opened."""
    lines: list[str] = []

    def family(metric: str, kind: str, text: str, samples: list[tuple[str, int]]) -> None:
        lines.extend([f"# HELP {metric} {text}", f"# TYPE {metric} {kind}"])
        lines.extend(f"{metric}{labels} {value}" for labels, value in samples)

    family("edgeq_store_bytes", "gauge", "Data plus fields of every message held, as stored.",
           [("", usage.bytes)])
    if usage.max_bytes is not None:
        family("edgeq_store_max_bytes", "gauge", "The store's flash budget (max_store_bytes).",
               [("", usage.max_bytes)])
    queues = [(f'{{queue="{_escape(q.name)}"}}', q) for q in usage.queues]
    family("edgeq_queue_depth_messages", "gauge", "Messages held by each queue, locked ones included.",
           [(label, q.depth) for label, q in queues])
    family("edgeq_queue_bytes", "gauge", "Data plus fields held by each queue, as stored.",
           [(label, q.bytes) for label, q in queues])
    family("edgeq_queue_max_bytes", "gauge", "Each bounded queue's max_bytes.",
           [(label, q.max_bytes) for label, q in queues if q.max_bytes is not None])
    family("edgeq_queue_overflow_discards_total", "counter",
           "Messages each queue's on_full discarded to make room, since the server started.",
           [(label, q.overflowed) for label, q in queues])
    return lines

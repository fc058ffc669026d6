"""One adapter per library under test, all behind :class:`benchmarks.peers.base.QueueAdapter`.

Adapters import their library lazily, so listing them (or checking which are
installed) never imports a peer into a process that measures another one.
"""

from __future__ import annotations

import importlib
import importlib.util

from benchmarks.peers.base import QueueAdapter

__all__ = ["ALL_LIBS", "LIBRARIES", "PROTOCOL_PEERS", "QueueAdapter", "adapter_class", "installed"]

#: Library key -> (adapter module, adapter class, module the library imports as).
LIBRARIES: dict[str, tuple[str, str, str]] = {
    "edgeq": ("benchmarks.peers.edgeq_q", "EdgeqAdapter", "edgeq"),
    "pq-ack": ("benchmarks.peers.persistqueue_q", "AckQueueAdapter", "persistqueue"),
    "pq-queue": ("benchmarks.peers.persistqueue_q", "PlainQueueAdapter", "persistqueue"),
    "litequeue": ("benchmarks.peers.litequeue_q", "LiteQueueAdapter", "litequeue"),
    "raw-sqlite": ("benchmarks.peers.raw_sqlite", "RawSqliteAdapter", "sqlite3"),
    "edgeq-sql": ("benchmarks.peers.edgeq_sql", "EdgeqSqlAdapter", "edgeq"),
}

#: Peers that are not queue libraries but protocols, measured by the sync case only
#: (key -> the module their client imports as): see ``benchmarks.peers.mqtt_peer``.
PROTOCOL_PEERS: dict[str, str] = {"mqtt": "paho.mqtt.client", "mqtt-periodic": "paho.mqtt.client"}

#: Every key ``--libs`` accepts.
ALL_LIBS: list[str] = [*LIBRARIES, *PROTOCOL_PEERS]


def installed(lib: str) -> bool:
    """Whether the library behind ``lib`` can be imported in this environment."""
    return importlib.util.find_spec(LIBRARIES[lib][2]) is not None


def adapter_class(lib: str) -> type[QueueAdapter]:
    """The adapter class for a library key (imports the adapter module, not the library)."""
    module_name, class_name, _ = LIBRARIES[lib]
    cls: type[QueueAdapter] = getattr(importlib.import_module(module_name), class_name)
    return cls

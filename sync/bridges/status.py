"""What a running bridge reports (connected, last forward, counts, last error), kept in memory by its
:class:`StatusBoard` and written by the runner to ``edgeq_meta`` for ``edgeq bridge status``."""

from __future__ import annotations

import json
import logging
import os
import threading
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from edgeq.sync.bridges.stored import STATE_PREFIX, meta, read_meta
from edgeq.types import Clock

__all__ = ["BridgeState", "StatusBoard", "pid_alive", "read_states", "write_states"]

log = logging.getLogger("edgeq.bridges")


@dataclass(frozen=True, slots=True)
class BridgeState:
    """A bridge's state: ``forwarded`` messages moved, ``duplicates`` recognised and dropped (in) or
    possibly sent twice (out, resent after a crash), ``refused`` to the DLQ, ``skipped`` (retained, or
    too little expiry left), ``errors`` (the last in ``last_error``); times in epoch ms."""

    connected: bool = False
    connected_ms: int | None = None
    last_forward_ms: int | None = None
    forwarded: int = 0
    duplicates: int = 0
    refused: int = 0
    skipped: int = 0
    errors: int = 0
    last_error: str | None = None
    last_error_ms: int | None = None
    pid: int | None = None
    updated_ms: int | None = None


class StatusBoard:
    """One bridge's :class:`BridgeState`, changed by its thread and read by the runner (thread-safe)."""

    def __init__(self, name: str, clock: Clock) -> None:
        self.name, self._clock = name, clock
        self._lock = threading.Lock()
        self._state = BridgeState(pid=os.getpid())
        self.changed = threading.Event()

    def _set(self, **changes: Any) -> None:
        with self._lock:
            self._state = replace(self._state, **changes)
        self.changed.set()

    def connected(self, up: bool) -> None:
        self._set(connected=up, connected_ms=self._clock() if up else None)

    def count(self, what: str, n: int = 1) -> None:
        """Add ``n`` to counter ``what`` (``forwarded`` also stamps ``last_forward_ms``)."""
        with self._lock:
            changes: dict[str, Any] = {what: getattr(self._state, what) + n}
            if what == "forwarded":
                changes["last_forward_ms"] = self._clock()
            self._state = replace(self._state, **changes)
        self.changed.set()

    def error(self, text: str) -> None:
        """Count an error and keep it as the last one (logged at warning)."""
        log.warning("bridge %s: %s", self.name, text)
        with self._lock:
            self._state = replace(self._state, errors=self._state.errors + 1, last_error=text,
                                  last_error_ms=self._clock())
        self.changed.set()

    def state(self) -> BridgeState:
        with self._lock:
            return self._state


def write_states(path: str | Path, boards: list[StatusBoard], now_ms: int) -> None:
    """Keep each board's state in the store (not durable: a power cut loses only a status)."""
    with meta(path) as tx:
        tx.set_meta({STATE_PREFIX + b.name: json.dumps(asdict(replace(b.state(), updated_ms=now_ms)),
                                                       separators=(",", ":")) for b in boards})


def read_states(path: str | Path) -> dict[str, BridgeState]:
    """The last state each bridge's runner wrote, by bridge name."""
    items = read_meta(path, STATE_PREFIX)
    out = {}
    for key, text in items.items():
        try:
            out[key[len(STATE_PREFIX):]] = BridgeState(**json.loads(text))
        except (ValueError, TypeError):
            out[key[len(STATE_PREFIX):]] = BridgeState(
                last_error=f"its stored status is unreadable: {text[:80]}")
    return out


def pid_alive(pid: int | None) -> bool:
    """Whether process ``pid`` runs on this machine (the runner that wrote a state)."""
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True

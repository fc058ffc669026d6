"""Clocks: edgeq reads time through Python (never SQLite's ``now``), so freezegun or a
:class:`ManualClock` controls it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta

from edgeq.errors import InvalidArgument

__all__ = ["ManualClock", "system_clock"]


def system_clock() -> int:
    """The wall clock in epoch milliseconds (``time.time()``, so freezegun applies)."""
    # Looked up at call time, not bound at import, so freezegun's patch is seen.
    return int(time.time() * 1000)


class ManualClock:
    """A clock that moves only when told to: for tests and the demo.

    >>> clock = ManualClock(1_000); clock.advance(500); clock()
    1500
    """

    def __init__(self, start_ms: int) -> None:
        self._now = int(start_ms)
        self._lock = threading.Lock()
        self._watchers: list[Callable[[], None]] = []

    def __call__(self) -> int:
        with self._lock:
            return self._now

    def advance(self, by: int | timedelta) -> None:
        """Move the clock forward by ``by`` milliseconds (or a timedelta)."""
        ms = int(by.total_seconds() * 1000) if isinstance(by, timedelta) else int(by)
        if ms < 0:
            raise InvalidArgument(f"advance() takes a non-negative step, not {ms} ms")
        with self._lock:
            self._now += ms
        self._moved()

    def set(self, now_ms: int) -> None:
        """Set the clock to ``now_ms`` (it may go backwards, like a real wall clock)."""
        with self._lock:
            self._now = int(now_ms)
        self._moved()

    def watch(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` whenever the clock moves (a redelivery delay may end); return what stops it."""
        with self._lock:
            self._watchers.append(callback)

        def unwatch() -> None:
            with self._lock:
                if callback in self._watchers:
                    self._watchers.remove(callback)

        return unwatch

    def _moved(self) -> None:
        with self._lock:
            watchers = list(self._watchers)
        for callback in watchers:
            callback()

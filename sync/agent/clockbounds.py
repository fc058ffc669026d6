"""What the device knows of the server's clock: bounds from its own round trips, on its monotonic
clock (docs/protocol.md, 'Expiry crosses the wire as remaining milliseconds').

>>> bounds = ServerClockBounds()
>>> bounds.add(10.0, 1_000_000, 10.05)      # sent at 10 s, answered 50 ms later
True
>>> bounds.lower(10.05), bounds.upper(10.05), bounds.lower(70.05)  # a minute later, less 100 ppm
(1000000, 1000051, 1059994)
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Final

__all__ = ["DRIFT", "STALE_AFTER_S", "ServerClockBounds"]

#: How far the rates of the device's monotonic clock and the server's wall clock may differ
#: (100 ppm: 8.6 s a day); every bound is widened by this times the time since its sample.
DRIFT: Final = 100e-6
#: A sample older than this (seconds) has widened by 12 ms each way: the agent takes a
#: fresh one (a hello) before it pushes.
STALE_AFTER_S: Final = 120.0
#: Clock readings are whole milliseconds: honest samples may disagree by less than this.
_TOLERANCE_MS: Final = 1.0


@dataclass(frozen=True, slots=True)
class _Anchor:
    """One bound's best sample: the server read ``server_ms`` no later / no earlier than ``mono``."""

    server_ms: int
    mono: float


class ServerClockBounds:
    """Lower and upper bounds on the server's clock (epoch ms) at any device monotonic time
    (seconds). Feed it :meth:`add` once per completed exchange. Thread-safe."""

    def __init__(self, *, drift: float = DRIFT) -> None:
        self.drift = drift
        self._lock = threading.Lock()
        self._low: _Anchor | None = None
        self._high: _Anchor | None = None
        self._latest: float | None = None
        #: Increases whenever the bounds restart (:meth:`reset`, or a sample they could
        #: not hold): a value computed from them in an earlier epoch may be wrong.
        self.epoch = 0

    @property
    def empty(self) -> bool:
        """No sample since the start or the last :meth:`reset`."""
        return self._low is None

    def reset(self) -> None:
        """Forget every sample (a new hello starts afresh)."""
        with self._lock:
            self._low = self._high = self._latest = None
            self.epoch += 1

    def add(self, sent: float, server_ms: int, received: float) -> bool:
        """Add an exchange sent at ``sent``, answered at ``received``, the server's clock
        read ``server_ms`` in between. False if it does not fit the bounds: they restart from it alone."""
        if received < sent:
            raise ValueError(f"an answer received ({received}) before its request was sent ({sent})")
        low, high = _Anchor(server_ms, received), _Anchor(server_ms, sent)
        with self._lock:
            self._latest = received if self._latest is None else max(self._latest, received)
            if self._low is None or self._high is None:
                self._low, self._high = low, high
                return True
            # Both sides' best, widened to the new sample's arrival; the new one's own.
            old_low, old_high = self._lower(self._low, received), self._upper(self._high, received)
            new_low, new_high = self._lower(low, received), self._upper(high, received)
            if old_low > new_high + _TOLERANCE_MS or new_low > old_high + _TOLERANCE_MS:
                self._low, self._high, self._latest = low, high, received
                self.epoch += 1
                return False
            if new_low >= old_low:
                self._low = low
            if new_high <= old_high:
                self._high = high
            return True

    def lower(self, at: float) -> int:
        """The server's clock at monotonic ``at`` is at least this (epoch ms, rounded down)."""
        with self._lock:
            if self._low is None:
                raise ValueError("no sample of the server's clock yet")
            return math.floor(self._lower(self._low, at))

    def upper(self, at: float) -> int:
        """The server's clock at monotonic ``at`` is at most this (epoch ms, rounded up)."""
        with self._lock:
            if self._high is None:
                raise ValueError("no sample of the server's clock yet")
            return math.ceil(self._upper(self._high, at))

    def read_age_ms(self, server_ms: int, sent: float, received: float) -> int:
        """At most how long before ``received`` the server read ``server_ms`` (ms, rounded up); :meth:`add`
        the exchange first.

        >>> bounds = ServerClockBounds()
        >>> _ = bounds.add(0.0, 1_000, 0.0)          # an exact sample: server = monotonic + 1 s
        >>> _ = bounds.add(60.0, 61_300, 60.5)       # read 300 ms after the request left
        >>> bounds.read_age_ms(61_300, 60.0, 60.5)   # 200 ms ago, plus drift and rounding
        208
        """
        whole = (received - sent) * 1000
        with self._lock:
            high = self._high
            if high is None:
                return max(0, math.ceil(whole))
            # server_ms <= server clock at the read instant m <= high.server_ms + (m - high.mono) +
            # widening + 1 ms (that reading was whole ms), so m >= high.mono + (server_ms - ...).
            widen = self.drift * 1000 * max(abs(sent - high.mono), abs(received - high.mono))
            since = (received - high.mono) * 1000 - (server_ms - high.server_ms) + widen + _TOLERANCE_MS
        return max(0, math.ceil(min(whole, since)))

    def age_s(self, at: float) -> float | None:
        """Seconds from the latest sample's answer to ``at`` (None: no sample)."""
        with self._lock:
            return None if self._latest is None else at - self._latest

    def _lower(self, anchor: _Anchor, at: float) -> float:
        elapsed = (at - anchor.mono) * 1000
        return anchor.server_ms + elapsed - self.drift * abs(elapsed)

    def _upper(self, anchor: _Anchor, at: float) -> float:
        elapsed = (at - anchor.mono) * 1000
        return anchor.server_ms + elapsed + self.drift * abs(elapsed)

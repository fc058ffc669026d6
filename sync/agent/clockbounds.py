"""What the device knows of the server's clock: bounds from its own round trips.

The device sees every exchange from both ends on its **monotonic** clock (which no
wall-clock step moves): a request sent at ``s``, answered at ``a``, carries the
server's clock reading ``t`` (the response's ``now_ms``), taken at some instant in
``[s, a]``. So at any device monotonic time ``m``, in ms,

    m + L  <=  server clock  <=  m + H,    L = max_j (t_j - a_j),  H = min_j (t_j - s_j)

each bound widened by the drift allowance :data:`DRIFT` (the two clocks' rates may
differ by 100 ppm) times the time between ``m`` and the sample it came from.
:class:`ServerClockBounds` keeps the best sample for each bound (O(1)). A sample that
no longer fits the bounds (the server's clock stepped, or drifted beyond the allowance)
restarts them from that sample alone: they are wrong, whichever side is.

The agent uses them to rebase expiries without trusting any wall clock across the
wire (``docs/protocol.md``, "Expiry crosses the wire as remaining milliseconds"):
a push tells the server the **lower** bound of its clock at the instant the device
read the messages' remaining lifetimes (``server_ms``); a pull takes the **upper**
bound to tell how long ago, at most, the server read its clock.

>>> bounds = ServerClockBounds()
>>> bounds.add(10.0, 1_000_000, 10.05)      # sent at 10 s, answered 50 ms later
True
>>> bounds.lower(10.05), bounds.upper(10.05)
(1000000, 1000051)
>>> bounds.lower(70.05)                     # a minute later, less 100 ppm of it
1059994
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Final

__all__ = ["DRIFT", "STALE_AFTER_S", "ServerClockBounds"]

#: How far the rates of the device's monotonic clock and the server's wall clock may
#: differ (100 ppm: 8.6 s a day, far more than any NTP-disciplined or decent quartz
#: clock); every bound is widened by this times the time since its sample.
DRIFT: Final = 100e-6
#: A sample older than this (seconds) has widened by 12 ms each way: the agent takes a
#: fresh one (a hello) before it pushes.
STALE_AFTER_S: Final = 120.0
#: Clock readings are whole milliseconds: honest samples may disagree by less than this.
_TOLERANCE_MS: Final = 1.0


@dataclass(frozen=True, slots=True)
class _Anchor:
    """One bound's best sample: the server read ``server_ms`` no later than ``mono`` (for
    the lower bound, the answer's arrival) or no earlier (for the upper, the request's
    departure), in device monotonic seconds."""

    server_ms: int
    mono: float


class ServerClockBounds:
    """Lower and upper bounds on the server's clock at any device monotonic time.

    Feed it :meth:`add` once per completed exchange; ask :meth:`lower`, :meth:`upper`
    or :meth:`read_age_ms`. Times are the device's monotonic clock in seconds (e.g.
    ``time.monotonic()``), server readings epoch ms. Thread-safe.

    >>> bounds = ServerClockBounds()
    >>> bounds.empty
    True
    >>> bounds.add(0.0, 5_000, 0.2), bounds.add(1.0, 6_010, 1.02)
    (True, True)
    >>> bounds.lower(1.02), bounds.upper(1.02)    # lower from the second exchange, upper from the first
    (6010, 6021)
    >>> bounds.add(2.0, 2_000, 2.01), bounds.epoch  # the server's clock stepped back
    (False, 1)
    >>> bounds.lower(2.01)
    2000
    """

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
        """Forget every sample (a new hello starts afresh).

        >>> bounds = ServerClockBounds()
        >>> _ = bounds.add(0.0, 1_000, 0.1)
        >>> bounds.reset(); bounds.empty, bounds.epoch
        (True, 1)
        """
        with self._lock:
            self._low = self._high = self._latest = None
            self.epoch += 1

    def add(self, sent: float, server_ms: int, received: float) -> bool:
        """Add an exchange: sent at monotonic ``sent``, answered at ``received``, the
        server's clock read ``server_ms`` in between. Returns False if the sample does
        not fit the bounds (by more than 1 ms): they restart from it alone.

        >>> bounds = ServerClockBounds()
        >>> bounds.add(0.0, 1_000, 0.1), bounds.add(10.0, 11_000, 10.1)
        (True, True)
        >>> bounds.add(20.0, 31_000, 20.1)   # 10 s ahead of what the bounds allow
        False
        """
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
        """At most how long before ``received`` the server read ``server_ms`` (ms, rounded
        up), for an exchange sent at ``sent``: the whole exchange, or less if the upper
        bound shows the server cannot have read that value so early. :meth:`add` the
        exchange first (a reading the bounds do not hold says nothing).

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
        """Seconds from the latest sample's answer to ``at`` (None: no sample).

        >>> bounds = ServerClockBounds()
        >>> _ = bounds.add(1.0, 9_000, 1.5)
        >>> bounds.age_s(4.0)
        2.5
        """
        with self._lock:
            return None if self._latest is None else at - self._latest

    def _lower(self, anchor: _Anchor, at: float) -> float:
        elapsed = (at - anchor.mono) * 1000
        return anchor.server_ms + elapsed - self.drift * abs(elapsed)

    def _upper(self, anchor: _Anchor, at: float) -> float:
        elapsed = (at - anchor.mono) * 1000
        return anchor.server_ms + elapsed + self.drift * abs(elapsed)

"""How a report's values read to people, in the summary and on the page: by what a column's name
says it holds (stamps and instants as UTC times, other ``*_ms`` as durations, counts)."""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any

__all__ = ["cell", "format_ms", "format_stamp", "format_time", "is_instant", "is_numeric", "short_ms"]

#: ``*_ms`` columns that are points in time, not durations (besides the ``first_``/``last_`` ones).
_INSTANTS = frozenset({
    "at_ms", "hour_ms", "day_ms", "created_ms", "arrived_ms", "confirmed_ms", "since_ms", "until_ms",
    "window_start_ms", "window_end_ms", "before_ms", "after_ms",
})
#: ``first_*_ms``/``last_*_ms`` columns that are durations all the same.
_DURATIONS = frozenset({"min_ms", "max_ms", "mean_ms"})


def format_ms(value: float | None) -> str:
    """A duration for people.

    >>> [format_ms(v) for v in (None, 0, 12.5, 1500, 90_000, 7_200_000, -700)]
    ['-', '0 ms', '12.5 ms', '1.50 s', '1.5 min', '2.0 h', '-700 ms']
    """
    if value is None:
        return "-"
    if abs(value) < 1000:
        return f"{value:g} ms" if value == int(value) else f"{value:.1f} ms"
    if abs(value) < 60_000:
        return f"{value / 1000:.2f} s"
    if abs(value) < 3_600_000:
        return f"{value / 60_000:.1f} min"
    return f"{value / 3_600_000:.1f} h"


def short_ms(ms: int) -> str:
    """A round duration, short (an axis label).

    >>> [short_ms(v) for v in (0, 5, 1000, 1500, 30_000, 120_000, 21_600_000, 86_400_000)]
    ['0', '5ms', '1s', '1.5s', '30s', '2min', '6h', '1d']
    """
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000)):
        if abs(ms) >= size:
            return f"{ms / size:g}{unit}"
    return f"{ms}ms" if ms else "0"


def format_time(ms: int | None, *, precision: str = "ms") -> str:
    """An epoch-ms instant as ISO 8601, UTC (``precision``: ``ms``, ``seconds``, ``minutes``).

    >>> format_time(1_763_762_400_123), format_time(1_763_762_400_000, precision="minutes")
    ('2025-11-21T22:00:00.123Z', '2025-11-21T22:00Z')
    """
    if ms is None:
        return "-"
    when = datetime.fromtimestamp(ms / 1000, UTC)
    if precision == "minutes":
        return when.strftime("%Y-%m-%dT%H:%MZ")
    if precision == "seconds":
        return when.strftime("%Y-%m-%dT%H:%M:%SZ")
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{int(ms) % 1000:03d}Z"


def format_stamp(stamp: int | None) -> str:
    """A uid's stamp as the creation time it encodes (without ``n``, its count within the ms)."""
    return "-" if stamp is None else format_time(stamp // 1000)


def is_instant(column: str) -> bool:
    """Whether an integer column holds epoch milliseconds of a point in time.

    >>> [is_instant(c) for c in ("hour_ms", "last_seen_ms", "first_ms", "p95_ms", "clock_offset_ms")]
    [True, True, True, False, False]
    """
    if not column.endswith("_ms") or column in _DURATIONS:
        return False
    return (column in _INSTANTS or column.startswith(("first_", "last_"))
            or column.endswith(("_at_ms", "seen_ms")))


def is_numeric(column: str, value: Any) -> bool:
    """Whether a value is shown right-aligned (a count or a duration, not a time or a name)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return not (is_instant(column) or column == "stamp" or column.endswith("_stamp"))


def cell(column: str, value: Any) -> str:
    """How ``value`` of report column ``column`` reads.

    >>> cell("first_stamp", 1_795_378_940_077_000), cell("accepted", 63211), cell("p50_ms", 12.5)
    ('2026-11-22T20:22:20.077Z', '63,211', '12.5 ms')
    >>> cell("hour_ms", 1_763_762_400_000), cell("queues", ["A", "B"]), cell("device", None)
    ('2025-11-21T22:00Z', 'A, B', '-')
    """
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if column == "stamp" or column.endswith("_stamp"):
        return format_stamp(int(value))
    if isinstance(value, (int, float)) and column.endswith("_ms"):
        if not is_instant(column):
            return format_ms(value)
        return format_time(int(value), precision="minutes" if column in ("hour_ms", "day_ms") else "ms")
    if isinstance(value, datetime):
        aware = value if value.tzinfo else value.replace(tzinfo=UTC)
        return aware.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:,.3g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    return str(value)

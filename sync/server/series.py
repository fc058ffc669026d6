"""The journal over time: the ranges (1h, 24h, 7d), each one's step, and the counts per kind in buckets at
round times, as the console's charts draw them and ``GET /api/v1/metrics`` answers them."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, get_args

from edgeq.errors import InvalidArgument
from edgeq.store.journal import JournalKind

__all__ = ["KINDS", "RANGES", "STEPS", "Buckets", "Series", "buckets", "check_range", "journal_series"]

_HOUR_MS: Final = 3_600_000
#: the spans counted (``?range=``)
RANGES: Final[Mapping[str, int]] = {"1h": _HOUR_MS, "24h": 24 * _HOUR_MS, "7d": 7 * 24 * _HOUR_MS}
#: a bucket's width in each range: 60, 96 and 84 buckets
STEPS: Final[Mapping[str, int]] = {"1h": 60_000, "24h": 15 * 60_000, "7d": 2 * _HOUR_MS}
#: the journal's kinds, a series each
KINDS: Final[tuple[JournalKind, ...]] = get_args(JournalKind)


@dataclass(frozen=True, slots=True)
class Buckets:
    """``count`` buckets ``step_ms`` wide from ``start_ms`` (a round time); the last holds now."""

    step_ms: int
    start_ms: int
    count: int

    @property
    def end_ms(self) -> int:
        return self.start_ms + self.step_ms * self.count


@dataclass(frozen=True, slots=True)
class Series:
    """The journal's rows per kind (:data:`KINDS`) in each of ``buckets`` over ``range``."""

    range: str
    buckets: Buckets
    counts: dict[str, list[int]]


def check_range(text: str | None) -> str:
    """A ``?range=`` (1h if none): one of :data:`RANGES`, else :class:`InvalidArgument`."""
    span = "1h" if text is None else text
    if span not in RANGES:
        raise InvalidArgument(f"range must be one of {', '.join(RANGES)}, not {span[:20]!r}")
    return span


def buckets(now_ms: int, span: str) -> Buckets:
    """The buckets of :data:`RANGES` ``[span]`` at round times, up to the one holding ``now_ms``."""
    step = STEPS[span]
    end = (now_ms // step + 1) * step
    return Buckets(step, end - RANGES[span], RANGES[span] // step)


def journal_series(conn: sqlite3.Connection, now_ms: int, span: str, *, queue: str | None = None,
                   device: str | None = None) -> Series:
    """The journal's rows per kind and bucket over ``span`` (only ``queue``'s, ``device``'s, if given)."""
    b = buckets(now_ms, span)
    found = {(kind, i): n for kind, i, n in conn.execute(
        "SELECT kind, (at_ms - ?) / ?, count(*) FROM journal WHERE at_ms >= ? AND at_ms < ? "
        "AND (? IS NULL OR queue = ?) AND (? IS NULL OR device = ?) GROUP BY 1, 2",
        (b.start_ms, b.step_ms, b.start_ms, b.end_ms, queue, queue, device, device))}
    return Series(span, b, {kind: [found.get((kind, i), 0) for i in range(b.count)] for kind in KINDS})

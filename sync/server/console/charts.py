"""Inline SVG charts for the operator console: drawn on the server, so the page needs no
script library and no internet.

>>> chart = line_chart([0, 2, 1], width=100, height=50)
>>> chart.points
'0.0,50.0 50.0,0.0 100.0,25.0'
>>> chart.peak
2
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["LineChart", "line_chart"]


@dataclass(frozen=True)
class LineChart:
    """A polyline's points in a ``width`` x ``height`` box, and the value at its top."""

    points: str
    width: int
    height: int
    peak: int
    total: int


def line_chart(values: Sequence[int], *, width: int = 600, height: int = 120) -> LineChart:
    """``values`` (oldest first) as a polyline filling the box; the top is the peak (at least 1)."""
    peak = max([1, *values])
    step = width / max(1, len(values) - 1)
    points = " ".join(f"{i * step:.1f},{height - v * height / peak:.1f}" for i, v in enumerate(values))
    return LineChart(points, width, height, peak, sum(values))

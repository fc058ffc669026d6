"""Charts as inline SVG, for the pipeline's report page and the operator console
(docs/pipeline.md, "The report page")."""

from __future__ import annotations

import html
import itertools
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

__all__ = ["COLORS", "Chart", "bar_chart", "line_chart", "nice_ticks", "text_width", "time_chart",
           "time_marks"]

#: One colour per series name (colour-blind-safe Tableau 10); others get ``#4e79a7``.
COLORS: dict[str, str] = {
    "messages": "#4e79a7", "accepted": "#4e79a7", "delivered": "#59a14f", "expired": "#e15759",
    "server": "#4e79a7", "device": "#f28e2b", "both": "#e15759",
}
#: Further series' colours, in order (Tableau 10).
_PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
            "#ff9da7", "#9c755f", "#bab0ac")
_FONT = 11  # px, axis labels
_CHAR = 0.62  # a character's width in ems, generously (system-ui digits are ~0.55)
_WIDTH = 960  # the viewBox width by default; the page scales it to its column
_PLOT_H = 180
_MAX_BAR = 36.0  # px: one series' bar at most this wide, however few categories
_E = html.escape
_MINUTE, _HOUR, _DAY = 60_000, 3_600_000, 86_400_000
#: The round steps of a time axis, in ms: minutes, hours, days, a week.
_TIME_STEPS = (tuple(m * _MINUTE for m in (1, 2, 5, 10, 15, 30))
               + tuple(h * _HOUR for h in (1, 2, 3, 6, 12)) + tuple(d * _DAY for d in (1, 2, 7)))


def text_width(text: str, size: float = _FONT) -> float:
    """An upper estimate of ``text``'s width in px at ``size`` px."""
    return len(text) * size * _CHAR


def nice_ticks(high: float, low: float = 0, count: int = 5) -> list[float]:
    """Axis ticks covering ``low``..``high`` and 0, about ``count`` steps of 1, 2 or 5 times 10**n.

    >>> nice_ticks(87)
    [0, 20, 40, 60, 80, 100]
    """
    high, low = max(high, 0), min(low, 0)
    if high == low:
        return [0, 1]
    raw = (high - low) / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    if high - low <= count and step < 1:
        step = 1
    first, last = math.floor(low / step + 1e-9), math.ceil(high / step - 1e-9)
    return [_tidy(i * step) for i in range(first, last + 1)]


def _tidy(value: float) -> float:
    return int(value) if float(value).is_integer() else round(value, 10)


def _tick_label(value: float, top: float) -> str:
    """``value`` in the unit its axis' largest tick reads best in: 1.5M, 15k, 1,500."""
    if value == 0:
        return "0"
    if abs(top) >= 1_000_000:
        return f"{value / 1_000_000:g}M"
    if abs(top) >= 10_000:
        return f"{value / 1000:g}k"
    return f"{value:,g}"


@dataclass(frozen=True, slots=True)
class Chart:
    """A chart's geometry, worked out from its labels before anything is drawn."""

    labels: Sequence[str]
    shown: frozenset[int]  # which categories' labels are drawn (every one, or every k-th)
    rotate: bool
    left: float
    bottom: float
    top: float
    width: float
    ticks: tuple[float, ...] = (0, 1)
    right: float = 16.0
    x_title: str = ""

    @property
    def height(self) -> float:
        return self.top + _PLOT_H + self.bottom

    @property
    def plot_w(self) -> float:
        return self.width - self.left - self.right

    @property
    def base(self) -> float:
        return self.top + _PLOT_H

    def y(self, value: float) -> float:
        low, high = self.ticks[0], self.ticks[-1]
        return self.base - (value - low) / ((high - low) or 1) * _PLOT_H

    def slot(self, i: int) -> tuple[float, float]:
        """Category ``i``'s (left x, width)."""
        w = self.plot_w / max(1, len(self.labels))
        return self.left + i * w, w


def _layout(labels: Sequence[str], ticks: Sequence[float], legend: bool,
            marks: Collection[int] | None, width: float, x_title: str) -> Chart:
    """Place the plot so that every label drawn (``marks``; default: as many as fit) is inside."""
    n = max(1, len(labels))
    top = max((abs(t) for t in ticks), default=0)
    # tick labels, axis title
    y_w = max((text_width(_tick_label(t, top)) for t in ticks), default=0) + 26
    room = (width - y_w - 16) / n
    longest = max((text_width(t) for t in labels), default=0)
    shown = sorted(marks) if marks is not None else list(range(len(labels)))
    gap = min((b - a for a, b in itertools.pairwise(shown)), default=n) * room
    first = text_width(labels[shown[0]]) if shown else 0
    last = text_width(labels[shown[-1]]) if shown else 0
    # horizontal, centred on their ticks: the outermost may reach past the plot
    if longest + 8 <= gap:
        rotate, bottom = False, float(_FONT + 12)
        left = max(y_w, first / 2 - (shown[0] + 0.5) * room + 4) if shown else y_w
        right = max(16.0, last / 2 - (n - shown[-1] - 0.5) * room + 4) if shown else 16.0
    else:  # rotated 45°, anchored at the tick and reaching down and to the left
        rotate, bottom, right = True, longest * math.sqrt(0.5) + _FONT + 14, 16.0
        if marks is None:  # rotated labels need ~16 px between ticks
            shown = shown[:: max(1, math.ceil(_FONT * 1.5 / room))]
        # the first label reaches left of its tick by its length and its height, both at 45°
        left = max(y_w, (first + _FONT) * math.sqrt(0.5) - (shown[0] + 0.5) * room + 4
                   if shown else 0)
    bottom += _FONT + 8 if x_title else 0
    return Chart(labels, frozenset(shown), rotate, left, bottom, 28 if legend else 14, width,
                 tuple(ticks), right, x_title)


def _frame(chart: Chart, title: str, unit: str, series: Sequence[str], colors: Sequence[str],
           html_id: str) -> list[str]:
    """The SVG element, the y axis with its grid, the axes' titles and the legend."""
    ident = f' id="{_E(html_id)}"' if html_id else ""
    out = [f'<svg xmlns="http://www.w3.org/2000/svg"{ident} '
           f'viewBox="0 0 {chart.width:.0f} {chart.height:.0f}" class="chart" role="img" '
           f'aria-label="{_E(title)}" font-family="system-ui,sans-serif">'
           f"<title>{_E(title)}</title>"]
    top = max(abs(t) for t in chart.ticks)
    for t in chart.ticks:
        y = chart.y(t)
        out.append(f'<line x1="{chart.left:.1f}" y1="{y:.1f}" '
                   f'x2="{chart.left + chart.plot_w:.1f}" y2="{y:.1f}" '
                   f'stroke="{"#444" if t == 0 else "#e4e4e4"}"/>'
                   f'<text class="ytick" x="{chart.left - 6:.1f}" y="{y + 4:.1f}" text-anchor="end" '
                   f'font-size="{_FONT}">{_tick_label(t, top)}</text>')
    mid = chart.top + _PLOT_H / 2
    out.append(f'<text class="yunit" x="12" y="{mid:.1f}" font-size="{_FONT}" text-anchor="middle" '
               f'transform="rotate(-90 12 {mid:.1f})">{_E(unit)}</text>')
    if chart.x_title:
        centre = chart.left + chart.plot_w / 2
        out.append(f'<text class="xunit" x="{centre:.1f}" y="{chart.height - 5:.1f}" '
                   f'font-size="{_FONT}" text-anchor="middle">{_E(chart.x_title)}</text>')
    if len(series) > 1:
        x = chart.left
        for name, color in zip(series, colors, strict=True):
            if x + 14 + text_width(name) > chart.width:
                break  # a legend longer than the chart is cut; each series is named in its tooltips
            out.append(f'<rect x="{x:.1f}" y="6" width="10" height="10" fill="{color}"/>'
                       f'<text class="legend" x="{x + 14:.1f}" y="15" font-size="{_FONT}">'
                       f'{_E(name)}</text>')
            x += 28 + text_width(name) * 0.9  # (the estimate is generous: legend entries stay close)
    return out


def _colors(names: Sequence[str]) -> list[str]:
    spare = iter(_PALETTE * (1 + len(names) // len(_PALETTE)))
    return [COLORS[name] if name in COLORS else next(spare) for name in names]


def _values(series: Mapping[str, Sequence[float | None]]) -> list[float]:
    return [v for values in series.values() for v in values if v is not None]


def _x_labels(chart: Chart, centre: Sequence[float]) -> list[str]:
    out = []
    y = chart.base + _FONT + 4
    for i in sorted(chart.shown):
        cx, label = centre[i], _E(chart.labels[i])
        if chart.rotate:
            out.append(f'<text class="xtick" x="{cx:.1f}" y="{y:.1f}" font-size="{_FONT}" '
                       f'text-anchor="end" transform="rotate(-45 {cx:.1f} {y:.1f})">{label}</text>')
        else:
            out.append(f'<text class="xtick" x="{cx:.1f}" y="{y:.1f}" font-size="{_FONT}" '
                       f'text-anchor="middle">{label}</text>')
    return out


def time_marks(times_ms: Sequence[int], label: str, width: float = _WIDTH) -> list[int] | None:
    """Which of evenly spaced times (ms) to label, on the finest round step where labels like ``label``
    stand level; None if none does (the chart tilts them).

    >>> time_marks([h * 3_600_000 for h in range(72)], "2025-11-21T22:00Z")[:3]
    [0, 12, 24]
    """
    spacing = max(1, times_ms[1] - times_ms[0]) if len(times_ms) > 1 else _MINUTE
    # px per ms: about, past the y axis and margins
    room = (width - 90) / max(1, len(times_ms)) / spacing
    for step in _TIME_STEPS:
        if step % spacing == 0 and text_width(label) + 12 <= step * room:
            return [i for i, t in enumerate(times_ms) if t % step == 0]
    return None


def bar_chart(labels: Sequence[str], series: Mapping[str, Sequence[float]], *, title: str, unit: str,
              marks: Collection[int] | None = None, x_title: str = "", width: float = _WIDTH,
              html_id: str = "") -> str:
    """Grouped bars: one group per label, one bar per series side by side.

    >>> svg = bar_chart(["10:00"], {"accepted": [5], "delivered": [3]}, title="t", unit="messages")
    >>> svg.count('class="bar"')
    2
    """
    names, values = list(series), _values(series)
    chart = _layout(labels, nice_ticks(max(values, default=0), min(values, default=0)), len(names) > 1,
                    marks, width, x_title)
    colors = _colors(names)
    out = _frame(chart, title, unit, names, colors, html_id)
    zero = chart.y(0)
    centres = []
    for i, label in enumerate(labels):
        x0, w = chart.slot(i)
        bar = min(_MAX_BAR, w * 0.8 / len(names))
        start = x0 + (w - bar * len(names)) / 2
        centres.append(x0 + w / 2)
        for k, name in enumerate(names):
            value = series[name][i]
            y = chart.y(value)
            out.append(f'<rect class="bar" x="{start + k * bar:.1f}" y="{min(y, zero):.1f}" '
                       f'width="{max(bar - 1, 1):.1f}" height="{abs(zero - y):.1f}" fill="{colors[k]}">'
                       f"<title>{_E(label)}: {value:,g} {_E(name)}</title></rect>")
    out += _x_labels(chart, centres)
    out.append("</svg>")
    return "".join(out)


def line_chart(labels: Sequence[str], series: Mapping[str, Sequence[float | None]], *, title: str,
               unit: str, marks: Collection[int] | None = None, x_title: str = "", width: float = _WIDTH,
               html_id: str = "") -> str:
    """One line per series, a dot at each point; a None value breaks the line.

    >>> svg = line_chart(["a", "b", "c"], {"x": [1, None, 2], "y": [3, 4, 5]}, title="t", unit="u")
    >>> svg.count("<polyline")
    3
    """
    names, values = list(series), _values(series)
    chart = _layout(labels, nice_ticks(max(values, default=0), min(values, default=0)), len(names) > 1,
                    marks, width, x_title)
    colors = _colors(names)
    out = _frame(chart, title, unit, names, colors, html_id)
    centres = [chart.slot(i)[0] + chart.slot(i)[1] / 2 for i in range(len(labels))]
    for name, color in zip(names, colors, strict=True):
        points = [None if v is None else (centres[i], chart.y(v)) for i, v in enumerate(series[name])]
        run: list[tuple[float, float]] = []
        for point in [*points, None]:
            if point is not None:
                run.append(point)
            elif run:
                out.append(f'<polyline class="series" fill="none" stroke="{color}" stroke-width="1.8" '
                           'points="' + " ".join(f"{x:.1f},{y:.1f}" for x, y in run) + '"/>')
                run = []
        if len(points) <= 200:
            out += [f'<circle cx="{p[0]:.1f}" cy="{p[1]:.1f}" r="{4 if len(points) < 4 else 2}" '
                    f'fill="{color}"><title>{_E(labels[i])}: '
                    f"{series[name][i]:,g} {_E(name)}</title></circle>" for i, p in enumerate(points) if p]
    out += _x_labels(chart, centres)
    out.append("</svg>")
    return "".join(out)


def time_chart(start_ms: int, step_ms: int, series: Mapping[str, Sequence[float | None]], *, title: str,
               unit: str, width: float = _WIDTH, html_id: str = "") -> str:
    """Values per ``step_ms`` from ``start_ms`` as lines (None: a gap), the x axis labelled in UTC at round
    times (hours and minutes within two days, else days), the y axis at 1-2-5 ticks.

    >>> svg = time_chart(0, 3_600_000, {"in": [1] * 24}, title="t", unit="u", width=600)
    >>> [t.split(">")[1].split("<")[0] for t in svg.split('class="xtick"')[1:]][:2]
    ['00:00', '03:00']
    """
    n = len(next(iter(series.values()), ()))
    times = [start_ms + i * step_ms for i in range(n)]
    form = "%H:%M" if n * step_ms <= 2 * _DAY else "%d %b"
    labels = [datetime.fromtimestamp(t / 1000, UTC).strftime(form) for t in times]
    return line_chart(labels, series, title=title, unit=unit, width=width, html_id=html_id, x_title="UTC",
                      marks=time_marks(times, labels[0] if labels else "00:00", width))

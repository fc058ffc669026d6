"""The shared SVG charts' axes (the report's and the console's): values on 1-2-5 ticks, times on
round ones, both axes named (issue 33)."""

from __future__ import annotations

import itertools
import math
import xml.etree.ElementTree as ET

import pytest

from edgeq.sync.pipeline.report.charts import bar_chart, line_chart, nice_ticks, time_marks

SVG = "{http://www.w3.org/2000/svg}"
MINUTE, HOUR = 60_000, 3_600_000


@pytest.mark.parametrize(("high", "low", "ticks"), [
    (87, 0, [0, 20, 40, 60, 80, 100]),
    (7, 0, [0, 2, 4, 6, 8]),
    (3, 0, [0, 1, 2, 3]),
    (0, 0, [0, 1]),
    (1500, -700, [-1000, -500, 0, 500, 1000, 1500]),
    (2_400_000, 0, [0, 500_000, 1_000_000, 1_500_000, 2_000_000, 2_500_000]),
])
def test_values_stand_on_ticks_of_1_2_or_5_times_a_power_of_ten(high: float, low: float,
                                                                ticks: list[float]) -> None:
    assert nice_ticks(high, low) == ticks


@pytest.mark.parametrize("high", [1, 9, 11, 23, 87, 99, 101, 250, 333, 1_234, 99_999, 7.3e6])
def test_every_tick_step_is_1_2_or_5_and_the_ticks_cover_the_values(high: float) -> None:
    ticks = nice_ticks(high)
    steps = {round(b - a, 9) for a, b in itertools.pairwise(ticks)}
    (step,) = steps  # evenly spaced
    mantissa = step / 10 ** math.floor(math.log10(step))
    assert round(mantissa, 9) in (1, 2, 5)
    assert ticks[0] == 0 and ticks[-1] >= high and ticks[-2] < high and len(ticks) <= 8


def test_an_hour_by_minute_is_labelled_on_round_minutes() -> None:
    """The console's chart: 60 minutes in 600 px; labels as wide as 00:00 stand every 10 minutes."""
    minutes = [(29_400_000 + 7) * MINUTE + i * MINUTE for i in range(60)]  # from 21:07 on some day
    marks = time_marks(minutes, "00:00", 600)
    assert marks is not None
    assert [minutes[i] % HOUR // MINUTE for i in marks] == [10, 20, 30, 40, 50, 0]
    assert time_marks(minutes, "00:00", 1500) == [i for i, t in enumerate(minutes) if t % (2 * MINUTE) == 0]


@pytest.mark.parametrize(("hours", "step"), [(6, 1), (30, 2), (72, 6), (24 * 14, 24), (24 * 90, 24 * 7)])
def test_hours_are_labelled_on_round_hours_days_or_weeks(hours: int, step: int) -> None:
    times = [(490_000 + h) * HOUR for h in range(hours)]
    marks = time_marks(times, "22:00")
    assert marks is not None and marks == [i for i, t in enumerate(times) if (t // HOUR) % step == 0]


def test_times_too_many_for_any_round_step_are_left_to_the_chart() -> None:
    assert time_marks([h * HOUR for h in range(24 * 400)], "2025-11-21T22:00Z") is None


@pytest.mark.parametrize("draw", [bar_chart, line_chart])
def test_both_axes_are_named_inside_the_chart(draw: object) -> None:
    labels = [f"{h:02d}:00" for h in range(12)]
    assert callable(draw)
    svg = ET.fromstring(draw(labels, {"accepted": [3.0] * 12}, title="t", unit="messages / hour",
                             x_title="hour (UTC)", html_id="chart-x", width=600))
    assert svg.get("id") == "chart-x" and svg.get("viewBox", "").split()[2] == "600"
    height = float(svg.get("viewBox", "").split()[3])
    named = {t.get("class"): t for t in svg.iter(f"{SVG}text") if t.get("class") in ("xunit", "yunit")}
    assert named["xunit"].text == "hour (UTC)" and named["yunit"].text == "messages / hour"
    xtick_y = max(float(t.get("y", 0)) for t in svg.iter(f"{SVG}text") if t.get("class") == "xtick")
    assert xtick_y + 11 < float(named["xunit"].get("y", 0)) <= height  # below the tick labels, inside


def test_an_axis_reads_its_values_in_one_unit() -> None:
    svg = ET.fromstring(bar_chart(["a", "b"], {"accepted": [14_000.0, 2_000.0]}, title="t", unit="messages"))
    assert [t.text for t in svg.iter(f"{SVG}text") if t.get("class") == "ytick"] == ["0", "5k", "10k", "15k"]

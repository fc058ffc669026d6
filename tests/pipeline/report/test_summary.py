"""The printed summary and the HTML page, from PipelineResults built by hand (no Spark):
what a reader sees must come from the full data, read as times, and fit the page."""

from __future__ import annotations

import itertools
import math
import re
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import pytest

from edgeq.sync.pipeline.report.charts import bar_chart, line_chart, text_width
from edgeq.sync.pipeline.report.results import COLUMNS, REPORTS, PipelineResult
from edgeq.sync.pipeline.report.summary import html_page, summary_text, write_html
from tests.pipeline.reports import STAMP, T0, documented_schema, sample, throughput

SVG = "{http://www.w3.org/2000/svg}"


def charts(page: str) -> dict[str, ET.Element]:
    """Each inline SVG chart of the page, by its title."""
    found = {}
    for text in re.findall(r"<svg.*?</svg>", page, flags=re.S):
        svg = ET.fromstring(text)
        title = svg.find(f"{SVG}title")
        assert title is not None and title.text
        found[title.text] = svg
    return found


def chart_for(page: str, word: str) -> ET.Element:
    (svg,) = [svg for title, svg in charts(page).items() if word in title]
    return svg


def bars(svg: ET.Element) -> list[dict[str, float]]:
    return [{k: float(r.get(k, 0)) for k in ("x", "y", "width", "height")}
            for r in svg.iter(f"{SVG}rect") if r.get("class") == "bar"]


def test_tiles_and_the_summary_read_the_totals_not_the_collected_rows() -> None:
    """The bug: tiles summed the first 10,000 rows (42,682 accepted shown for 63,211)."""
    result = sample(devices=3)
    result.totals.update(accepted=63_211, expired=1_234, journal_rows=2_000_000, delivered=61_000)
    result.counts["audit_devices"] = 14_791  # the rows hold 3 of them
    page, text = html_page(result), summary_text(result)
    tiles = dict(re.findall(r'<div class="tile[^"]*"><b>([^<]*)</b><span>([^<]*)</span>', page))
    assert tiles["63,211"] == "messages accepted" and tiles["1,234"] == "messages expired"
    assert tiles["2,000,000"] == "journal entries" and tiles["61,000"] == "messages delivered"
    assert str(sum(r["accepted"] for r in result.rows["audit_devices"])) not in tiles
    assert re.search(r"messages accepted +63,211", text)
    assert ("14,788 more row(s) in the Parquet report" in page
            and "14,788 more row(s) in the Parquet report" in text)


def test_stamps_and_instants_read_as_utc_times_never_as_big_numbers() -> None:
    result = sample(duplicates=1, gaps=1)
    page, text = html_page(result).replace("<wbr>", ""), summary_text(result)  # (<wbr>: a place to wrap)
    for shown in (page, text):
        assert "2026-11-22T20:22:20.077Z" in shown  # first_stamp: the creation time the stamp encodes
        assert ("1,795,378,940,077,000" not in shown
                and "1795378940077000" not in shown.replace(f".{STAMP}", ""))
        assert "2025-11-21T22:00Z" in shown  # throughput's hour
        assert "2025-11-21T22:01:00.000Z" in shown  # a duplicate's first acceptance
        assert not re.search(r"\b1,76\d,\d{3},\d{3},\d{3}\b", shown)  # no epoch ms anywhere
    assert "2025-11-22T01:00:00.000Z" in page  # a device's last contact


@pytest.mark.parametrize("hours", [1, 2])
def test_a_single_hour_is_a_readable_chart_not_one_full_width_bar(hours: int) -> None:
    page = html_page(sample(hours=hours))
    svg = chart_for(page, "entries per hour")
    width = float(svg.get("viewBox", "").split()[2])
    drawn = bars(svg)
    assert len(drawn) == 3 * hours  # accepted, delivered, expired: three series per hour
    assert all(8 <= b["width"] <= 40 for b in drawn)  # a bar, not a wall (it was 80% of the chart)
    assert sum(b["width"] for b in drawn) < width / 3
    labels = [t.text for t in svg.iter(f"{SVG}text") if t.get("class") == "xtick"]
    assert labels == [f"2025-11-21T{22 + h}:00Z" for h in range(hours)]


def test_throughput_series_stand_side_by_side_not_stacked() -> None:
    result = sample(hours=5)
    svg = chart_for(html_page(result), "entries per hour")
    drawn = bars(svg)
    bottoms = {round(b["y"] + b["height"], 1) for b in drawn}
    assert len(bottoms) == 1  # every bar stands on the axis: none is stacked on another
    hour0 = [r for r in result.rows["throughput_hourly"] if r["hour_ms"] == T0]
    want = [sum(r[k] for r in hour0) for k in ("accepted", "delivered", "expired_entries")]
    first = sorted(drawn, key=lambda b: b["x"])[:3]
    assert [b["x"] for b in first] == sorted(b["x"] for b in first)
    heights = [b["height"] for b in first]
    assert heights[0] / want[0] == pytest.approx(heights[1] / want[1], rel=0.02)
    assert heights[0] / want[0] == pytest.approx(heights[2] / want[2], rel=0.05)
    legend = [t.text for t in svg.iter(f"{SVG}text") if t.get("class") == "legend"]
    assert legend == ["accepted", "delivered", "expired"]


def test_many_hours_are_drawn_as_lines() -> None:
    result = sample(hours=3)
    result.rows["throughput_hourly"] = throughput(24 * 5)
    svg = chart_for(html_page(result), "entries per hour")
    assert not bars(svg) and len(list(svg.iter(f"{SVG}polyline"))) == 3


def _extent(text: ET.Element) -> tuple[float, float, float, float]:
    """A text element's box (x0, y0, x1, y1), from its anchor, rotation and estimated width."""
    x, y, size = float(text.get("x", 0)), float(text.get("y", 0)), float(text.get("font-size", 11))
    w = text_width(text.text or "", size)
    anchor = text.get("text-anchor", "start")
    if "rotate(-45" in text.get("transform", ""):  # anchored at its end, running up to it from the lower left
        reach, rise = w * math.sqrt(0.5), size * math.sqrt(0.5)  # along the baseline, and the glyphs' height
        return x - reach - rise, y - rise, x + rise, y + reach + rise
    if "rotate(-90" in text.get("transform", ""):
        return x - size, y - w / 2, x + size / 2, y + w / 2
    x0 = x - w if anchor == "end" else x - w / 2 if anchor == "middle" else x
    return x0, y - size, x0 + w, y + size / 3


@pytest.mark.parametrize("labels", [
    ["< 0", "0", "1ms", "2ms", "5ms", "10ms", "20ms", "50ms", "100ms", "200ms", "500ms", "1s", "2s", "5s",
     "10s", "30s", "1min", "2min", "5min", "10min", "30min", "1h", "6h", "≥ 1d"],
    [f"2025-11-{21 + h // 24}T{h % 24:02d}:00Z" for h in range(30)],
    ["2025-11-21"],
    ["a-very-long-queue-name-for-one-category-only", "b"],
])
def test_axis_labels_stay_inside_the_chart(labels: list[str]) -> None:
    for svg_text in (bar_chart(labels, {"accepted": [5.0] * len(labels), "delivered": [3.0] * len(labels)},
                               title="t", unit="messages"),
                     line_chart(labels, {"x": [1.0] * len(labels)}, title="t", unit="u")):
        svg = ET.fromstring(svg_text)
        _, _, width, height = (float(v) for v in svg.get("viewBox", "").split())
        for text in svg.iter(f"{SVG}text"):
            x0, y0, x1, y1 = _extent(text)
            assert x0 >= 0 and x1 <= width and y0 >= 0 and y1 <= height, (
                text.text, (x0, y0, x1, y1), width, height)


def test_an_audit_failure_is_shown_in_red_with_the_uids() -> None:
    result = sample(duplicates=2, gaps=1)
    page, text = html_page(result), summary_text(result)
    alert = re.search(r'<div class="alert" role="alert">(.*?)</table></div>(?:<p[^>]*>[^<]*</p>)?</div>',
                      page, re.S)
    assert alert is not None
    for row in result.rows["audit_duplicates"] + result.rows["audit_gaps"]:
        assert row["uid"] in alert.group(1) and row["uid"] in text
    assert "2 uid(s) accepted more than once, 1 gap(s)" in alert.group(1)
    assert re.search(r"\.alert\{[^}]*color:#b00020", page)  # red
    assert '<div class="tile bad"><b>ATTENTION</b>' in page
    assert "ATTENTION: 2 uid(s) accepted more than once, 1 gap(s)" in text
    fine = html_page(sample())
    assert 'class="alert"' not in fine and '<div class="tile ok"><b>OK</b>' in fine
    assert "OK: no uid accepted twice, no gap" in summary_text(sample())


def test_the_uncorrected_latency_and_each_devices_clock_offset_are_shown() -> None:
    result = sample(devices=4)
    page, text = html_page(result), summary_text(result)
    latency = page[page.index("<h2>Latency</h2>"):page.index("<h2>Devices</h2>")]
    assert "<th class=\"n\">uncorrected</th>" in latency
    assert re.search(r"<td class=\"\">DEV3</td><td class=\"\">ORDERS</td><td class=\"n\">100</td>"
                     r"<td class=\"n\">100</td>", latency)  # DEV3 reports no offset: all 100 uncorrected
    devices = page[page.index("<h2>Devices</h2>"):page.index("<h2>Expiries</h2>")]
    for offset in ("1.50 s", "-700 ms", "0 ms", "1.5 min"):  # DEV1..DEV4's offsets
        assert f'<td class="n">{offset}</td>' in devices and offset in text
    offsets = chart_for(page, "clock offset")
    legend = [t.text for t in offsets.iter(f"{SVG}text") if t.get("class") == "legend"]
    assert (sorted(legend) == ["DEV1", "DEV2", "DEV3", "DEV4"]
            and len(list(offsets.iter(f"{SVG}polyline"))) == 4)
    ticks = [t.text for t in offsets.iter(f"{SVG}text") if t.get("class") == "ytick"]
    assert ticks[0].startswith("-")  # DEV2 is behind: the axis goes below zero


def test_end_to_end_latency_is_shown_beside_creation_to_confirm() -> None:
    page, text = html_page(sample()), summary_text(sample())
    assert "to delivery p50" in page and '<td class="n">45.00 s</td>' in page  # delivered_p50_ms
    assert "e2e p50" in text and "45.00 s" in text
    assert re.search(r"end-to-end p50 / p99 \(creation to delivery\) +45.00 s / 1.5 min", text)


def test_tables_have_a_fixed_layout_and_wrap_inside_their_column() -> None:
    page = html_page(sample(duplicates=1))
    assert (re.search(r"table\{[^}]*table-layout:fixed", page)
            and re.search(r"td\{[^}]*overflow-wrap:anywhere", page))
    # a wider one scrolls in its box
    assert page.count("<table>") == page.count('<div class="scroll"><table>')


def test_the_page_works_offline() -> None:
    page = html_page(sample(duplicates=1, gaps=1))
    assert page.startswith("<!doctype html>")
    assert not re.search(r"https?://(?!www\.w3\.org/2000/svg\")", page)  # only the SVG namespace
    assert "<script" not in page and "<link" not in page and "@import" not in page and "url(" not in page
    assert len(charts(page)) == 4  # latency, clock offsets, expiries, throughput: all inline SVG


def test_an_empty_journal_renders(tmp_path: Path) -> None:
    empty = PipelineResult(journal="j", out="o")
    page = write_html(empty, tmp_path / "r" / "report.html").read_text("utf-8")
    assert "No rows." in page and "<svg" not in page
    # no figures: neither OK nor red
    assert '<div class="tile "><b>-</b><span>exactly-once audit</span>' in page
    assert "not in this result" in page and "OK" not in page
    assert "journal entries" in summary_text(empty)


@pytest.mark.parametrize("hours", [40, 24 * 20])
def test_days_of_throughput_are_labelled_on_round_hours_without_overlap(hours: int) -> None:
    result = replace(sample(), rows={**sample().rows, "throughput_hourly": throughput(hours)})
    svg = chart_for(html_page(result), "entries per hour")
    ticks = [t for t in svg.iter(f"{SVG}text") if t.get("class") == "xtick"]
    assert len(ticks) >= 3
    for a, b in itertools.pairwise(ticks):
        gap = float(b.get("x", 0)) - float(a.get("x", 0))
        assert gap >= (15 if "rotate" in b.get("transform", "") else text_width(b.text or "") + 8)
    step = {40: 6, 24 * 20: 48}[hours]  # labels on round hours: every 6 h over 40 h, every 2 days over 20
    assert all(int((t.text or "")[11:13]) % min(step, 24) == 0 for t in ticks)
    drawn = bars(svg) if hours <= 48 else list(svg.iter(f"{SVG}polyline"))
    assert len(drawn) == (3 * hours if hours <= 48 else 3)


def test_the_documented_schema_names_every_report_and_column_in_order() -> None:
    tables = documented_schema()
    assert [name for name in tables if name != "journal"] == list(REPORTS)
    for name, columns in COLUMNS.items():
        assert tuple(column for column, _, _ in tables[name]) == columns, name


def test_a_chart_drawn_from_part_of_a_report_says_so() -> None:
    result = sample(hours=2)
    result.counts["throughput_hourly"] = 250_000  # the rows hold the first 4
    page = html_page(result)
    assert "Drawn from the first 4 of the 250,000 rows of <code>throughput_hourly</code>" in page
    assert "rows of <code>expiry_daily</code>" not in page  # that one is whole

"""The report page in a real browser: Debian's chromium, headless, driven by selenium through
its chromedriver. What a person sees: the tiles' figures, nothing wider than its box, every
axis label inside its chart, the audit's alert; and a screenshot to look at.

chromium and chromium-driver come from apt (``make browser`` installs them); without them
these tests fail, saying so, rather than skip."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

from edgeq.sync.pipeline.export.exporter import export_journal
from edgeq.sync.pipeline.report.results import REPORTS, PipelineResult
from edgeq.sync.pipeline.report.summary import write_html
from tests.pipeline.conftest import HomeJournal
from tests.pipeline.reports import documented_schema, sample, throughput

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars")


def require_browser(*paths: str) -> None:
    """Fail (never skip) when chromium or its driver is missing, saying what to install."""
    missing = [p for p in paths if not Path(p).exists()]
    if missing:
        pytest.fail(f"{', '.join(missing)} not found: the report's browser tests need Debian's chromium and "
                    "chromium-driver (make browser, or apt-get install chromium chromium-driver)",
                    pytrace=False)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[webdriver.Chrome]:
    require_browser(CHROMIUM, CHROMEDRIVER)
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*FLAGS, f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def real_run(
    spark: SparkSession, home_journal: HomeJournal, tmp_path_factory: pytest.TempPathFactory
) -> PipelineResult:
    """A real small run: the scenario's home server, exported, through the Spark job."""
    from edgeq.sync.pipeline.job.runner import run_pipeline

    root = tmp_path_factory.mktemp("browser-run")
    export_journal(home_journal.db, root / "journal")
    return run_pipeline(spark, root / "journal", root / "reports")


def open_page(driver: webdriver.Chrome, result: PipelineResult, path: Path, width: int) -> None:
    driver.set_window_size(width, 1000)
    driver.get(write_html(result, path).as_uri())


#: What overflows its box horizontally: the page, tables, tiles; and (``arguments[0]``: unless the
#: screen is too narrow, when they may scroll sideways) the boxes holding tables and charts.
_OVERFLOWING = """
const out = [];
const wide = (el, what) => {
  if (el.scrollWidth > el.clientWidth + 1) out.push([what, el.scrollWidth, el.clientWidth]);
};
wide(document.documentElement, 'page');
document.querySelectorAll('table, .tile').forEach(
  (el, i) => wide(el, el.tagName + '.' + el.className + '#' + i));
if (!arguments[0]) document.querySelectorAll('div.scroll').forEach((el, i) => wide(el, 'scroll box #' + i));
return out;
"""

#: Every text of every chart whose box (getBBox, through its transform) leaves the viewBox.
_OUTSIDE_VIEWBOX = """
const out = [];
document.querySelectorAll('svg.chart').forEach(svg => {
  const vb = svg.viewBox.baseVal;
  const toSvg = svg.getScreenCTM().inverse();
  svg.querySelectorAll('text').forEach(t => {
    const b = t.getBBox(), m = toSvg.multiply(t.getScreenCTM());
    const corners = [[b.x, b.y], [b.x + b.width, b.y],
                     [b.x, b.y + b.height], [b.x + b.width, b.y + b.height]];
    for (const [x, y] of corners) {
      const p = new DOMPoint(x, y).matrixTransform(m);
      if (p.x < vb.x - 0.5 || p.y < vb.y - 0.5 ||
          p.x > vb.x + vb.width + 0.5 || p.y > vb.y + vb.height + 0.5) {
        out.push([svg.getAttribute('aria-label'), t.textContent, p.x, p.y, vb.width, vb.height]); break;
      }
    }
  });
});
return out;
"""


def check_layout(driver: webdriver.Chrome, *, narrow: bool = False) -> None:
    assert driver.execute_script(_OVERFLOWING, narrow) == []
    assert driver.execute_script(_OUTSIDE_VIEWBOX) == []
    charts = driver.find_elements(By.CSS_SELECTOR, "svg.chart")
    assert charts and all(c.is_displayed() and c.size["height"] > 100 for c in charts)


def tiles(driver: webdriver.Chrome) -> dict[str, str]:
    found: dict[str, str] = {}
    for tile in driver.find_elements(By.CSS_SELECTOR, ".tile"):
        found[tile.find_element(By.TAG_NAME, "span").text] = tile.find_element(By.TAG_NAME, "b").text
    return found


def screenshot(driver: webdriver.Chrome, path: Path, width: int) -> Path:
    """The whole page as a PNG."""
    height = int(driver.execute_script("return document.documentElement.scrollHeight"))
    driver.set_window_size(width, height)
    assert driver.save_screenshot(str(path))
    assert path.stat().st_size > 50_000  # a page with charts, not a blank
    return path


def _figure(totals: dict[str, Any], key: str) -> str:
    return f"{int(totals[key]):,}"


def test_a_real_runs_report_reads_right_in_chromium(
    browser: webdriver.Chrome, real_run: PipelineResult, tmp_path: Path
) -> None:
    open_page(browser, real_run, tmp_path / "report.html", 1280)
    shown, t = tiles(browser), real_run.totals
    assert shown["journal entries"] == _figure(t, "journal_rows") == f"{real_run.journal_rows:,}"
    assert shown["messages accepted"] == _figure(t, "accepted")
    assert shown["messages delivered"] == _figure(t, "delivered")
    assert shown["messages expired"] == _figure(t, "expired")
    # the scenario's late resend and non-assured push: the audit fails, in red, with the uids
    assert shown["exactly-once audit"] == "ATTENTION"
    alert = browser.find_element(By.CSS_SELECTOR, ".alert")
    assert alert.value_of_css_property("color") in ("rgba(176, 0, 32, 1)", "rgb(176, 0, 32)")
    for row in real_run.rows["audit_duplicates"] + real_run.rows["audit_gaps"]:
        assert row["uid"] in alert.text
    text = browser.find_element(By.TAG_NAME, "body").text
    assert "2025-11-21T22:00Z" in text  # the first hour, as a time
    check_layout(browser)
    # docs/images/pipeline-report.png is the top of this page (a 1100 px wide window)
    screenshot(browser, tmp_path / "pipeline-report.png", 1280)


def _type(arrow: Any) -> str:
    """A Parquet column's type as docs/pipeline.md names it."""
    text = str(arrow)
    if text.startswith("list<"):
        return f"list<{_type(arrow.value_type)}>"
    return {"date32[day]": "date32"}.get(text, "timestamp" if text.startswith("timestamp") else text)


def test_the_real_runs_parquet_reports_have_the_documented_schema(real_run: PipelineResult) -> None:
    """The page reads the reports by these names; so do people, from docs/pipeline.md."""
    import pyarrow.parquet as pq

    documented = documented_schema()
    for name in REPORTS:
        schema = pq.read_schema(next((Path(real_run.out) / name).glob("*.parquet")))
        assert [(f.name, _type(f.type)) for f in schema] == [(c, t) for c, t, _ in documented[name]], name


@pytest.mark.parametrize("width", [1280, 760, 420])
@pytest.mark.parametrize("shape", ["one hour", "a busy fleet"])
def test_the_page_fits_at_any_width(
    browser: webdriver.Chrome, tmp_path: Path, width: int, shape: str
) -> None:
    """A single hour (once one full-width bar) and a fleet of 40 devices over 3 days."""
    if shape == "one hour":
        result = sample(hours=1, devices=2, duplicates=1)
    else:
        result = sample(hours=3, devices=40, duplicates=30, gaps=12)
        result.rows["throughput_hourly"] = throughput(
            72, ("ORDERS", "TELEMETRY", "A-RATHER-LONG-QUEUE-NAME.X"))
    open_page(browser, result, tmp_path / "report.html", width)
    assert tiles(browser)["messages accepted"] == f"{result.totals['accepted']:,}"
    check_layout(browser, narrow=width < 600)
    if width == 1280:
        screenshot(browser, tmp_path / f"{shape.replace(' ', '-')}.png", width)


def test_without_chromium_the_tests_fail_saying_what_to_install(tmp_path: Path) -> None:
    with pytest.raises(pytest.fail.Exception, match="chromium-driver") as failed:
        require_browser(str(tmp_path / "chromium"), CHROMEDRIVER)
    assert str(tmp_path / "chromium") in str(failed.value)

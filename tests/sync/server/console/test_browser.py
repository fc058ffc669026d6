"""The operator console in a real browser: Debian's chromium, headless, driven by selenium,
against a real `edgeq serve --console` subprocess while real devices (SyncAgents over
loopback) push to it. What a person sees: the sign-in form first, the fleet's rows, a
queue depth that changes after a sync and a refresh, the charts; and screenshots.

chromium and chromium-driver come from apt (``make browser`` installs them); without them
these tests fail, saying so, rather than skip."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.wait import WebDriverWait

from edgeq import Message, QueueManager
from edgeq.sync.agent.agent import SyncAgent
from edgeq.sync.server.console.auth import set_password
from tests.pipeline.report.test_browser import CHROMEDRIVER, CHROMIUM, FLAGS, require_browser
from tests.sync.conftest import edgeq_serve, free_port

PASSWORD = "operator-pass-1"


@contextmanager
def chromium(profile: Path) -> Iterator[webdriver.Chrome]:
    """Headless chromium (its profile in ``profile``), quit on exit."""
    require_browser(CHROMIUM, CHROMEDRIVER)
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*FLAGS, f"--user-data-dir={profile}", "--window-size=1280,1400"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[webdriver.Chrome]:
    with chromium(tmp_path / "chromium-profile") as driver:
        yield driver


def _home(tmp_path: Path) -> Path:
    home = tmp_path / "home.db"
    with QueueManager(home, name="HOME") as qm:
        qm.define_queue("ORDERS")
    set_password(home, PASSWORD)
    return home


def _push(tmp_path: Path, device: str, url: str, n: int) -> None:
    """``device`` (its own store, a real agent over loopback) pushes ``n`` messages."""
    with QueueManager(tmp_path / f"{device}.db", name=device) as qm:
        if "ORDERS" not in qm.queue_names():
            qm.define_remote_queue("ORDERS", target_qmgr="HOME")
        for i in range(n):
            qm.put("ORDERS", Message(f"{device}-{i}".encode()))
        agent = SyncAgent(qm, url)
        try:
            report = agent.push_once()
        finally:
            agent.close()
    assert report.ok and report.transmitted == n, report


def _cells(driver: webdriver.Chrome, table: str, key: str) -> dict[str, list[str]]:
    rows = driver.find_elements(By.CSS_SELECTOR, f"#{table} tr[data-{key}]")
    return {r.get_attribute(f"data-{key}") or "": [c.text for c in r.find_elements(By.TAG_NAME, "td")]
            for r in rows}


def _click_and_wait(driver: webdriver.Chrome, button: WebElement) -> None:
    """Click ``button`` and wait until the page it submits to has replaced this one: a
    click returns as soon as the event is dispatched, before the browser navigates.

    The old page is marked on its ``window`` (a new page has a window of its own), not
    watched through an element: Chromium may answer a question about a node of a page
    being replaced with an error other than "stale" ("does not belong to the document").
    While the page changes, a script may fail to run: that only means "not yet"."""
    driver.execute_script("window.edgeqOldPage = true")
    button.click()
    WebDriverWait(driver, 30, ignored_exceptions=(WebDriverException,)).until(
        lambda d: d.execute_script(
            "return window.edgeqOldPage === undefined && document.readyState") == "complete")


def _sign_in(driver: webdriver.Chrome, url: str, password: str, user: str = "operator") -> None:
    driver.get(url + "/console")
    assert driver.current_url.endswith("/console/login")  # no session: the sign-in form, nothing else
    driver.find_element(By.ID, "user").send_keys(user)
    driver.find_element(By.ID, "password").send_keys(password)
    _click_and_wait(driver, driver.find_element(By.ID, "sign-in"))


def test_an_operator_watches_the_fleet_sync_in_chromium(browser: webdriver.Chrome, tmp_path: Path) -> None:
    home, port, console_port = _home(tmp_path), free_port(), free_port()
    url, console = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{console_port}"
    with edgeq_serve(home, port, "--console", "--console-port", str(console_port)):
        _push(tmp_path, "DEV1", url, 5)
        _sign_in(browser, console, PASSWORD)
        assert browser.current_url.endswith("/console")
        devices = _cells(browser, "devices", "device")
        assert list(devices) == ["DEV1"]
        assert devices["DEV1"][4] == "5"  # pushes
        assert _cells(browser, "queues", "queue")["ORDERS"][2] == "5"  # depth
        assert devices["DEV1"][7].startswith("0 (")  # the backlog it reported: all pushed
        assert _cells(browser, "queues", "queue")["ORDERS"][6] == "no estimate: nothing went out in 15 min"
        assert browser.find_element(By.ID, "dead-lettered").text == "none"
        for chart in ("chart-throughput", "chart-expiries"):
            svg = browser.find_element(By.ID, chart)
            assert svg.tag_name == "svg" and svg.size["width"] > 300
            assert svg.find_element(By.TAG_NAME, "polyline").get_attribute("points")
        assert "5 in the last hour" in browser.page_source
        browser.save_screenshot(str(tmp_path / "console-before.png"))

        _push(tmp_path, "DEV2", url, 3)
        browser.refresh()
        devices = _cells(browser, "devices", "device")
        assert sorted(devices) == ["DEV1", "DEV2"] and devices["DEV2"][4] == "3"
        assert _cells(browser, "queues", "queue")["ORDERS"][2] == "8"
        browser.save_screenshot(str(tmp_path / "console.png"))
        assert (tmp_path / "console.png").stat().st_size > 10_000

        _click_and_wait(browser, browser.find_element(By.ID, "sign-out"))
        assert browser.current_url.endswith("/console/login")
        browser.get(console + "/console")
        assert browser.current_url.endswith("/console/login")  # signed out: refused again
        # Last: a wrong password makes this address wait before its next try (issue 29).
        _sign_in(browser, console, "not-the-password")
        assert "Wrong account name or password" in browser.find_element(By.ID, "error").text
        assert not browser.find_elements(By.ID, "devices")


def test_the_pages_style_applies_under_the_consoles_content_security_policy(
    browser: webdriver.Chrome, tmp_path: Path
) -> None:
    """The console's CSP allows no inline style but its own, by hash (issue 29): in a real
    browser the style still applies (a blocked one leaves a table header transparent)."""
    home, port, console_port = _home(tmp_path), free_port(), free_port()
    with edgeq_serve(home, port, "--console", "--console-port", str(console_port)):
        _sign_in(browser, f"http://127.0.0.1:{console_port}", PASSWORD)
        assert browser.current_url.endswith("/console")
        header = browser.find_element(By.CSS_SELECTOR, "#queues th")
        assert header.value_of_css_property("background-color") == "rgba(243, 243, 243, 1)"

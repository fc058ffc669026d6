"""The console's drill-down pages in Chromium, against one real ``edgeq serve --console`` (devices pushing
over loopback) and one browser for the module: fleet -> device -> queue -> message, paging, the journal's
range switch, the admin requests' filters, markup from devices and hostile URLs shown as text, and an
encrypted queue's data never shown."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.select import Select
from selenium.webdriver.support.wait import WebDriverWait

from edgeq import Int64, Message, QueueManager
from edgeq.admin.wire import AdminRequest
from edgeq.clock import system_clock
from edgeq.crypto import StoreKeys
from edgeq.store.devices import DeviceTx
from edgeq.store.journal import JournalTx, entry_row
from edgeq.store.opening import connect
from edgeq.sync import protocol as p
from edgeq.sync.agent.agent import SyncAgent
from edgeq.sync.bridges.book import define_bridge
from edgeq.sync.server.admin.records import AdminRecords
from edgeq.sync.server.console.auth import set_password
from edgeq.sync.server.console.detail import PAGE
from edgeq.types import CHECK_POINTS
from tests.sync.conftest import ServedConsole, edgeq_serve_console
from tests.sync.server.console.test_browser import PASSWORD, _cells, _click_and_wait, _sign_in, chromium

#: markup a device may send: shown as text, never as an element (no element gets this id)
MARKUP = '<b id="pwn">bold</b><script>document.title="pwned"</script>'
#: a name no device or queue can have, in a URL (no "/": that would leave the page's route)
HOSTILE = '<img id="pwn" src="x">'
SECRET = b"the launch code is 0000"
PUSHED = PAGE + 5  # DEV1's pushes to ORDERS: a page of messages and a few more
REQUESTS = PAGE + 3  # admin requests sent to DEV1 (and one to DEV2)
DAY_MS = 86_400_000
MANY = PAGE + 5  # more than a page: devices, queues, refusals, parked events, bridges
#: FLEET.Q00's expiries in the last hour by check point (this server's, then DEV1's reports)
POINTS = {"add": 3, "get": 2, "activate": 1, "delete": 1, "depth": 4}
REPORTED = {"browse": 2}


@dataclass
class Site:
    served: ServedConsole
    browser: webdriver.Chrome
    shots: Path

    def open(self, path: str) -> None:
        self.browser.get(self.served.console_url + path)

    def follow(self, css: str) -> None:
        _click_and_wait(self.browser, self.browser.find_element(By.CSS_SELECTOR, css))

    def keys(self, css: str, key: str) -> list[str]:
        """The ``data-<key>`` of the rows ``css`` selects, in page order."""
        rows = self.browser.find_elements(By.CSS_SELECTOR, css)
        return [r.get_attribute(f"data-{key}") or "" for r in rows]

    def shot(self, name: str) -> None:
        """A screenshot of the whole page (docs/images/ holds copies), at the window's width."""
        self.browser.set_window_size(1280, 300)  # the page's height, not the window's
        height, chrome = self.browser.execute_script(
            "return [document.documentElement.scrollHeight, window.outerHeight - window.innerHeight]")
        self.browser.set_window_size(1280, int(height) + int(chrome))
        assert self.browser.save_screenshot(str(self.shots / name))
        self.browser.set_window_size(1280, 1400)

    def no_markup(self) -> None:
        """The page holds no element a device's markup made, and ran no script."""
        assert not self.browser.find_elements(By.ID, "pwn") and self.browser.title != "pwned"


def _push(where: Path, url: str) -> None:
    """DEV1 pushes :data:`PUSHED` messages (data and a field carrying markup) through a real agent."""
    with QueueManager(where / "DEV1.db", name="DEV1") as qm:
        qm.define_remote_queue("ORDERS", target_qmgr="HOME")
        qm.put_many("ORDERS", [Message(f"order {i} {MARKUP}".encode(), fields={"note": MARKUP, "n": i})
                               for i in range(PUSHED)])
        agent = SyncAgent(qm, url)
        try:
            assert agent.push_once().transmitted == PUSHED
        finally:
            agent.close()


def _fill(db: Path, keys: StoreKeys) -> None:
    """The home store: ORDERS, an encrypted queue, admin requests to DEV1 and DEV2, and journal rows of
    two days ago (outside the last hour and day, inside the week)."""
    with QueueManager(db, name="HOME", keys=keys) as qm:
        qm.define_queue("ORDERS")
        qm.define_queue("SECRETS", encryption="aes-256-gcm")
        qm.put("SECRETS", Message(SECRET, fields={"pin": "1234"}))
        for i in range(MANY):
            qm.define_queue(f"FLEET.Q{i:02}")
    (db.parent / "fail").touch()
    with QueueManager(db, name="HOME", keys=keys, rule_retry_limit=1) as qm:  # each failure parked at once
        qm.define_queue("RULED", rules=[("tests.rulekit:Failing", {"switch": str(db.parent / "fail")})])
        qm.put_many("RULED", [Message(b"r", expiry=Int64(1))] * MANY)
    key, records = Ed25519PrivateKey.generate(), AdminRecords(str(db))
    try:
        for i, device in enumerate(["DEV1"] * REQUESTS + ["DEV2"]):
            request = AdminRequest.create("inquire-all", device=device, reply_qmgr="HOME",
                                          created_ms=system_clock() - 60_000 + i, key_id="ops").sign(key)
            records.add(request, request.to_bytes())
    finally:
        records.close()
    old = system_clock() - 2 * DAY_MS
    now = system_clock()
    expired = [(point, None) for point, n in POINTS.items() for _ in range(n)]
    expired += [(point, "DEV1") for point, n in REPORTED.items() for _ in range(n)]
    with closing(connect(db)) as conn:
        JournalTx(conn).add([entry_row("accepted", "server", old + i, "ORDERS", f"OLD:a1.{i}", "OLD:a1")
                             for i in range(7)])
        JournalTx(conn).add([entry_row("expired", "server", now - 60_000 + i, "FLEET.Q00", f"HOME:a1.{i}",
                                       "HOME:a1", check_point=point, device=device)
                             for i, (point, device) in enumerate(expired)])
        JournalTx(conn).add([entry_row("expired", "server", old, "FLEET.Q00", "HOME:a1.99", "HOME:a1",
                                       check_point="add")])  # in the week, not the day
        JournalTx(conn).add([entry_row("expired", "server", now - 30_000 + i, "FLEET.Q01", f"DEV2:b1.{i}",
                                       "DEV2:b1", check_point="get", device="DEV2") for i in range(MANY)])
        devices = DeviceTx(conn)
        for i in range(MANY):
            devices.refused(f"FLEET-{i:02}", "ORDERS", {"not-allowed": (i + 1, MARKUP)}, now - i)
        conn.commit()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    where = tmp_path_factory.mktemp("pages")
    keys, key_file, db = StoreKeys.generate(), where / "store.key", where / "home.db"
    keys.save(key_file)
    _fill(db, keys)
    set_password(db, PASSWORD)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("EDGEQ_STORE_KEY_FILE", str(key_file))
        with edgeq_serve_console(db) as served, chromium(where / "profile") as browser, \
                httpx.Client(timeout=10) as http:
            _push(where, served.url)
            hello = p.encode_body({"type": "hello", "qmgr": "DEV2", "now_ms": system_clock(),
                                   "agent": MARKUP})
            assert http.post(served.url + p.PATH_HELLO, content=hello,
                             headers={"content-type": p.CONTENT_TYPE}).status_code == 200
            for i in range(MANY):
                hello = p.encode_body({"type": "hello", "qmgr": f"FLEET-{i:02}", "now_ms": system_clock()})
                assert http.post(served.url + p.PATH_HELLO, content=hello,
                                 headers={"content-type": p.CONTENT_TYPE}).status_code == 200
            _sign_in(browser, served.console_url, PASSWORD)
            yield Site(served, browser, where)


def _facts(site: Site, table: str) -> dict[str, str]:
    rows = site.browser.find_elements(By.CSS_SELECTOR, f"#{table} tr")
    return {r.find_element(By.TAG_NAME, "th").text: r.find_element(By.TAG_NAME, "td").text for r in rows}


def _ticks(site: Site, kind: str) -> list[str]:
    """The labels on the queue chart's axis (``xtick``: times, ``ytick``: values)."""
    return [t.text for t in site.browser.find_elements(By.CSS_SELECTOR, f"#chart-queue .{kind}")]


def test_an_operator_follows_the_fleet_to_a_device_its_queue_and_a_message(site: Site) -> None:
    site.open("/console")
    site.follow('#devices tr[data-device="DEV1"] a')
    assert site.browser.current_url.endswith("/console/devices/DEV1")
    facts = _facts(site, "device")
    assert facts["Pushes (messages accepted)"] == str(PUSHED) and facts["Status"] == "heard from"
    assert facts["Last seen"].endswith("ago") and facts["Clock offset (ms)"] != "—"
    assert re.fullmatch(r"0 \(\d+ s ago\)", facts["Backlog reported (waiting on it to be pushed)"])
    assert _cells(site.browser, "device-queues", "queue")["ORDERS"][:4] == ["ORDERS", str(PUSHED), "0", "0"]
    site.shot("console-device.png")

    site.follow('#device-queues tr[data-queue="ORDERS"] a')
    assert site.browser.current_url.endswith("/console/queues/ORDERS")
    facts = _facts(site, "queue")
    assert facts["Depth"] == str(PUSHED) and int(facts["Bytes"]) > 0 and facts["Encryption at rest"] == "none"
    assert facts["Out, last 15 min"] == "0.00 / min" and facts["Expiry interval"] == "none"
    assert facts["Drain estimate (depth at that rate)"] == "no estimate: nothing went out in 15 min"
    assert re.fullmatch(r"\d+ (s|min)", facts["Oldest message (age since created)"])
    assert _ticks(site, "xtick") and all(re.fullmatch(r"\d\d:\d[05]", t) for t in _ticks(site, "xtick"))
    assert _ticks(site, "ytick")[0] == "0" and len(_ticks(site, "ytick")) >= 3  # values at round steps
    in_hour = site.browser.find_element(By.CSS_SELECTOR, '#counts td[data-kind="accepted"]').text
    assert in_hour == str(PUSHED)  # the journal rows of two days ago are not in the last hour
    rows = site.browser.find_elements(By.CSS_SELECTOR, "#messages tr.message")
    assert len(rows) == PAGE
    first = [c.text for c in rows[0].find_elements(By.TAG_NAME, "td")]
    assert first[1] == "ready" and first[2] == "4" and first[4] == "never"
    assert "note = " + MARKUP in first[3] and first[6].startswith("order 0 <b id=")  # as text
    site.no_markup()
    site.shot("console-queue.png")

    uid = rows[0].get_attribute("data-uid")
    site.follow("#messages tr.message a")
    assert site.browser.current_url.endswith(f"/messages/{quote(str(uid), safe='')}")
    assert site.browser.find_element(By.ID, "uid").text == uid
    assert site.browser.find_element(By.ID, "data").text == f"order 0 {MARKUP}"
    site.no_markup()
    site.shot("console-message.png")
    site.follow("#to-queue")
    assert site.browser.current_url.endswith("/console/queues/ORDERS")


def _points(site: Site, chart: str) -> list[float]:
    """The values of a chart's points, from their tooltips ("03:05: 25 accepted")."""
    titles = site.browser.find_elements(By.CSS_SELECTOR, f"#{chart} circle title")
    return [float(t.get_attribute("textContent").split(": ")[1].split()[0].replace(",", "")) for t in titles]


def test_a_devices_health_is_charted_from_the_journal_by_range(site: Site) -> None:
    with closing(connect(site.shots / "home.db", read_only=True)) as conn:
        (mean,) = conn.execute("SELECT avg(clock_offset_ms) FROM journal WHERE kind = 'accepted' "
                               "AND device = 'DEV1'").fetchone()
    site.open("/console/devices/DEV1")
    for span in ("1h", "24h", "7d"):
        if span != "1h":
            site.follow(f"#range-{span}")
            assert site.browser.current_url.endswith(f"?range={span}")
        accepted = _points(site, "chart-device-accepted")
        assert sum(accepted) == PUSHED, span  # every push of DEV1's, none of the journal's older rows
        offsets = _points(site, "chart-device-offset")  # a point only where it pushed: a mean per bucket
        pushed = [n for n in accepted if n]
        assert len(offsets) == len(pushed), span
        weighted = sum(o * n for o, n in zip(offsets, pushed, strict=True)) / PUSHED
        assert weighted == pytest.approx(mean, abs=0.01), span
    site.open("/console/devices/DEV1?range=1y")
    assert "range must be one of 1h, 24h, 7d" in site.browser.page_source


def test_a_queues_messages_come_a_page_at_a_time_and_the_journal_by_range(site: Site) -> None:
    site.open("/console/queues/ORDERS")
    first = site.keys("#messages tr.message", "uid")
    site.follow("#next-page")
    rest = site.keys("#messages tr.message", "uid")
    assert len(rest) == PUSHED - PAGE and not set(first) & set(rest)
    assert not site.browser.find_elements(By.ID, "next-page")
    site.follow("#first-page")
    assert site.keys("#messages tr.message", "uid") == first

    counts = {}
    for span in ("24h", "7d"):
        site.follow(f"#range-{span}")
        assert site.browser.current_url.endswith(f"?range={span}")
        counts[span] = site.browser.find_element(By.CSS_SELECTOR, '#counts td[data-kind="accepted"]').text
        # the chart's time axis: round hours over a day, days over a week
        form = r"\d\d:00" if span == "24h" else r"\d\d [A-Z][a-z][a-z]"
        assert _ticks(site, "xtick") and all(re.fullmatch(form, t) for t in _ticks(site, "xtick")), span
    assert counts == {"24h": str(PUSHED), "7d": str(PUSHED + 7)}


def test_markup_from_devices_and_hostile_urls_are_shown_as_text(site: Site) -> None:
    site.open("/console/devices/DEV2")
    assert site.browser.find_element(By.ID, "agent").text == MARKUP
    site.no_markup()
    bad = quote(HOSTILE, safe="")
    for path in (f"/console/devices/{bad}", f"/console/queues/{bad}",
                 f"/console/queues/ORDERS/messages/{bad}", f"/console/queues/ORDERS?range={bad}",
                 f"/console/queues/ORDERS?after={bad}", f"/console/admin?device={bad}",
                 f"/console/admin?after={bad}", f"/console/admin?status={bad}"):
        site.open(path)
        assert HOSTILE[:12] in site.browser.find_element(By.ID, "problem").text, path  # as text (maybe cut)
        site.no_markup()
    site.open(f"/console/devices/{quote(MARKUP, safe='')}")  # its "/" leaves the route: a plain 404
    assert site.browser.find_element(By.TAG_NAME, "body").text.startswith("not found: the console's pages")
    site.no_markup()
    site.open("/console/queues/NOSUCH")
    assert "no queue 'NOSUCH'" in site.browser.find_element(By.ID, "problem").text


def test_an_encrypted_queues_data_and_fields_are_never_shown(site: Site) -> None:
    site.open("/console/queues/SECRETS")
    assert _facts(site, "queue")["Encryption at rest"] == "aes-256-gcm"
    row = site.browser.find_element(By.CSS_SELECTOR, "#messages tr.message")
    cells = [c.text for c in row.find_elements(By.TAG_NAME, "td")]
    assert cells[3] == "not shown" and cells[6] == "encrypted: not shown"
    site.follow("#messages tr.message a")
    assert site.browser.find_element(By.ID, "data").text == "encrypted: not shown"
    assert SECRET.decode() not in site.browser.page_source and "1234" not in site.browser.page_source


def test_admin_requests_are_filtered_and_paged_and_a_devices_history_too(site: Site) -> None:
    def shown() -> list[str]:
        return site.keys("#admin tr.request", "request")

    site.open("/console")
    site.follow("#all-admin")
    assert len(shown()) == PAGE
    site.follow("#next-page")
    assert len(shown()) == REQUESTS + 1 - PAGE and not site.browser.find_elements(By.ID, "next-page")

    site.open("/console/admin")
    site.browser.find_element(By.ID, "filter-device").send_keys("DEV2")
    Select(site.browser.find_element(By.ID, "filter-status")).select_by_value("pending")
    site.follow("#filter")
    assert len(shown()) == 1 and "device=DEV2" in site.browser.current_url
    site.shot("console-admin.png")
    assert _cells(site.browser, "admin", "request").popitem()[1][1:3] == ["DEV2", "inquire-all"]
    Select(site.browser.find_element(By.ID, "filter-status")).select_by_value("replied")
    site.follow("#filter")
    assert shown() == []

    site.open("/console/devices/DEV1")
    page1 = shown()
    site.follow("#next-page")
    assert len(page1) == PAGE and len(shown()) == REQUESTS - PAGE and not set(page1) & set(shown())


def test_every_new_page_needs_a_session(site: Site) -> None:
    with httpx.Client(base_url=site.served.console_url, timeout=10) as http:
        for path in ("/console/devices/DEV1", "/console/queues/ORDERS", "/console/admin",
                     "/console/queues/SECRETS/messages/HOME.1"):
            answer = http.get(path)
            assert answer.status_code == 303 and answer.headers["location"] == "/console/login", path
            assert answer.headers["Content-Security-Policy"].startswith("default-src 'none'")



def _filter(site: Site, name: str, text: str) -> None:
    """Type ``text`` into list ``name``'s filter on the fleet page and submit it."""
    box = site.browser.find_element(By.ID, f"{name}-text")
    box.clear()
    box.send_keys(text)
    site.follow(f"#{name}-go")


def _pages(site: Site, name: str, css: str, key: str) -> list[list[str]]:
    """List ``name``'s rows a page at a time, from this page on, following its "Next page" links."""
    found = [site.keys(css, key)]
    while site.browser.find_elements(By.ID, f"{name}-next-page"):
        site.follow(f"#{name}-next-page")
        found.append(site.keys(css, key))
    return found


def test_the_fleet_pages_lists_are_filtered_and_paged_and_refreshed_so(site: Site) -> None:
    fleet, queues = [f"FLEET-{i:02}" for i in range(MANY)], [f"FLEET.Q{i:02}" for i in range(MANY)]
    site.open("/console")
    assert len(site.keys("#devices tr.device", "device")) == PAGE
    assert site.browser.find_element(By.ID, "devices-heading").text == f"Fleet ({MANY + 2} devices)"
    _filter(site, "devices", "FLEET-")
    assert site.browser.find_element(By.ID, "devices-heading").text == f"Fleet ({MANY} devices matching)"
    assert _pages(site, "devices", "#devices tr.device", "device") == [fleet[:PAGE], fleet[PAGE:]]
    _filter(site, "queues", "FLEET.Q")  # another list's filter keeps this one's filter and page
    assert site.keys("#devices tr.device", "device") == fleet[PAGE:]
    assert site.browser.find_element(By.ID, "queues-heading").text == f"Queues ({MANY} matching)"
    assert _pages(site, "queues", "#queues tr.queue", "queue") == [queues[:PAGE], queues[PAGE:]]
    site.follow("#devices-first-page")
    assert site.keys("#devices tr.device", "device") == fleet[:PAGE]
    assert site.keys("#queues tr.queue", "queue") == queues[PAGE:]
    site.follow("#devices-next-page")
    site.shot("console.png")

    # The page reloads itself (meta refresh) with its filters and pages.
    shown, url = site.keys("#devices tr.device", "device"), site.browser.current_url
    site.browser.execute_script("window.edgeqOldPage = true")
    WebDriverWait(site.browser, 30, ignored_exceptions=(WebDriverException,)).until(
        lambda d: d.execute_script("return window.edgeqOldPage === undefined && document.readyState")
        == "complete")
    assert site.browser.current_url == url and site.keys("#devices tr.device", "device") == shown

    site.open("/console")
    _filter(site, "expiries", "DEV2")
    got = _pages(site, "expiries", "#expiries tr.expiry", "uid")
    assert got == [[f"DEV2:b1.{i}" for i in reversed(range(MANY))][:PAGE],
                   [f"DEV2:b1.{i}" for i in reversed(range(MANY))][PAGE:]]  # newest first
    _filter(site, "expiries", "FLEET.Q00")
    assert len(site.keys("#expiries tr.expiry", "uid")) == sum(POINTS.values()) + sum(REPORTED.values()) + 1
    assert not site.browser.find_elements(By.ID, "expiries-next-page")

    _filter(site, "refusals", "FLEET-")
    got = _pages(site, "refusals", "#refusals tr.refusal", "refusal")
    refused = [f"{d} ORDERS" for d in fleet]  # the latest first
    assert got == [refused[:PAGE], refused[PAGE:]]
    row = site.browser.find_element(By.CSS_SELECTOR, '#refusals tr[data-refusal="FLEET-24 ORDERS"]')
    assert [c.text for c in row.find_elements(By.TAG_NAME, "td")][3:] == [str(MANY), MARKUP]
    site.no_markup()

    _filter(site, "parked", "RULED")
    got = _pages(site, "parked", "#parked tr.event", "event")
    assert [len(p) for p in got] == [PAGE, MANY - PAGE] and len({*got[0], *got[1]}) == MANY
    _filter(site, "parked", "NOPE")
    assert site.keys("#parked tr.event", "event") == []

    with QueueManager(site.shots / "home.db") as qm:  # after the server started: it runs none of them
        for i in range(MANY):
            define_bridge(qm, f"BR.{i:02}", "mqtt-out", "ORDERS",
                          {"url": "mqtt://127.0.0.1:1", "topics": ["t"]})
    site.open("/console?bridges=BR.")
    got = _pages(site, "bridges", "#bridges tr.bridge", "bridge")
    assert got == [[f"BR.{i:02}" for i in range(MANY)][:PAGE], [f"BR.{i:02}" for i in range(MANY)][PAGE:]]
    assert _cells(site.browser, "bridges", "bridge")["BR.24"][4] == "no"  # not running


def test_hostile_filters_and_cursors_are_text_and_bounded(site: Site) -> None:
    site.open("/console")
    _filter(site, "devices", HOSTILE)
    assert site.keys("#devices tr.device", "device") == []
    assert site.browser.find_element(By.ID, "devices-text").get_attribute("value") == HOSTILE
    site.no_markup()
    cookie = site.browser.get_cookie("edgeq_console")
    assert cookie is not None
    with httpx.Client(base_url=site.served.console_url, timeout=10,
                      cookies={"edgeq_console": cookie["value"]}) as http:
        for query, said in (
                (f"devices={'x' * 49}", "the devices filter is 49 characters long: give at most 48"),
                (f"refusals-after={quote(HOSTILE)}", "refusals-after must be the cursor of a"),
                ("queues-after=WyJ4IiwgMV0", "queues-after must be the cursor of a")):  # ["x", 1]: not a name
            answer = http.get(f"/console?{query}")
            assert answer.status_code == 400 and said in answer.text, query
    site.open(f"/console?expiries-after={quote(HOSTILE)}")
    assert HOSTILE[:12] in site.browser.find_element(By.ID, "problem").text
    site.no_markup()


def test_a_queues_expiries_are_counted_by_check_point_over_its_range(site: Site) -> None:
    site.open("/console?queues=FLEET.Q00")
    hour = {**POINTS, **REPORTED}
    assert _cells(site.browser, "queues", "queue")["FLEET.Q00"][7] == ", ".join(
        f"{p}: {n}" for p, n in sorted(hour.items()))
    site.follow('#queues tr[data-queue="FLEET.Q00"] a')

    def points() -> dict[str, str]:
        cells = site.browser.find_elements(By.CSS_SELECTOR, "#check-points td")
        return {c.get_attribute("data-point") or "": c.text for c in cells}

    assert points() == {p: str(hour.get(p, 0)) for p in CHECK_POINTS}
    expired = site.browser.find_element(By.CSS_SELECTOR, '#counts td[data-kind="expired"]').text
    assert expired == str(sum(hour.values()))
    heads = [h.text for h in site.browser.find_elements(By.CSS_SELECTOR, "#check-points th")]
    assert "size inquiry (depth)" in heads and "remove (get)" in heads
    site.follow("#range-7d")
    assert points() == {p: str(hour.get(p, 0) + (p == "add")) for p in CHECK_POINTS}  # and two days ago's

"""The console's device and admin-request actions in Chromium, against one real ``edgeq serve --console
--admin-key`` and a real device (``edgeq sync --once``): an operator (alice) registers a device, re-keys
it, changes its queues, sends an admin request and sees the device's reply, re-sends it; a viewer (bob)
sees no form and his forged posts (403) change nothing; pages never say "pending" once a reply waits."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.select import Select

from edgeq import Message, QueueManager
from edgeq.store.opening import connect
from edgeq.sync.keys import new_key_pair
from edgeq.sync.server.admin.client import AdminClient, OperatorKey, new_operator_key
from edgeq.sync.server.console.auth import add_account
from tests.sync.conftest import EDGEQ, edgeq_serve_console
from tests.sync.server.console.test_actions import _confirm, _session
from tests.sync.server.console.test_browser import _sign_in, chromium
from tests.sync.server.console.test_pages import MARKUP, Site

OPERATOR, VIEWER = ("alice", "alice-pass-1"), ("bob", "bob-pass-12")


@dataclass
class Stage:
    home: Path
    device: tuple[Path, Path]  # DEV1's store and its private key
    operator: Path  # the operator key file the server signs with
    alice: Site
    bob: Site
    url: str  # the devices' side

    def sync(self) -> None:
        """``edgeq sync --once`` of DEV1: it takes its admin requests and pushes their replies back."""
        db, key = self.device
        done = subprocess.run([*EDGEQ, "sync", "--db", str(db), "--server", self.url, "--once", "--key",
                               str(key)], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="module")
def stage(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stage]:
    where = tmp_path_factory.mktemp("device-actions")
    home, operator = where / "home.db", where / "operator.key"
    pair, key_id = new_operator_key(operator)
    device_key = new_key_pair(where / "dev1.key")
    with QueueManager(home, name="HOME") as qm:
        qm.register_device("DEV1", device_key.public_key)
    with QueueManager(where / "dev1.db", name="DEV1") as dev:
        dev.trust_admin_key(key_id, pair.public_key)
        dev.define_queue("LOGS")
        dev.put_many("LOGS", [Message(b"log")] * 3)
    for name, password in (OPERATOR, VIEWER):
        add_account(home, name, password, "operator" if name == "alice" else "viewer")
    with edgeq_serve_console(home, "--auth", "--admin-key", str(operator)) as served, \
            chromium(where / "alice") as alice, chromium(where / "bob") as bob:
        _sign_in(alice, served.console_url, OPERATOR[1], OPERATOR[0])
        _sign_in(bob, served.console_url, VIEWER[1], VIEWER[0])
        yield Stage(home, (where / "dev1.db", device_key.private_path), operator,
                    Site(served, alice, where), Site(served, bob, where), served.url)


def _states(site: Site) -> dict[str, str]:
    """The admin requests' table on the page: each request's state, by id."""
    rows = site.browser.find_elements(By.CSS_SELECTOR, "#admin tr.request")
    return {str(r.get_attribute("data-request")): r.find_elements(By.TAG_NAME, "td")[5].text for r in rows}


def test_a_page_shows_the_reply_the_device_sent_not_pending(stage: Stage) -> None:
    signer = OperatorKey.load(stage.operator)
    with QueueManager(stage.home) as qm, AdminClient(qm, operator_key=signer) as admin:
        request_id = admin.request("DEV1", "inquire-queue", "LOGS", {}).request_id
    stage.sync()  # DEV1 ran it; its reply waits on the server's SYSTEM.ADMIN.REPLY
    for path in ("/console/admin", "/console/devices/DEV1"):
        stage.bob.open(path)
        assert _states(stage.bob)[request_id] == "replied: success", path
    stage.bob.open("/console")
    assert request_id[:12] in stage.bob.browser.find_element(By.ID, "admin").text
    assert "replied: success" in stage.bob.browser.find_element(By.ID, "admin").text


def _type(site: Site, field: str, text: str) -> None:
    box = site.browser.find_element(By.ID, field)
    box.clear()
    box.send_keys(text)


def _post(site: Site, action: str, fields: dict[str, str]) -> httpx.Response:
    """A post to ``action`` with the browser's session (a forgery, or what no form offers)."""
    cookies, csrf = _session(site)
    with httpx.Client(base_url=site.served.console_url, cookies=cookies, timeout=30) as http:
        return http.post(f"/console/actions/{action}", data={"csrf": csrf, **fields})


def _admin_depth(home: Path) -> int:
    with QueueManager(home) as qm:
        return qm.depth("DEV1.SYSTEM.ADMIN") if "DEV1.SYSTEM.ADMIN" in qm.queue_names() else 0


def _recorded(home: Path, who: str) -> list[tuple[str, str]]:
    """The record of actions' (action, outcome) of ``who``, oldest first."""
    with closing(connect(home, read_only=True)) as conn:
        return list(conn.execute("SELECT action, outcome FROM api_actions WHERE who = ? ORDER BY id", (who,)))


FORGED: list[tuple[str, dict[str, str]]] = [
    ("register-device", {"name": "DEV8", "public_key": "x", "scope": "any"}),
    ("rekey-device", {"name": "DEV1", "public_key": "x"}),
    ("set-device-queues", {"name": "DEV1", "scope": "listed", "queues": ""}),
    ("send-admin-request", {"device": "DEV1", "action": "purge", "target": "LOGS", "params": "{}"}),
    ("resend-admin-request", {"target": "ab" * 16}),
]


def test_a_viewer_sees_no_form_and_his_forged_posts_change_nothing(stage: Stage) -> None:
    bob = stage.bob
    with QueueManager(stage.home) as qm:
        before, pending = qm.device("DEV1"), _admin_depth(stage.home)
    bob.open("/console/admin")
    request_id = bob.keys("#admin tr.request", "request")[0]
    for path in ("/console/devices", "/console/devices/DEV1", f"/console/admin/{request_id}"):
        bob.open(path)
        assert not bob.browser.find_elements(By.CSS_SELECTOR, "form.act"), path
        assert not bob.browser.find_elements(By.TAG_NAME, "textarea"), path
    bob.open("/console/devices")
    assert "needs the operator role" in bob.browser.find_element(By.ID, "read-only").text
    for confirm in ("", "yes"):
        for action, fields in FORGED:
            refused = _post(bob, action, {**fields, "confirm": confirm})
            assert refused.status_code == 403, (action, refused.text)
            assert f"{action} needs the operator role; console:bob is a viewer" in refused.text
    with QueueManager(stage.home) as qm:
        assert qm.device("DEV1") == before and qm.device("DEV8") is None
    assert _admin_depth(stage.home) == pending
    assert _recorded(stage.home, "console:bob") == [(a, "refused") for a, _ in FORGED]  # the confirmed ones


def _sync_as(stage: Stage, name: str, key: Path) -> subprocess.CompletedProcess[str]:
    """``edgeq sync --once`` of a device ``name`` (a store of its own) signing with ``key``."""
    db = key.parent / f"{name}.db"
    QueueManager(db, name=name).close()
    return subprocess.run([*EDGEQ, "sync", "--db", str(db), "--server", stage.url, "--once", "--key",
                           str(key)], capture_output=True, text=True, timeout=120)


def test_an_operator_registers_a_device_gives_it_a_new_key_and_changes_its_queues(stage: Stage) -> None:
    alice, where = stage.alice, stage.device[0].parent
    first, second = new_key_pair(where / "dev9.key"), new_key_pair(where / "dev9-new.key")
    alice.open("/console")
    alice.follow("#to-devices")
    _type(alice, "register-name", "DEV9")
    _type(alice, "register-key", first.public_path.read_text())
    Select(alice.browser.find_element(By.ID, "register-scope")).select_by_value("listed")
    _type(alice, "register-queues", "ORDERS, ALERTS")
    alice.shot("console-register.png")
    done = _confirm(alice, "register", f"Register device DEV9 with key {first.fingerprint}: it may push to "
                                       "ORDERS, ALERTS.")
    assert done.startswith("register-device DEV9: done (by console:alice)")
    assert alice.browser.current_url.split("?")[0].endswith("/console/devices/DEV9")
    with QueueManager(stage.home) as qm:
        found = qm.device("DEV9")
        assert found is not None and found.public_key == first.public_key
        assert found.queues == ("ORDERS", "ALERTS")
    assert _sync_as(stage, "DEV9", first.private_path).returncode == 0

    _type(alice, "rekey-key", second.public_path.read_text())
    done = _confirm(alice, "rekey", f"Give device DEV9 the key {second.fingerprint} (was: "
                                    f"{first.fingerprint}): requests signed with the old key will be refused "
                                    "from now on; it may still push to ORDERS, ALERTS.",
                    "console-confirm-rekey.png")
    assert done.startswith("rekey-device DEV9: done (by console:alice)")
    with QueueManager(stage.home) as qm:
        assert qm.device("DEV9").public_key == second.public_key
    assert _sync_as(stage, "DEV9", first.private_path).returncode != 0  # the old key: refused
    assert _sync_as(stage, "DEV9", second.private_path).returncode == 0

    assert alice.browser.find_element(By.ID, "device-queues").get_attribute("value") == "ORDERS, ALERTS"
    Select(alice.browser.find_element(By.ID, "device-scope")).select_by_value("any")
    done = _confirm(alice, "set-queues", "Device DEV9 may push to any queue (was: ORDERS, ALERTS).")
    assert done.startswith("set-device-queues DEV9: done (by console:alice)")
    assert "any queue" in alice.browser.find_element(By.ID, "device").text
    with QueueManager(stage.home) as qm:
        assert qm.device("DEV9").queues is None
    assert _recorded(stage.home, "console:alice")[-3:] == [
        ("register-device", "done"), ("rekey-device", "done"), ("set-device-queues", "done")]


def test_an_operator_sends_an_admin_request_sees_the_reply_and_resends_a_pending_one(stage: Stage) -> None:
    alice, pending = stage.alice, _admin_depth(stage.home)
    alice.open("/console/devices/DEV1")
    Select(alice.browser.find_element(By.ID, "send-action")).select_by_value("define-queue")
    _type(alice, "send-target", "ALERTS")
    _type(alice, "send-params", '{"expiry_ms": 60000}')
    alice.shot("console-send.png")
    key_id = OperatorKey.load(stage.operator).key_id
    done = _confirm(alice, "send", 'Send define-queue on ALERTS to device DEV1 with parameters '
                                   f'{{"expiry_ms": 60000}}, signed with key {key_id}: DEV1 runs it when it '
                                   "next syncs; its reply shows on the request's page.")
    assert done.startswith("send-admin-request DEV1: done (by console:alice)")
    page = alice.browser.current_url.split("?")[0]
    request_id = page.rsplit("/", 1)[1]
    assert re.fullmatch(r"[0-9a-f]{16,64}", request_id) and _admin_depth(stage.home) == pending + 1
    assert alice.browser.find_element(By.ID, "request-state").text == "pending"
    assert alice.browser.find_element(By.ID, "no-reply").text.startswith("None yet")
    stage.sync()
    alice.open(f"/console/admin/{request_id}")
    assert alice.browser.find_element(By.ID, "request-state").text == "replied: success"
    assert alice.browser.find_element(By.ID, "reply-rc").text == "success"
    results = json.loads(alice.browser.find_element(By.ID, "reply-results").text)
    assert results[0]["attributes"]["expiry_ms"] == 60_000
    assert not alice.browser.find_elements(By.ID, "resend")  # replied: nothing to re-send
    alice.shot("console-admin-request.png")
    with QueueManager(stage.device[0]) as dev:
        assert "ALERTS" in dev.queue_names()

    alice.open("/console/devices/DEV1")
    Select(alice.browser.find_element(By.ID, "send-action")).select_by_value("purge")
    _type(alice, "send-target", "LOGS")
    _type(alice, "send-params", "")
    done = _confirm(alice, "send", f"Send purge on LOGS to device DEV1, signed with key {key_id}: DEV1 runs "
                                   "it when it next syncs; its reply shows on the request's page.")
    purge = alice.browser.current_url.split("?")[0].rsplit("/", 1)[1]
    done = _confirm(alice, "resend", f"Re-send admin request {purge} (purge on LOGS) to device DEV1: the "
                                     "same request, so a device that ran it already answers from its "
                                     "remembered reply and never runs it twice.")
    assert done.startswith(f"resend-admin-request {purge}: done (by console:alice)")
    assert _admin_depth(stage.home) == pending + 2  # the request, and the same one again
    stage.sync()
    alice.open(f"/console/admin/{purge}")
    assert alice.browser.find_element(By.ID, "request-state").text == "replied: success"
    assert json.loads(alice.browser.find_element(By.ID, "reply-results").text)[0]["purged"] == 3
    assert _admin_depth(stage.home) == 0
    with QueueManager(stage.device[0]) as dev:
        assert dev.depth("LOGS") == 0


def test_bad_fields_are_refused_saying_why_and_markup_stays_text(stage: Stage) -> None:
    alice, pending = stage.alice, _admin_depth(stage.home)
    alice.open("/console/devices/DEV1")
    _type(alice, "send-params", "{nope")
    alice.follow("#send")
    assert "the parameters must be a JSON object" in alice.browser.find_element(By.ID, "problem").text
    alice.open("/console/devices/DEV1")
    _type(alice, "send-params", json.dumps({"note": MARKUP}))
    alice.follow("#send")
    assert json.dumps(MARKUP) in alice.browser.find_element(By.ID, "question").text  # shown as text
    alice.no_markup()
    alice.follow("#cancel")
    assert alice.browser.current_url.endswith("/console/devices/DEV1")
    key = new_key_pair(stage.device[0].parent / "dev7.key").public_path.read_text()
    for action, fields, says in (
            ("register-device", {"name": MARKUP, "public_key": key, "scope": "any"}, "device name"),
            ("register-device", {"name": "DEV7", "public_key": MARKUP, "scope": "any"}, "not a PEM"),
            ("register-device", {"name": "DEV7", "public_key": key, "scope": "?"}, "scope any"),
            ("register-device", {"name": "DEV1", "public_key": key, "scope": "any"}, "registered already"),
            ("set-device-queues", {"name": "DEV1", "scope": "listed", "queues": MARKUP}, "allowed queues"),
            ("rekey-device", {"name": "NOSUCH", "public_key": "x"}, "is not registered"),
            ("send-admin-request", {"device": "DEV1", "action": MARKUP}, "is not an admin action"),
            ("send-admin-request", {"device": "DEV1", "action": "purge", "target": MARKUP}, "queue name"),
            ("resend-admin-request", {"target": MARKUP}, "is not an admin request id")):
        refused = _post(alice, action, fields)
        assert refused.status_code in (400, 404, 409), (action, refused.text)
        assert says in refused.text and MARKUP not in refused.text, (action, refused.text)
    large = _post(alice, "send-admin-request", {"device": "DEV1", "action": "inquire-all",
                                                "params": json.dumps({"note": "x" * 20_000})})
    assert large.status_code == 413 and "the form is too large, nothing was done" in large.text
    assert _admin_depth(stage.home) == pending
    with QueueManager(stage.home) as qm:
        assert qm.device("DEV7") is None


def test_without_an_operator_key_the_send_form_says_so_and_a_send_is_refused(tmp_path: Path) -> None:
    home = tmp_path / "home.db"
    with QueueManager(home, name="HOME") as qm:
        qm.register_device("DEV1", new_key_pair(tmp_path / "dev1.key").public_key)
    add_account(home, *OPERATOR, "operator")
    with edgeq_serve_console(home, "--auth") as served, \
            httpx.Client(base_url=served.console_url, timeout=30) as http:
        signed = http.post("/console/login", data={"user": OPERATOR[0], "password": OPERATOR[1]})
        assert signed.status_code == 303
        page = http.get("/console/devices/DEV1").text
        assert 'id="no-admin-key"' in page and "edgeq serve --console --admin-key" in page
        assert 'id="send"' not in page and 'id="rekey"' in page
        csrf = re.search(r'name="csrf" value="([^"]+)"', page)
        assert csrf is not None
        for confirm in ("", "yes"):
            refused = http.post("/console/actions/send-admin-request", data={
                "csrf": csrf[1], "device": "DEV1", "action": "inquire-all", "confirm": confirm})
            assert refused.status_code == 409 and "has no operator key" in refused.text
    assert _admin_depth(home) == 0
    assert _recorded(home, "console:alice") == [("send-admin-request", "failed")]


def test_a_page_view_writes_nothing_when_no_reply_waits(stage: Stage) -> None:
    stage.sync()
    stage.bob.open("/console/admin")  # any reply waiting collected
    cookies, _ = _session(stage.bob)
    with closing(connect(stage.home)) as conn, \
            httpx.Client(base_url=stage.bob.served.console_url, cookies=cookies, timeout=5) as http:
        conn.execute("BEGIN IMMEDIATE")  # a page that wrote would wait for this lock (and time out)
        try:
            for path in ("/console", "/console/admin", "/console/devices/DEV1"):
                shown = http.get(path)
                assert shown.status_code == 200 and 'id="admin"' in shown.text, path
        finally:
            conn.execute("ROLLBACK")


def test_each_confirmed_form_shows_its_own_outcome_when_the_account_acts_twice_at_once(stage: Stage) -> None:
    """A trigger records, with each of alice's changes to DEV1, another action of hers of the same name (as
    her request in another tab finishing at that moment would): each redirect names its own record."""
    twin = ("CREATE TRIGGER twin AFTER INSERT ON api_actions WHEN NEW.target = 'DEV1' BEGIN INSERT INTO "
            "api_actions (at_ms, who, role, action, target, outcome, detail) VALUES (NEW.at_ms, NEW.who, "
            "NEW.role, NEW.action, 'TWIN', 'failed', 'the other request'); END")
    with closing(connect(stage.home)) as conn:
        conn.execute(twin)
        try:
            for scope in ("listed", "any"):
                moved = _post(stage.alice, "set-device-queues",
                              {"name": "DEV1", "scope": scope, "queues": "LOGS", "confirm": "yes"})
                assert moved.status_code == 303, moved.text
                own, other = conn.execute("SELECT max(id) FILTER (WHERE target = 'DEV1'), max(id) FROM "
                                          "api_actions WHERE who = 'console:alice'").fetchone()
                assert other == own + 1  # the other request's record is the newest
                assert moved.headers["location"] == f"/console/devices/DEV1?done={own}"
                stage.alice.open(moved.headers["location"])
                shown = stage.alice.browser.find_element(By.ID, "outcome").text
                assert shown.startswith("set-device-queues DEV1: done (by console:alice)"), shown
        finally:
            conn.execute("DROP TRIGGER twin")
    with QueueManager(stage.home) as qm:
        assert qm.device("DEV1").queues is None


def test_a_form_of_too_many_fields_is_a_400_and_nothing_is_done(stage: Stage) -> None:
    with QueueManager(stage.home) as qm:
        before = qm.device("DEV1")
    recorded = _recorded(stage.home, "console:alice")
    many = {f"f{i}": "x" for i in range(50)}
    refused = _post(stage.alice, "set-device-queues",
                    {"name": "DEV1", "scope": "listed", "queues": "", "confirm": "yes", **many})
    assert refused.status_code == 400, refused.text
    assert "the form has more than 10 fields, nothing was done" in refused.text
    with httpx.Client(base_url=stage.alice.served.console_url, timeout=10) as http:
        login = http.post("/console/login", data={"user": OPERATOR[0], "password": OPERATOR[1], **many})
    assert login.status_code == 400 and "the form has more than 10 fields" in login.text
    assert "set-cookie" not in login.headers
    with QueueManager(stage.home) as qm:
        assert qm.device("DEV1") == before
    assert _recorded(stage.home, "console:alice") == recorded

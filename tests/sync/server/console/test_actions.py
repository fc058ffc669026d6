"""The console's actions in Chromium, against one real ``edgeq serve --console`` and two browsers signed in
at once: an operator (alice) purges a queue, re-sends and deletes dead letters, revokes a device, retries
and drops parked rule events, each through its confirmation page, and the store changes; a viewer (bob)
sees no button, and his forged posts (403) change nothing; a post without the CSRF token is 403; markup
in what is shown stays text."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.select import Select

from edgeq import Int64, Message, QueueManager
from edgeq.clock import system_clock
from edgeq.sync import protocol as p
from edgeq.sync.server.console.auth import add_account
from edgeq.types import DEFAULT_DEAD_LETTER_QUEUE as DLQ
from tests.sync.conftest import ServedConsole, edgeq_serve_console
from tests.sync.server.console.test_browser import _sign_in, chromium
from tests.sync.server.console.test_pages import MARKUP, Site

OPERATOR, VIEWER = ("alice", "alice-pass-1"), ("bob", "bob-pass-12")


@dataclass
class Stage:
    served: ServedConsole
    db: Path
    alice: Site
    bob: Site
    dead: list[str]  # the dead-lettered uids

    def open(self) -> QueueManager:
        return QueueManager(self.db)


def _fill(db: Path) -> list[str]:
    """Queues to purge and read, two dead letters (data and fields with markup), a registered device,
    three parked rule events (tests.rulekit:Failing raises while the file ``fail`` exists)."""
    with QueueManager(db, name="HOME") as qm:
        qm.define_queue("PURGEME")
        qm.put_many("PURGEME", [Message(b"p")] * 3)
        qm.define_remote_queue("METRICS", target_qmgr="ELSEWHERE", refusal_limit=1)
        dead = [str(qm.put("METRICS", Message(f"reading {i} {MARKUP}".encode(), fields={"note": MARKUP})))
                for i in range(2)]
        qm.exchange.refused("METRICS", [(u, "no-queue: ELSEWHERE has no queue METRICS") for u in dead])
        qm.register_device("DEV2", bytes(32))
    (db.parent / "fail").touch()
    with QueueManager(db, rule_retry_limit=1) as qm:  # each failed delivery parked at once
        qm.define_queue("RULED", rules=[("tests.rulekit:Failing", {"switch": str(db.parent / "fail")})])
        qm.put_many("RULED", [Message(b"r", expiry=Int64(1))] * 3)
    for name, password in (OPERATOR, VIEWER):
        add_account(db, name, password, "operator" if name == "alice" else "viewer")
    return sorted(dead)


@pytest.fixture(scope="module")
def stage(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stage]:
    where = tmp_path_factory.mktemp("actions")
    db = where / "home.db"
    dead = _fill(db)
    with edgeq_serve_console(db) as served, chromium(where / "alice") as alice, \
            chromium(where / "bob") as bob, httpx.Client(timeout=10) as http:
        hello = p.encode_body({"type": "hello", "qmgr": "DEV1", "now_ms": system_clock(), "agent": MARKUP})
        assert http.post(served.url + p.PATH_HELLO, content=hello,
                         headers={"content-type": p.CONTENT_TYPE}).status_code == 200
        _sign_in(alice, served.console_url, OPERATOR[1], OPERATOR[0])
        _sign_in(bob, served.console_url, VIEWER[1], VIEWER[0])  # both signed in at once
        yield Stage(served, db, Site(served, alice, where), Site(served, bob, where), dead)


def _confirm(site: Site, button: str, asks: str, shot: str | None = None) -> str:
    """Press ``button``, check the confirmation page asks ``asks``, confirm; the outcome shown after."""
    site.follow(f'[id="{button}"]')
    assert "/console/actions/" in site.browser.current_url  # the confirmation page: nothing done yet
    assert site.browser.find_element(By.ID, "question").text == asks
    site.no_markup()
    if shot:
        site.shot(shot)
    site.follow("#confirm")
    site.no_markup()
    return site.browser.find_element(By.ID, "outcome").text


def _session(site: Site) -> tuple[dict[str, str], str]:
    """The browser's session cookie, and the CSRF token its pages' forms carry."""
    cookie = site.browser.get_cookie("edgeq_console")
    assert cookie is not None
    site.open("/console")
    csrf = site.browser.find_element(By.CSS_SELECTOR, 'input[name="csrf"]').get_attribute("value")
    return {"edgeq_console": str(cookie["value"])}, str(csrf)


def _post(stage: Stage, site: Site, action: str, fields: dict[str, Any]) -> httpx.Response:
    cookies, _ = _session(site)
    with httpx.Client(base_url=stage.served.console_url, cookies=cookies, timeout=10) as http:
        return http.post(f"/console/actions/{action}", data=fields)


def test_a_viewer_sees_no_button_and_a_forged_post_changes_nothing(stage: Stage) -> None:
    bob = stage.bob
    for path in ("/console", "/console/devices/DEV2", "/console/queues/PURGEME", "/console/rule-events",
                 f"/console/queues/{DLQ}/messages/{stage.dead[0]}", f"/console/queues/{DLQ}"):
        bob.open(path)
        assert bob.browser.find_element(By.ID, "me").text.startswith("bob (viewer: read-only)"), path
        assert not bob.browser.find_elements(By.CSS_SELECTOR, "form.act"), path
    _, csrf = _session(bob)
    for confirm in ("", "yes"):
        for action, target in (("purge-queue", "PURGEME"), ("revoke-device", "DEV2"),
                               ("resend-dead-letter", stage.dead[0]), ("delete-dead-letter", stage.dead[1]),
                               ("retry-rule-event", "1"), ("drop-rule-event", "2")):
            refused = _post(stage, bob, action, {"target": target, "csrf": csrf, "confirm": confirm})
            assert refused.status_code == 403
            assert "needs the operator role; console:bob is a viewer" in refused.text
    with stage.open() as qm:
        assert qm.depth("PURGEME") == 3 and qm.device("DEV2").revoked_ms is None
        assert sorted(str(m.uid) for m in qm.dlq_browse()) == stage.dead
        assert [f.event_id for f in qm.rule_failures(parked=True)] == [1, 2, 3]
    bob.open("/console/actions?who=console:bob")
    outcomes = bob.browser.find_elements(By.CSS_SELECTOR, "#actions tr.action td:nth-child(6)")
    assert len(outcomes) == 6 and {c.text for c in outcomes} == {"refused"}  # the confirmed ones, recorded


def test_a_post_without_the_sessions_csrf_token_is_403(stage: Stage) -> None:
    for fields in ({"target": "PURGEME", "confirm": "yes"}, {"target": "PURGEME", "csrf": "forged"},
                   {"target": "PURGEME", "csrf": "forged", "confirm": "yes"}):
        refused = _post(stage, stage.alice, "purge-queue", fields)
        assert refused.status_code == 403 and "CSRF" in refused.text
    with httpx.Client(base_url=stage.served.console_url, timeout=10) as http:  # no session at all
        assert http.post("/console/actions/purge-queue", data={"target": "PURGEME"}).status_code == 403
        for path in ("/console/rule-events", "/console/actions"):
            assert http.get(path).headers["location"] == "/console/login"
    with stage.open() as qm:
        assert qm.depth("PURGEME") == 3


def test_an_operator_purges_a_queue_and_revokes_a_device(stage: Stage) -> None:
    alice = stage.alice
    alice.open("/console/queues/PURGEME")
    done = _confirm(alice, "purge", "Purge queue PURGEME: 3 messages will be deleted (locked and expired "
                                    "ones too).", "console-confirm.png")
    assert alice.browser.current_url.split("?")[0].endswith("/console/queues/PURGEME")
    assert done.startswith("purge-queue PURGEME: done (by console:alice)")
    with stage.open() as qm:
        assert qm.depth("PURGEME") == 0

    alice.open("/console")
    alice.follow('#devices tr[data-device="DEV1"] a')
    done = _confirm(alice, "revoke", "Revoke device DEV1: every request it sends will be refused from now "
                                     "on.")
    assert done.startswith("revoke-device DEV1: done (by console:alice)")
    assert '<b id=\\"pwn\\">' in done  # its agent string, as text
    assert not alice.browser.find_elements(By.ID, "revoke")  # revoked: no button
    with stage.open() as qm:
        assert qm.device("DEV1").revoked_ms is not None


def test_an_operator_resends_one_dead_letter_and_deletes_another(stage: Stage) -> None:
    alice, (back, gone) = stage.alice, stage.dead
    alice.open(f"/console/queues/{DLQ}")
    alice.no_markup()
    done = _confirm(alice, f"resend-{back}", f"Re-send dead-lettered message {back} to queue METRICS, the "
                                              "queue it left.")
    assert done.startswith(f"resend-dead-letter {back}: done (by console:alice)")
    alice.shot("console-dead-letters.png")
    alice.follow(f'#messages tr[data-uid="{gone}"] a')
    done = _confirm(alice, f"delete-{gone}", f"Delete dead-lettered message {gone} (it left queue METRICS) "
                                              "for good.")
    assert done.startswith(f"delete-dead-letter {gone}: done")
    assert alice.browser.current_url.split("?")[0].endswith(f"/console/queues/{quote(DLQ, safe='')}")
    with stage.open() as qm:
        assert qm.dlq_browse() == [] and qm.queue_usage("METRICS").depth == 1


def test_an_operator_drops_one_parked_rule_event_and_retries_another(stage: Stage) -> None:
    alice = stage.alice
    alice.open("/console")
    alice.follow("#all-parked")
    assert alice.keys("#rule-events tr.rule-event", "event") == ["1", "2", "3"]
    alice.shot("console-rule-events.png")
    done = _confirm(alice, "drop-3", "Drop rule event 3 on queue RULED: it will never be delivered to rule "
                                     "tests.rulekit:Failing (binding b1).")
    assert done.startswith("drop-rule-event 3: done (by console:alice)")
    (stage.db.parent / "fail").unlink()  # the rule works again
    done = _confirm(alice, "retry-2", "Retry rule event 2 on queue RULED: deliver it again to rule "
                                      "tests.rulekit:Failing (binding b1).")
    assert done.startswith("retry-rule-event 2: done") and '"succeeded": 1' in done
    assert alice.keys("#rule-events tr.rule-event", "event") == ["1"]
    with stage.open() as qm:
        assert [f.event_id for f in qm.rule_failures()] == [1]


def test_a_hostile_target_is_refused_as_text_and_the_record_is_filtered(stage: Stage) -> None:
    _, csrf = _session(stage.alice)
    for action in ("purge-queue", "revoke-device", "resend-dead-letter", "retry-rule-event"):
        answer = _post(stage, stage.alice, action, {"target": MARKUP, "csrf": csrf})
        assert answer.status_code in (400, 404) and MARKUP not in answer.text and "&lt;b id=" in answer.text
    alice = stage.alice
    alice.open("/console")
    alice.follow("#to-actions")
    Select(alice.browser.find_element(By.ID, "filter-action")).select_by_value("purge-queue")
    alice.browser.find_element(By.ID, "filter-who").send_keys("console:alice")
    alice.follow("#filter")
    rows = alice.browser.find_elements(By.CSS_SELECTOR, "#actions tr.action")
    assert [[c.text for c in r.find_elements(By.TAG_NAME, "td")][1:6] for r in rows] == [
        ["console:alice", "operator", "purge-queue", "PURGEME", "done"]]
    alice.open("/console/actions")
    alice.no_markup()
    alice.shot("console-actions.png")

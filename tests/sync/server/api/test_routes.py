"""The management API, /api/v1, over HTTP against a real ``edgeq serve --console`` (one per module):
every endpoint, its credentials (tokens made by the real CLI, the console's session), roles (a viewer
is refused every action, which changes nothing and is recorded) and its errors."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from edgeq import Int64, Message, MessageUID, QueueManager
from edgeq.admin.wire import AdminRequest
from edgeq.clock import system_clock
from edgeq.crypto import StoreKeys
from edgeq.sync.bridges.book import define_bridge
from edgeq.sync.bridges.status import StatusBoard, write_states
from edgeq.sync.keys import fingerprint
from edgeq.sync.server.admin.records import AdminRecords
from edgeq.sync.server.api.http import MAX_LIMIT
from edgeq.sync.server.api.messages import PREVIEW_BYTES
from edgeq.sync.server.console.auth import set_password
from tests.sync.conftest import EDGEQ, ServedConsole, edgeq_serve_console

PASSWORD = "operator-pass-1"
SECRET = b"the launch code is 0000"
LONG = b"x" * (PREVIEW_BYTES + 10)
WHY = "no-queue: ELSEWHERE has no queue METRICS"


def edgeq(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*EDGEQ, *args], capture_output=True, text=True, check=True, timeout=60)


@dataclass
class Served:
    console: ServedConsole
    db: Path
    keys: StoreKeys
    tokens: dict[str, str]  # role -> token text
    orders: list[str]  # the uids of ORDERS, in arrival order
    dead: list[str]  # the dead-lettered uids
    devices: dict[str, bytes]  # name -> public key

    def client(self, role: str | None = "operator", **headers: str) -> httpx.Client:
        auth = {} if role is None else {"Authorization": f"Bearer {self.tokens[role]}"}
        return httpx.Client(base_url=self.console.console_url + "/api/v1", headers={**auth, **headers},
                            timeout=10, follow_redirects=False)

    def open(self) -> QueueManager:
        return QueueManager(self.db, keys=self.keys)


def _fill(db: Path, keys: StoreKeys) -> tuple[list[str], list[str], dict[str, bytes]]:
    """The home store the server serves: queues, messages (one encrypted queue), dead letters,
    devices, refusals and admin requests."""
    with QueueManager(db, name="HOME", keys=keys) as qm:
        qm.define_queue("ORDERS")
        orders = [str(qm.put("ORDERS", m)) for m in (
            Message(b"order 1", fields={"n": 1, "tag": "a"}), Message(b"\xff\x00binary"), Message(LONG),
            Message(b"order 4"), Message(b"order 5"))]
        qm.define_queue("RANKED")  # get order is by priority; a put awaiting its confirm is not in it
        qm.put_many("RANKED", [Message(b"p%d" % p, priority=p) for p in (1, 9, 4, 9)])
        qm.put_each("RANKED", [Message(b"held", uid=MessageUID("DEV1:aaaa", 1), created_ms=1)], confirm_id=7)
        qm.define_queue("SECRETS", encryption="aes-256-gcm")
        qm.put("SECRETS", Message(SECRET, fields={"pin": "1234"}))
        qm.define_queue("PURGEME")
        qm.put_many("PURGEME", [Message(b"p")] * 3)
        qm.define_remote_queue("METRICS", target_qmgr="ELSEWHERE", refusal_limit=1)
        dead = [str(qm.put("METRICS", Message(b"reading %d" % i))) for i in range(2)]
        qm.exchange.refused("METRICS", [(u, WHY) for u in dead])
        devices = {name: Ed25519PrivateKey.generate().public_key().public_bytes_raw()
                   for name in ("DEV1", "DEV2")}
        for name, public_key in devices.items():
            qm.register_device(name, public_key)
        qm.exchange.record_refusals("DEV1", "ORDERS", {"no-queue": (2, "no queue ORDERS")})
        qm.exchange.record_refusals("DEV2", "OTHER", {"too-large": (1, "too large")})
        qm.exchange.record_backlog("DEV1", "ORDERS", 7)  # what DEV1 reported pushing; DEV2 never did
        for name, kind, topic in (("orders-out", "mqtt-out", "edge/orders"),
                                  ("alerts-in", "mqtt-in", "alerts/#")):
            define_bridge(qm, name, kind, "ORDERS", {"url": "mqtt://127.0.0.1:1", "topics": [topic]})
    board = StatusBoard("orders-out", system_clock)  # as a runner in this (live) process reports it
    board.connected(True)
    board.count("forwarded", 4)
    board.error("the broker said no")
    write_states(db, [board], system_clock())
    (db.parent / "fail").touch()  # tests.rulekit:Failing raises while it exists
    with QueueManager(db, keys=keys, rule_retry_limit=1) as qm:  # each failed delivery parked at once
        qm.define_queue("RULED", rules=[("tests.rulekit:Failing", {"switch": str(db.parent / "fail")})])
        qm.put_many("RULED", [Message(b"r", expiry=Int64(1))] * 3)
    records = AdminRecords(str(db))
    try:
        key = Ed25519PrivateKey.generate()
        for i, device in enumerate(("DEV1", "DEV1", "DEV2")):
            request = AdminRequest.create("inquire-all", device=device, reply_qmgr="HOME",
                                          created_ms=1000 + i, key_id="ops").sign(key)
            records.add(request, request.to_bytes())
    finally:
        records.close()
    return orders, dead, devices


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    home = tmp_path_factory.mktemp("api")
    keys, key_file, db = StoreKeys.generate(), home / "store.key", home / "home.db"
    keys.save(key_file)
    orders, dead, devices = _fill(db, keys)
    set_password(db, PASSWORD)
    tokens = {role: edgeq("server", "token", "create", "--name", f"ops-{role}", "--role", role, "--db",
                          str(db)).stdout.strip() for role in ("viewer", "operator")}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("EDGEQ_STORE_KEY_FILE", str(key_file))
        with edgeq_serve_console(db, "--no-bridges") as console:  # defined, never run: their state as written
            yield Served(console, db, keys, tokens, orders, dead, devices)


def _error(response: httpx.Response, status: int, says: str) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["status"] == status and says in body["error"], body


def _actions(served: Served) -> list[dict[str, Any]]:
    with served.client("viewer") as api:
        return list(api.get("/actions", params={"limit": MAX_LIMIT}).json()["actions"])


# -- tokens and credentials ---------------------------------------------------------------------


def test_tokens_are_listed_without_their_secrets_and_stored_hashed(served: Served) -> None:
    listed = json.loads(edgeq("server", "token", "list", "--json", "--db", str(served.db)).stdout)
    assert [(t["name"], t["role"], t["revoked_ms"]) for t in listed] == [
        ("ops-operator", "operator", None), ("ops-viewer", "viewer", None)]
    secret = served.tokens["viewer"].rsplit("_", 1)[1]
    assert re.fullmatch(r"edgeq_[0-9a-f]{16}_[0-9a-f]{64}", served.tokens["viewer"])
    assert secret not in json.dumps(listed)
    with sqlite3.connect(served.db) as conn:
        stored = [str(v) for row in conn.execute("SELECT * FROM api_tokens") for v in row]
    assert not any(secret in value for value in stored)  # its sha256 only
    again = subprocess.run([*EDGEQ, "server", "token", "create", "--name", "ops-viewer", "--db",
                            str(served.db)], capture_output=True, text=True, timeout=60)
    assert again.returncode == 1 and "exists already" in again.stderr


def test_no_credential_or_a_wrong_one_is_401(served: Served) -> None:
    with served.client(None) as api:
        _error(api.get("/queues"), 401, "no credential")
        _error(api.post("/queues/PURGEME/purge"), 401, "no credential")
        forged = served.tokens["operator"][:-4] + "0000"
        for header in (f"Bearer {forged}", "Bearer nonsense", f"Basic {served.tokens['operator']}"):
            response = api.get("/queues", headers={"Authorization": header})
            _error(response, 401, "unknown or revoked")
            assert response.headers["www-authenticate"] == "Bearer"


def test_a_revoked_token_is_refused_from_its_next_request(served: Served) -> None:
    text = edgeq("server", "token", "create", "--name", "temp", "--role", "viewer", "--db",
                 str(served.db)).stdout.strip()
    bearer = {"Authorization": f"Bearer {text}"}
    with httpx.Client(base_url=served.console.console_url, headers=bearer) as api:
        assert api.get("/api/v1/queues").status_code == 200
        revoked = edgeq("server", "token", "revoke", "temp", "--db", str(served.db))
        assert "Revoked token 'temp'" in revoked.stdout
        _error(api.get("/api/v1/queues"), 401, "unknown or revoked")
    listed = json.loads(edgeq("server", "token", "list", "--json", "--db", str(served.db)).stdout)
    assert next(t for t in listed if t["name"] == "temp")["revoked_ms"] is not None


def test_a_console_session_reads_and_acts_with_its_csrf_token(served: Served) -> None:
    with httpx.Client(base_url=served.console.console_url, timeout=10) as browser:
        assert browser.post("/console/login", data={"user": "operator", "password": PASSWORD}
                       ).status_code == 303
        assert browser.get("/api/v1/queues").status_code == 200
        _error(browser.post("/api/v1/devices/NOSUCH/revoke"), 403, "CSRF")
        csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', browser.get("/console").text)
        assert csrf is not None
        _error(browser.post("/api/v1/devices/NOSUCH/revoke", headers={"X-Edgeq-CSRF": csrf[1]}), 404,
               "no device 'NOSUCH'")
    assert _actions(served)[0] | {"at_ms": 0, "id": 0} == {
        "at_ms": 0, "id": 0, "who": "console:operator", "role": "operator", "action": "revoke-device",
        "target": "NOSUCH",
        "outcome": "failed", "detail": "no device 'NOSUCH': GET /api/v1/devices lists them"}


def test_the_device_port_serves_no_api(served: Served) -> None:
    response = httpx.get(served.console.url + "/api/v1/queues", timeout=10)
    assert response.status_code == 404 and served.console.console_url in response.text


def test_an_unknown_endpoint_is_a_json_404(served: Served) -> None:
    with served.client("viewer") as api:
        _error(api.get("/nothing"), 404, "no endpoint GET /api/v1/nothing")
        _error(api.get(served.console.console_url + "/api"), 404, "no endpoint GET /api:")
        _error(api.get("/queues/ORDERS/purge"), 404, "no endpoint GET /api/v1/queues/ORDERS/purge")


# -- reading -------------------------------------------------------------------------------------


def test_devices_are_listed_and_shown_by_their_key_s_fingerprint(served: Served) -> None:
    with served.client("viewer") as api:
        listed = api.get("/devices").json()["devices"]
        assert [d["name"] for d in listed] == ["DEV1", "DEV2"]
        one = api.get("/devices/DEV1").json()
        assert one["registered"] is True and one["public_key"] == fingerprint(served.devices["DEV1"])
        assert one == listed[0]
        assert one["backlog"] == 7 and one["backlog_reported_ms"] > 0
        assert (listed[1]["backlog"], listed[1]["backlog_reported_ms"]) == (None, None)  # none: not 0
        _error(api.get("/devices/NOSUCH"), 404, "no device 'NOSUCH'")


def test_queues_are_listed_and_shown_with_their_depth(served: Served) -> None:
    with served.client("viewer") as api:
        queues = {q["name"]: q for q in api.get("/queues").json()["queues"]}
        assert queues["ORDERS"]["depth"] == 5 and queues["SECRETS"]["encryption"] == "aes-256-gcm"
        one = api.get("/queues/ORDERS").json()
        assert one.pop("counters") == {}  # only the one queue's shows them: no counters rule is bound
        aged = one["backlog"].pop("oldest_age_ms") - queues["ORDERS"]["backlog"].pop("oldest_age_ms")
        assert one == queues["ORDERS"] and aged >= 0  # the same figures, a moment older
        assert (one["backlog"]["depth"], one["backlog"]["drain_ms"]) == (5, None)  # nothing went out
        _error(api.get("/queues/NOSUCH"), 404, "NOSUCH")
        _error(api.get("/queues/bad%20name"), 400, "queue name")


def test_a_queue_s_messages_come_a_page_at_a_time(served: Served) -> None:
    seen: list[dict[str, Any]] = []
    after: int | None = None
    with served.client("viewer") as api:
        for _ in range(5):
            page = api.get("/queues/ORDERS/messages",
                           params={"limit": 2, **({"after": after} if after else {})})
            assert page.status_code == 200, page.text
            seen += page.json()["messages"]
            after = page.json()["next"]
            if after is None:
                break
    assert [m["uid"] for m in seen] == served.orders
    first, binary, long = seen[:3]
    assert (first["data_text"], first["fields"]) == ("order 1", {"n": {"type": "int64", "value": 1},
                                                                  "tag": {"type": "str", "value": "a"}})
    assert binary["data_text"] is None and binary["data_base64"] == "/wBiaW5hcnk="
    assert long["truncated"] is True and len(long["data_text"]) == PREVIEW_BYTES
    assert all(m["state"] == "ready" and m["encrypted"] is False for m in seen)


def test_one_message_is_shown_whole(served: Served) -> None:
    with served.client("viewer") as api:
        long = api.get(f"/queues/ORDERS/messages/{served.orders[2]}").json()
        assert long["data_text"] == LONG.decode() and long["truncated"] is False
        _error(api.get("/queues/ORDERS/messages/HOME:abc.1"), 404, "holds no message HOME:abc.1")
        _error(api.get("/queues/ORDERS/messages/not-a-uid"), 400, "is not a message uid")
        _error(api.get(f"/queues/NOSUCH/messages/{served.orders[0]}"), 404, "no queue 'NOSUCH'")


@pytest.mark.parametrize(("query", "says"), [
    ({"limit": MAX_LIMIT + 1}, f"limit must be a whole number from 1 to {MAX_LIMIT}"),
    ({"limit": 10**30}, "limit must be"), ({"limit": 0}, "limit must be"), ({"limit": "-1"}, "limit must be"),
    ({"after": "abc"}, "after must be"), ({"after": "9" * 40}, "after must be"),
])
def test_hostile_paging_is_a_400(served: Served, query: dict[str, Any], says: str) -> None:
    with served.client("viewer") as api:
        _error(api.get("/queues/ORDERS/messages", params=query), 400, says)


def test_order_get_pages_the_ready_messages_in_get_order(served: Served) -> None:
    seen: list[dict[str, Any]] = []
    after: str | None = None
    with served.client("viewer") as api:
        arrival = api.get("/queues/RANKED/messages").json()["messages"]
        for _ in range(4):
            page = api.get("/queues/RANKED/messages", params={"order": "get", "limit": 3,
                                                             **({"after": after} if after else {})})
            assert page.status_code == 200, page.text
            seen += page.json()["messages"]
            after = page.json()["next"]
            if after is None:
                break
    assert [m["state"] for m in arrival] == ["ready"] * 4 + ["put-locked"]
    assert [m["data_text"] for m in seen] == ["p9", "p9", "p4", "p1"]
    assert [m["uid"] for m in seen] == [arrival[i]["uid"] for i in (1, 3, 2, 0)]
    assert all(m["expiry"] is None for m in seen)


@pytest.mark.parametrize(("query", "says"), [
    ({"order": "random"}, "order must be arrival or get, not 'random'"),
    ({"order": "get", "after": "17"}, "after must be the 'next' of the page before (RANK.SEQ)"),
    ({"order": "get", "limit": 0}, "limit must be"),
])
def test_hostile_get_order_paging_is_a_400(served: Served, query: dict[str, Any], says: str) -> None:
    with served.client("viewer") as api:
        _error(api.get("/queues/ORDERS/messages", params=query), 400, says)
        _error(api.get("/dead-letters", params=query), 400, says)


def test_a_remote_browse_of_an_encrypted_queue_says_why_it_cannot(served: Served) -> None:
    env = {**os.environ, "EDGEQ_TOKEN": served.tokens["viewer"]}
    run = subprocess.run([*EDGEQ, "browse", "SECRETS", "--server", served.console.console_url],
                         capture_output=True, text=True, timeout=60, env=env)
    assert run.returncode == 1 and run.stdout == ""
    says = "is encrypted (the API never shows its data): browse it on the server's host with --db"
    assert says in run.stderr
    assert "launch code" not in run.stderr


def test_held_puts_are_listed_and_cleared_by_an_operator_only(served: Served) -> None:
    with served.client("viewer") as viewer, served.client("operator") as operator:
        held = viewer.get("/held", params={"device": "DEV1"}).json()
        assert [(g["sender"], g["queue"], g["messages"]) for g in held["held"]] == [("DEV1", "RANKED", 1)]
        assert viewer.get("/held", params={"older_than_ms": 0, "device": "DEV2"}).json()["held"] == []
        _error(viewer.get("/held", params={"older_than_ms": "soon"}), 400, "older_than_ms must be a whole")
        _error(viewer.get("/held", params={"device": "bad name"}), 400, "sender")
        _error(viewer.post("/held/clear", json={"device": "DEV1"}), 403, "clear-held needs the operator role")
        _error(operator.post("/held/clear", json={"older_than_ms": -1}), 400, "older_than_ms must be")
        _error(operator.post("/held/clear", json={"device": 7}), 400, "device must be a device's name")
        assert len(viewer.get("/held").json()["held"]) == 1  # nothing undone
        done = operator.post("/held/clear", json={"device": "DEV1"})
        assert done.json() == {"undone": 1, "device": "DEV1", "older_than_ms": 0}
        assert viewer.get("/held").json()["held"] == []
    outcomes = [(a["role"], a["outcome"]) for a in _actions(served) if a["action"] == "clear-held"]
    assert outcomes == [("operator", "done"), ("operator", "failed"), ("operator", "failed"),
                        ("viewer", "refused")]


def test_an_encrypted_queue_s_data_is_never_shown(served: Served) -> None:
    with served.client("operator") as api:
        page = api.get("/queues/SECRETS/messages")
        (message,) = page.json()["messages"]
        one = api.get(f"/queues/SECRETS/messages/{message['uid']}")
    for body in (message, one.json()):
        assert body["encrypted"] is True and body["data_base64"] is None and body["fields"] is None
        assert body["size"] == len(SECRET)
    assert b"launch code" not in page.content + one.content and b"1234" not in page.content + one.content


def test_admin_requests_are_filtered_and_paged_newest_first(served: Served) -> None:
    with served.client("viewer") as api:
        every = api.get("/admin-requests").json()["admin_requests"]
        assert [(r["device"], r["created_ms"], r["status"]) for r in every] == [
            ("DEV2", 1002, "pending"), ("DEV1", 1001, "pending"), ("DEV1", 1000, "pending")]
        first = api.get("/admin-requests", params={"device": "DEV1", "limit": 1}).json()
        second = api.get("/admin-requests",
                         params={"device": "DEV1", "limit": 1, "after": first["next"]}).json()
        assert [r["request_id"] for r in first["admin_requests"] + second["admin_requests"]] == [
            r["request_id"] for r in every[1:]]
        assert api.get("/admin-requests", params={"status": "replied"}).json()["admin_requests"] == []
        assert len(api.get("/admin-requests", params={"status": "pending"}).json()["admin_requests"]) == 3
        _error(api.get("/admin-requests", params={"status": "lost"}), 400,
               "status must be pending or replied")
        _error(api.get("/admin-requests", params={"after": "x"}), 400, "after must be")
        _error(api.get("/admin-requests", params={"device": "no good"}), 400, "device name")


def test_failed_rule_deliveries_are_filtered_and_paged(served: Served) -> None:
    with served.client("viewer") as api:
        every = api.get("/rule-events").json()
        assert [(e["event_id"], e["parked"], e["queue"]) for e in every["rule_events"]] == [
            (1, True, "RULED"), (2, True, "RULED"), (3, True, "RULED")]
        assert "failing on purpose" in every["rule_events"][0]["last_error"] and every["next"] is None
        parked = api.get("/rule-events", params={"parked": "true", "limit": 2}).json()
        rest = api.get("/rule-events", params={"parked": "true", "after": parked["next"]}).json()
        assert [e["event_id"] for e in parked["rule_events"] + rest["rule_events"]] == [1, 2, 3]
        assert parked["next"] == "2:b1" and rest["next"] is None
        assert api.get("/rule-events", params={"parked": "false"}).json()["rule_events"] == []
        _error(api.get("/rule-events", params={"parked": "maybe"}), 400, "parked must be true or false")
        _error(api.get("/rule-events", params={"after": "b1"}), 400, "after must be")


def test_refusals_are_listed_per_device(served: Served) -> None:
    with served.client("viewer") as api:
        every = api.get("/refusals").json()["refusals"]
        assert {(r["device"], r["queue"], r["reason"], r["count"]) for r in every} == {
            ("DEV1", "ORDERS", "no-queue", 2), ("DEV2", "OTHER", "too-large", 1)}
        only = api.get("/refusals", params={"device": "DEV2"}).json()["refusals"]
        assert [r["device"] for r in only] == ["DEV2"]


def test_bridges_are_listed_and_shown_as_edgeq_bridge_status_shows_them(served: Served) -> None:
    status = json.loads(edgeq("--db", str(served.db), "bridge", "status", "--json").stdout)
    with served.client("viewer") as api:
        listed = api.get("/bridges").json()["bridges"]
        assert listed == status and [b["name"] for b in listed] == ["alerts-in", "orders-out"]
        out = api.get("/bridges/orders-out").json()
        _error(api.get("/bridges/NOSUCH"), 404, "no bridge 'NOSUCH' is defined")
        _error(api.get("/bridges/bad%20name"), 400, "bridge name")
    assert out == listed[1]
    assert {k: out[k] for k in ("kind", "queue", "topics", "running", "connected", "forwarded", "backlog",
                                "errors", "last_error")} == {
        "kind": "mqtt-out", "queue": "ORDERS", "topics": ["edge/orders"], "running": True, "connected": True,
        "forwarded": 4, "backlog": 5, "errors": 1, "last_error": "the broker said no"}
    assert out["last_forward_ms"] is not None
    assert (listed[0]["running"], listed[0]["backlog"], listed[0]["forwarded"]) == (False, None, 0)


# -- acting --------------------------------------------------------------------------------------


def test_a_viewer_is_refused_every_action_and_nothing_changes(served: Served) -> None:
    before = len(_actions(served))
    with served.client("viewer") as api:
        for path in ("/queues/PURGEME/purge", f"/dead-letters/{served.dead[0]}/resend",
                     f"/dead-letters/{served.dead[0]}/delete", "/devices/DEV2/revoke"):
            _error(api.post(path), 403, "needs the operator role; token:ops-viewer is a viewer")
    with served.open() as qm:
        assert qm.depth("PURGEME") == 3 and len(qm.dlq_browse()) == 2 and qm.device("DEV2").revoked_ms is None
    recorded = _actions(served)[: len(_actions(served)) - before]
    assert {(a["who"], a["outcome"]) for a in recorded} == {("token:ops-viewer", "refused")}
    assert [a["action"] for a in reversed(recorded)] == [
        "purge-queue", "resend-dead-letter", "delete-dead-letter", "revoke-device"]


def test_an_operator_purges_a_queue(served: Served) -> None:
    with served.client("operator") as api:
        assert api.post("/queues/PURGEME/purge").json() == {"queue": "PURGEME", "purged": 3}
        _error(api.post("/queues/NOSUCH/purge"), 404, "NOSUCH")
    with served.open() as qm:
        assert qm.depth("PURGEME") == 0
    done = _actions(served)[1]
    assert (done["who"], done["action"], done["target"], done["outcome"]) == (
        "token:ops-operator", "purge-queue", "PURGEME", "done")


def test_an_operator_resends_a_dead_letter_to_its_queue_and_deletes_another(served: Served) -> None:
    back, gone = served.dead
    with served.client("operator") as api:
        listed = api.get("/dead-letters").json()["messages"]
        assert sorted(m["uid"] for m in listed) == served.dead
        assert {m["fields"]["dlq.queue"]["value"] for m in listed} == {"METRICS"}
        assert api.get(f"/dead-letters/{gone}").json()["data_text"] == "reading 1"
        assert api.post(f"/dead-letters/{back}/resend").json() == {"resent": [back]}
        assert api.post(f"/dead-letters/{gone}/delete").json() == {"deleted": 1, "uid": gone}
        _error(api.post(f"/dead-letters/{gone}/delete"), 404, gone)
        _error(api.post(f"/dead-letters/{gone}/resend"), 404, "not on the dead-letter queue")
        _error(api.post("/dead-letters/nonsense/resend"), 400, "is not a message uid")
        assert api.get("/dead-letters").json()["messages"] == []
    with served.open() as qm:
        moved = qm.exchange.next_for_transmission("METRICS", 10)
        assert [str(m.uid) for m in moved] == [back] and qm.dlq_browse() == []
    outcomes = [(a["action"], a["outcome"]) for a in _actions(served)[:5]]
    assert outcomes == [("resend-dead-letter", "failed"), ("resend-dead-letter", "failed"),
                        ("delete-dead-letter", "failed"), ("delete-dead-letter", "done"),
                        ("resend-dead-letter", "done")]


def test_an_operator_revokes_a_device_once(served: Served) -> None:
    with served.client("operator") as api:
        first = api.post("/devices/DEV2/revoke").json()
        assert first["revoked"] is True and first["device"]["revoked_ms"] is not None
        again = api.post("/devices/DEV2/revoke").json()
        assert again["revoked"] is False and "already" in again["detail"]
    with served.open() as qm:
        assert qm.device("DEV2").revoked_ms == first["device"]["revoked_ms"]


def test_the_record_of_actions_comes_a_page_at_a_time_newest_first(served: Served) -> None:
    with served.client("viewer") as api:
        for _ in range(2):
            assert api.post("/devices/NOSUCH/revoke").status_code == 403  # refused, recorded
        every = _actions(served)
        first = api.get("/actions", params={"limit": 1}).json()
        second = api.get("/actions", params={"limit": 1, "before": first["next"]}).json()
        assert first["actions"] + second["actions"] == every[:2]
        whole = api.get("/actions", params={"limit": len(every) + 1}).json()
        assert whole["actions"] == every and whole["next"] is None
        _error(api.get("/actions", params={"before": "x"}), 400, "before must be")


def test_an_operator_retries_or_drops_a_parked_rule_event_and_a_viewer_cannot(served: Served) -> None:
    def parked() -> list[int]:
        with served.client("viewer") as api:
            found = api.get("/rule-events", params={"parked": "true"}).json()["rule_events"]
            return [e["event_id"] for e in found]

    assert parked() == [1, 2, 3]
    with served.client("viewer") as api:
        for path in ("/rule-events/1/retry", "/rule-events/1/drop"):
            _error(api.post(path), 403, "needs the operator role; token:ops-viewer is a viewer")
    assert parked() == [1, 2, 3]
    with served.client("operator") as api:
        dropped = api.post("/rule-events/3/drop").json()
        assert dropped["event_id"] == 3 and [d["binding"] for d in dropped["dropped"]] == ["b1"]
        _error(api.post("/rule-events/3/drop"), 404, "rule event 3 has no parked delivery")
        _error(api.post("/rule-events/x/retry"), 400, "a rule event's id is a whole number")
        again = api.post("/rule-events/1/retry").json()  # the rule still raises: waiting for its next retry
        assert again["succeeded"] == 0
        assert [(f["event_id"], f["parked"]) for f in again["failing"]] == [(1, False)]
        assert "failing on purpose" in again["failing"][0]["last_error"]
        (served.db.parent / "fail").unlink()  # the rule works again
        done = api.post("/rule-events/2/retry").json()
        assert done == {"event_id": 2, "retried": 1, "succeeded": 1, "failing": []}
    assert parked() == []
    with sqlite3.connect(served.db) as conn:
        assert conn.execute("SELECT event_id FROM rule_failures").fetchall() == [(1,)]
        assert conn.execute("SELECT count(*) FROM rule_events WHERE id IN (2, 3)").fetchone() == (0,)
    recorded = [(a["action"], a["target"], a["outcome"]) for a in _actions(served)[:5]]
    assert recorded == [("retry-rule-event", "2", "done"), ("retry-rule-event", "1", "done"),
                        ("retry-rule-event", "x", "failed"), ("drop-rule-event", "3", "failed"),
                        ("drop-rule-event", "3", "done")]
    with served.client("viewer") as api:
        only = api.get("/actions", params={"who": "token:ops-viewer", "action": "drop-rule-event"}).json()
        assert [(a["who"], a["outcome"]) for a in only["actions"]] == [("token:ops-viewer", "refused")]


def test_sending_an_admin_request_without_an_operator_key_is_a_409_saying_what_to_do(served: Served) -> None:
    with served.client() as api:
        _error(api.post("/admin-requests", json={"device": "DEV1", "action": "inquire-all"}), 409,
               "no operator key to sign admin requests with: start it with edgeq serve --console --admin-key")
    with QueueManager(served.db, keys=served.keys) as qm:
        assert "DEV1.SYSTEM.ADMIN" not in qm.queue_names()  # nothing was queued
    assert _actions(served)[0]["outcome"] == "failed"

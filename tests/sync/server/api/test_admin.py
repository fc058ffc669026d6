"""Admin requests over the management API against a real ``edgeq serve --console --admin-key`` (one per
module, signed sync on) and a real device syncing with ``edgeq sync --once``: a request sent through the
API is signed with the server's operator key, the device runs it and its reply shows; a re-send (the same
id) is answered from the device's remembered reply, never run twice; roles, records and errors."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from edgeq import Message, QueueManager
from edgeq.admin.wire import AdminRequest
from edgeq.sync.keys import new_key_pair
from edgeq.sync.server.admin.client import OperatorKey, new_operator_key
from edgeq.sync.server.admin.records import AdminRecords
from edgeq.sync.server.console.auth import set_password
from tests.sync.conftest import EDGEQ, ServedConsole, edgeq_serve_console


def edgeq(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*EDGEQ, *args], capture_output=True, text=True, timeout=120)


@dataclass
class Served:
    console: ServedConsole
    home: Path
    device: tuple[Path, Path]  # DEV1's store and its key
    tokens: dict[str, str]
    expired: str  # the id of a request recorded with an expiry long past
    token_files: dict[str, Path]

    def local(self, *args: str) -> subprocess.CompletedProcess[str]:
        return edgeq("admin", "--db", str(self.home), *args)

    def remote(self, *args: str, role: str = "operator") -> subprocess.CompletedProcess[str]:
        return edgeq("admin", "--server", self.console.console_url, "--token-file",
                     str(self.token_files[role]), *args)

    def client(self, role: str = "operator") -> httpx.Client:
        return httpx.Client(base_url=self.console.console_url + "/api/v1", timeout=30,
                            headers={"Authorization": f"Bearer {self.tokens[role]}"})

    def sync(self) -> None:
        """``edgeq sync --once`` of DEV1: it takes its requests and pushes their replies back."""
        db, key = self.device
        done = edgeq("sync", "--db", str(db), "--server", self.console.url, "--once", "--key", str(key))
        assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("admin-api")
    home, operator = tmp / "home.db", tmp / "operator.key"
    pair, key_id = new_operator_key(operator)
    device_key = new_key_pair(tmp / "dev1.key")
    with QueueManager(home, name="HOME") as qm:
        qm.register_device("DEV1", device_key.public_key, queues=["ORDERS"])
        qm.register_device("GONE", new_key_pair(tmp / "gone.key").public_key)
        qm.revoke_device("GONE")
    with QueueManager(tmp / "dev1.db", name="DEV1") as dev:
        dev.trust_admin_key(key_id, pair.public_key)
        dev.define_queue("LOGS")
        dev.put_many("LOGS", [Message(b"log")] * 3)
    records = AdminRecords(str(home))
    try:  # a request whose expiry passed long ago
        old = AdminRequest.create("inquire-all", device="DEV1", reply_qmgr="HOME", created_ms=1_000,
                                  key_id=key_id, expires_ms=2_000)
        old = old.sign(OperatorKey.load(operator).private_key)
        records.add(old, old.to_bytes())
    finally:
        records.close()
    set_password(home, "operator-pass-1")
    tokens = {role: edgeq("server", "token", "create", "--name", role, "--role", role, "--db",
                          str(home)).stdout.strip() for role in ("viewer", "operator")}
    token_files = {role: tmp / f"{role}.token" for role in tokens}
    for role, path in token_files.items():
        path.write_text(tokens[role])
        path.chmod(0o600)
    with edgeq_serve_console(home, "--auth", "--admin-key", str(operator)) as console:
        yield Served(console, home, (tmp / "dev1.db", device_key.private_path), tokens, old.request_id,
                     token_files)


def _error(response: httpx.Response, status: int, says: str) -> None:
    assert response.status_code == status, response.text
    assert says in response.json()["error"], response.json()


def _actions(served: Served) -> list[dict[str, Any]]:
    with served.client("viewer") as api:
        return list(api.get("/actions", params={"limit": 500}).json()["actions"])


def test_the_console_says_which_key_signs_admin_requests(served: Served) -> None:
    logged = [json.loads(line) for line in served.console.lines if line.startswith("{")]
    (console,) = [e for e in logged if e["event"] == "console"]
    assert console["admin_key"] is not None and "signed with key" in console["msg"]


def test_a_request_sent_through_the_api_gets_its_reply_and_a_resend_never_runs_twice(served: Served) -> None:
    with served.client() as api:
        sent = api.post("/admin-requests", json={"device": "DEV1", "action": "define-queue",
                                                 "target": "ALERTS", "params": {"expiry_ms": 60_000}})
        assert sent.status_code == 200, sent.text
        define = sent.json()
        assert (define["device"], define["action"], define["target"], define["status"]) == (
            "DEV1", "define-queue", "ALERTS", "pending")
        purge = api.post("/admin-requests", json={"device": "DEV1", "action": "purge",
                                                  "target": "LOGS"}).json()
        assert api.get(f"/admin-requests/{purge['request_id']}").json()["status"] == "pending"
        served.sync()
        listed = api.get("/admin-requests", params={"device": "DEV1", "status": "replied"}).json()
        ids = {r["request_id"] for r in listed["admin_requests"]}  # the list collects the replies too
        assert {purge["request_id"], define["request_id"]} <= ids
        shown = api.get(f"/admin-requests/{define['request_id']}").json()
        assert shown["status"] == "replied" and shown["rc"] == "success", shown
        assert shown["reply"]["results"][0]["attributes"]["expiry_ms"] == 60_000
        purged = api.get(f"/admin-requests/{purge['request_id']}").json()
        assert purged["rc"] == "success" and purged["reply"]["results"][0]["purged"] == 3

        with QueueManager(served.device[0]) as dev:
            assert "ALERTS" in dev.queue_names()
            dev.put_many("LOGS", [Message(b"later")] * 2)
        again = api.post(f"/admin-requests/{purge['request_id']}/resend")
        assert again.status_code == 200 and again.json()["request_id"] == purge["request_id"], again.text
        assert again.json()["resent"] is True
        with QueueManager(served.home) as home:
            assert home.depth("DEV1.SYSTEM.ADMIN") == 1  # queued again for the device
        served.sync()
        with QueueManager(served.home) as home:
            assert home.depth("DEV1.SYSTEM.ADMIN") == 0  # the device took it
        with QueueManager(served.device[0]) as dev:
            assert dev.depth("LOGS") == 2  # the same request: answered from memory, not run again
        assert api.get(f"/admin-requests/{purge['request_id']}").json()["reply"]["results"][0]["purged"] == 3
    done = [(a["action"], a["target"], a["outcome"]) for a in _actions(served)]
    assert ("send-admin-request", "DEV1", "done") in done and ("resend-admin-request", purge["request_id"],
                                                                "done") in done


def test_a_viewer_may_not_send_or_resend_and_nothing_is_queued(served: Served) -> None:
    with QueueManager(served.home) as home:
        before = home.depth("DEV1.SYSTEM.ADMIN") if "DEV1.SYSTEM.ADMIN" in home.queue_names() else 0
    with served.client("viewer") as api:
        _error(api.post("/admin-requests", json={"device": "DEV1", "action": "purge", "target": "LOGS"}),
               403, "send-admin-request needs the operator role; token:viewer is a viewer")
        _error(api.post(f"/admin-requests/{served.expired}/resend"), 403, "needs the operator role")
    with QueueManager(served.home) as home:
        after = home.depth("DEV1.SYSTEM.ADMIN") if "DEV1.SYSTEM.ADMIN" in home.queue_names() else 0
    assert after == before
    refused = [(a["action"], a["who"]) for a in _actions(served) if a["outcome"] == "refused"]
    assert ("send-admin-request", "token:viewer") in refused
    assert ("resend-admin-request", "token:viewer") in refused


@pytest.mark.parametrize(("body", "status", "says"), [
    ({"action": "purge", "target": "LOGS"}, 400, 'give "device"'),
    ({"device": "DEV1", "action": "reboot"}, 400, "is not an admin action: one of inquire-queue"),
    ({"device": "DEV1", "action": "purge", "target": 7}, 400, '"target" must be a queue name'),
    ({"device": "DEV1", "action": "define-queue", "target": "Q", "params": [1]}, 400, '"params" must be'),
    ({"device": "DEV1", "action": "define-queue", "target": "Q", "params": {"x": 1.5}}, 400, "float"),
    ({"device": "DEV1", "action": "inquire-all", "expires_in_ms": 0}, 400, '"expires_in_ms" must be'),
    ({"device": "NOSUCH", "action": "inquire-all"}, 404, "no device 'NOSUCH' is known here"),
    ({"device": "GONE", "action": "inquire-all"}, 409, "device GONE is revoked"),
])
def test_bad_requests_are_refused_saying_why_and_recorded(served: Served, body: dict[str, Any], status: int,
                                                          says: str) -> None:
    with served.client() as api:
        _error(api.post("/admin-requests", json=body), status, says)
    assert _actions(served)[0]["outcome"] == "failed"


def test_showing_and_resending_unknown_expired_or_malformed_ids(served: Served) -> None:
    missing = "ab" * 16
    with served.client() as api:
        _error(api.get(f"/admin-requests/{missing}"), 404, f"no admin request {missing}")
        _error(api.get("/admin-requests/not-an-id"), 400, "is not an admin request id")
        _error(api.post(f"/admin-requests/{missing}/resend"), 404, "no admin request")
        _error(api.post(f"/admin-requests/{served.expired}/resend"), 409, "expired")
        _error(api.post("/admin-requests", content=b"[1, 2]"), 400, "must be a JSON object")
        assert api.get(f"/admin-requests/{served.expired}").json()["status"] == "expired"


def test_edgeq_admin_through_the_api_prints_what_it_prints_on_the_store(served: Served) -> None:
    sent = served.remote("DEV1", "queue", "depth", "LOGS")
    assert sent.returncode == 0, sent.stderr
    request_id = sent.stdout.split("request ")[1].strip()
    assert sent.stdout == f"Sent inquire-queue LOGS to DEV1: request {request_id}\n"
    assert f"--server {served.console.console_url} --token-file {served.token_files['operator']} show " \
        f"{request_id} --wait 30s" in sent.stderr
    pending = served.remote("pending", role="viewer")
    assert request_id in pending.stdout and pending.stdout == served.local("pending").stdout
    served.sync()
    for args in (("show", request_id), ("show", request_id, "--json"), ("replies", "--limit", "3"),
                 ("replies", "--json", "--device", "DEV1"), ("pending",)):
        remote, local = served.remote(*args, role="viewer"), served.local(*args)
        assert (remote.returncode, remote.stdout) == (local.returncode, local.stdout), args
    assert served.remote("show", "ab" * 16).returncode == 1


def test_edgeq_admin_resend_through_the_api(served: Served) -> None:
    sent = served.remote("DEV1", "queue", "show", "LOGS", "--json")
    request_id = json.loads(sent.stdout)["request_id"]
    again = served.remote("resend", request_id, "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["request_id"] == request_id, again.stderr
    assert served.remote("resend", request_id, role="viewer").returncode == 1
    lapsed = served.remote("resend", served.expired)
    assert lapsed.returncode == 1 and "answered 409" in lapsed.stderr
    assert "send a new request" in lapsed.stderr
    served.sync()
    assert served.remote("show", request_id).returncode == 0  # replied: success


def test_edgeq_admin_waits_through_the_api_until_the_device_answers(served: Served) -> None:
    waiting = subprocess.Popen([*EDGEQ, "admin", "--server", served.console.console_url, "--token-file",
                                str(served.token_files["operator"]), "DEV1", "queue", "list", "--wait", "2m"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for _ in range(20):  # sync until the command has its reply (it sends its request at some point)
        served.sync()
        if waiting.poll() is not None:
            break
    out, err = waiting.communicate(timeout=150)
    assert waiting.returncode == 0, err
    assert out.startswith("DEV1 inquire-all: replied: success") and "ALERTS" in out


def test_a_viewer_s_edgeq_admin_request_is_refused(served: Served) -> None:
    refused = served.remote("DEV1", "queue", "purge", "LOGS", role="viewer")
    assert refused.returncode == 1 and "answered 403" in refused.stderr
    assert "send-admin-request needs the operator role" in refused.stderr

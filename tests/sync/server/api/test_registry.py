"""Registering devices over the management API against a real ``edgeq serve --console --auth`` (one per
module): register, re-key and change queues, each an operator's action (a viewer is refused, nothing
changes, the refusal is recorded), with the store's checks (a shared key, a device registered already);
a re-keyed device's requests signed with its old key are refused and those with its new key taken."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from edgeq import QueueManager
from edgeq.sync.keys import KeyPair, fingerprint, new_key_pair
from edgeq.sync.server.console.auth import set_password
from tests.sync.conftest import EDGEQ, ServedConsole, edgeq_serve_console


def edgeq(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*EDGEQ, *args], capture_output=True, text=True, timeout=120)


@dataclass
class Served:
    console: ServedConsole
    home: Path
    tmp: Path
    tokens: dict[str, str]
    keys: dict[str, KeyPair]

    def client(self, role: str = "operator") -> httpx.Client:
        return httpx.Client(base_url=self.console.console_url + "/api/v1", timeout=30,
                            headers={"Authorization": f"Bearer {self.tokens[role]}"})

    def pem(self, name: str) -> str:
        return self.keys[name].public_path.read_text()

    def device(self, name: str) -> Any:
        with QueueManager(self.home) as qm:
            return qm.device(name)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("registry")
    home = tmp / "home.db"
    keys = {name: new_key_pair(tmp / f"{name}.key") for name in ("old", "new", "other", "spare")}
    with QueueManager(home, name="HOME") as qm:
        qm.register_device("DEV1", keys["old"].public_key, queues=["ORDERS"])
        qm.exchange.record_device("HEARD")  # heard from, never registered
    with QueueManager(tmp / "dev1.db", name="DEV1"):
        pass
    set_password(home, "operator-pass-1")
    tokens = {role: edgeq("server", "token", "create", "--name", role, "--role", role, "--db",
                          str(home)).stdout.strip() for role in ("viewer", "operator")}
    with edgeq_serve_console(home, "--auth") as console:
        yield Served(console, home, tmp, tokens, keys)


def _error(response: httpx.Response, status: int, says: str) -> None:
    assert response.status_code == status, response.text
    assert says in response.json()["error"], response.json()


def _last_action(served: Served) -> tuple[str, str, str]:
    with served.client("viewer") as api:
        last = api.get("/actions", params={"limit": 1}).json()["actions"][0]
    return last["action"], last["target"], last["outcome"]


def test_register_a_device_then_refuse_it_again_or_its_key_for_another(served: Served) -> None:
    with served.client() as api:
        made = api.post("/devices", json={"name": "DEV2", "public_key": served.pem("other"), "queues": ["A"]})
        assert made.status_code == 200, made.text
        device = made.json()["device"]
        assert (device["name"], device["queues"], device["registered"], device["public_key"]) == (
            "DEV2", ["A"], True, fingerprint(served.keys["other"].public_key))
        assert made.json()["shares_key_with"] == []
        assert _last_action(served) == ("register-device", "DEV2", "done")

        _error(api.post("/devices", json={"name": "DEV2", "public_key": served.pem("spare")}), 409,
               "device DEV2 is registered already: re-key it")
        _error(api.post("/devices", json={"name": "DEV3", "public_key": served.pem("other")}), 409,
               "that key is already registered to DEV2")
        assert served.device("DEV3") is None
        assert _last_action(served) == ("register-device", "DEV3", "failed")
        shared = api.post("/devices", json={"name": "DEV3", "public_key": served.pem("other"), "force": True})
        assert shared.status_code == 200 and shared.json()["shares_key_with"] == ["DEV2"], shared.text
        replaced = api.post("/devices", json={"name": "DEV3", "public_key": served.pem("spare"),
                                              "replace": True, "queues": None})
        assert replaced.status_code == 200 and replaced.json()["device"]["queues"] is None
        heard = api.post("/devices", json={"name": "HEARD", "public_key": served.pem("spare"), "force": True})
        assert heard.status_code == 200 and heard.json()["device"]["registered"] is True  # no replacement


@pytest.mark.parametrize(("body", "says"), [
    ({"public_key": "x"}, "give the device's name"),
    ({"name": "bad name", "public_key": "x"}, "device name"),
    ({"name": "DEV.9", "public_key": "@spare"}, "must not contain '.'"),
    ({"name": "DEV9"}, 'give "public_key"'),
    ({"name": "DEV9", "public_key": "not a key"}, "public_key is not a PEM public key"),
    ({"name": "DEV9", "public_key": "@spare", "queues": "ORDERS"}, '"queues" must be a list'),
    ({"name": "DEV9", "public_key": "@spare", "queues": ["bad name"]}, "queue name"),
    ({"name": "DEV9", "public_key": "@spare", "force": "yes"}, '"force" must be true or false'),
])
def test_a_bad_registration_is_a_400_saying_why(served: Served, body: dict[str, Any], says: str) -> None:
    if body.get("public_key") == "@spare":  # a good key: the other field is what is wrong
        body = {**body, "public_key": served.pem("spare")}
    with served.client() as api:
        _error(api.post("/devices", json=body), 400, says)
    assert served.device("DEV9") is None and served.device("DEV.9") is None


def test_a_viewer_may_not_register_rekey_or_change_queues(served: Served) -> None:
    before = served.device("DEV1")
    with served.client("viewer") as api:
        for response, action in (
                (api.post("/devices", json={"name": "DEV7", "public_key": served.pem("spare")}),
                 "register-device"),
                (api.post("/devices/DEV1/key", json={"public_key": served.pem("spare")}), "rekey-device"),
                (api.put("/devices/DEV1/queues", json={"queues": None}), "set-device-queues"),
                (api.post("/devices", content=b"not json"), "register-device")):
            _error(response, 403, f"{action} needs the operator role; token:viewer is a viewer")
            assert _last_action(served)[2] == "refused"
    assert served.device("DEV7") is None and served.device("DEV1") == before


def test_rekey_refuses_the_old_key_takes_the_new_keeps_queues_and_lifts_a_revocation(served: Served) -> None:
    def sync(key: str) -> subprocess.CompletedProcess[str]:
        return edgeq("sync", "--db", str(served.tmp / "dev1.db"), "--server", served.console.url, "--once",
                     "--key", str(served.keys[key].private_path))

    assert sync("old").returncode == 0
    with served.client() as api:
        _error(api.post("/devices/NOSUCH/key", json={"public_key": served.pem("new")}), 404,
               "register it first")
        _error(api.post("/devices/HEARD2/key", json={"public_key": "x"}), 400, "not a PEM public key")
        assert api.post("/devices/DEV1/revoke").status_code == 200
        rekeyed = api.post("/devices/DEV1/key", json={"public_key": served.pem("new")})
        assert rekeyed.status_code == 200, rekeyed.text
        device = rekeyed.json()["device"]
        assert (device["public_key"], device["queues"], device["revoked_ms"]) == (
            fingerprint(served.keys["new"].public_key), ["ORDERS"], None)
    old = sync("old")
    assert old.returncode != 0 and "bad signature for device DEV1" in old.stdout + old.stderr
    assert sync("new").returncode == 0


def test_set_queues_with_put_or_post(served: Served) -> None:
    with served.client() as api:
        changed = api.put("/devices/DEV1/queues", json={"queues": ["ORDERS", "TELEMETRY"]})
        assert changed.status_code == 200 and changed.json()["device"]["queues"] == ["ORDERS", "TELEMETRY"]
        assert api.post("/devices/DEV1/queues", json={"queues": []}).json()["device"]["queues"] == []
        assert api.put("/devices/DEV1/queues", json={"queues": None}).json()["device"]["queues"] is None
        _error(api.put("/devices/DEV1/queues", json={}), 400, 'give "queues"')
        _error(api.put("/devices/NOSUCH/queues", json={"queues": []}), 404,
               "no device 'NOSUCH' is registered")
        _error(api.put("/devices/DEV1/queues", content=b"{nope"), 400, "the body is not JSON")
    assert served.device("DEV1").queues is None
    assert _last_action(served) == ("set-device-queues", "NOSUCH", "failed")

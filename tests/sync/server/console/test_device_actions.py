"""The console's device and admin-request actions in Chromium, against one real ``edgeq serve --console
--admin-key`` and a real device (``edgeq sync --once``): an operator (alice) registers a device, re-keys
it, changes its queues, sends an admin request and sees the device's reply, re-sends it; a viewer (bob)
sees no form and his forged posts (403) change nothing; pages never say "pending" once a reply waits."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By

from edgeq import Message, QueueManager
from edgeq.sync.keys import new_key_pair
from edgeq.sync.server.admin.client import AdminClient, OperatorKey, new_operator_key
from edgeq.sync.server.console.auth import add_account
from tests.sync.conftest import EDGEQ, edgeq_serve_console
from tests.sync.server.console.test_browser import _sign_in, chromium
from tests.sync.server.console.test_pages import Site

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

"""edgeq.sync.server.api.auth: a console session reaches the API with its role and its lifetime
(the console's app and the API's routes served as the console's process serves them, on the
server's clock)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

import httpx
import pytest

from edgeq import ManualClock, Message, QueueManager
from edgeq.sync.server.api.audit import recorded
from edgeq.sync.server.api.auth import CSRF_HEADER
from edgeq.sync.server.api.routes import api_routes
from edgeq.sync.server.console.auth import SESSION_MS, set_password
from edgeq.sync.server.console.routes import console_app
from tests.sync.conftest import LiveServer

PASSWORD = "viewer-pass-1"


@pytest.fixture
def browser(home_qm: QueueManager, server_clock: ManualClock,
            make_server: Callable[..., LiveServer]) -> Iterator[httpx.Client]:
    set_password(home_qm.path, PASSWORD, "viewer")
    app = console_app(home_qm, clock=server_clock, api=api_routes(home_qm, clock=server_clock))
    with httpx.Client(base_url=make_server(home_qm, app=app).url, timeout=10) as client:
        assert client.post("/console/login", data={"user": "viewer", "password": PASSWORD}).status_code == 303
        yield client


def test_a_viewer_s_session_reads_and_is_refused_actions(
    browser: httpx.Client, home_qm: QueueManager
) -> None:
    home_qm.put("ORDERS", Message(b"kept"))
    csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', browser.get("/console").text)
    assert csrf is not None
    assert [q["depth"] for q in browser.get("/api/v1/queues").json()["queues"]] == [1]
    refused = browser.post("/api/v1/queues/ORDERS/purge", headers={CSRF_HEADER: csrf[1]})
    assert refused.status_code == 403 and refused.json()["error"] == (
        "purge-queue needs the operator role; console:viewer is a viewer")
    assert home_qm.depth("ORDERS") == 1
    (action,) = recorded(home_qm.path, before=None, limit=10)
    assert (action["who"], action["role"], action["outcome"]) == ("console:viewer", "viewer", "refused")


def test_a_session_reaches_the_api_only_while_it_lasts(
    browser: httpx.Client, server_clock: ManualClock
) -> None:
    assert browser.get("/api/v1/devices").status_code == 200
    server_clock.advance(SESSION_MS)
    expired = browser.get("/api/v1/devices")
    assert expired.status_code == 401 and "no credential" in expired.json()["error"]

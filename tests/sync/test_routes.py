"""The home server's routes: handlers that decode, call the service, encode; /healthz,
/metrics, and HTTP errors in CBOR. Driven in-process (httpx's ASGI transport)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import cbor2
import httpx
import pytest
from edgeq.sync import protocol as p
from edgeq.sync.home import HomeService
from edgeq.sync.routes import HomeRoutes, http_error, protocol_route
from starlette.applications import Starlette
from starlette.exceptions import HTTPException

from edgeq import ManualClock, QueueManager

from .conftest import T0

CBOR = {"content-type": p.CONTENT_TYPE}


@pytest.fixture
def service(tmp_path: Path) -> Iterator[HomeService]:
    clock = ManualClock(T0)
    qm = QueueManager(tmp_path / "home.db", name="HOME", clock=clock)
    qm.define_queue("ORDERS")
    yield HomeService(qm, clock=clock)
    qm.close()


def requests(app: Starlette, *calls: tuple[str, str, bytes | None]) -> list[httpx.Response]:
    """Make each ``(method, path, body)`` request of the app, in order."""

    async def run() -> list[httpx.Response]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://home") as client:
            return [await client.request(method, path, content=body, headers=CBOR if body is not None else None)
                    for method, path, body in calls]

    return asyncio.run(run())


def app_of(service: HomeService) -> Starlette:
    return Starlette(routes=HomeRoutes(service).routes, exception_handlers={HTTPException: http_error})


def test_a_protocol_route_decodes_runs_the_handler_off_the_event_loop_and_encodes() -> None:
    seen: list[tuple[Mapping[str, Any], bool]] = []

    def handler(body: Mapping[str, Any]) -> dict[str, Any]:
        seen.append((body, threading.current_thread() is threading.main_thread()))
        return {"type": "echo", "data": b"\x00\xff"}

    app = Starlette(routes=[protocol_route("/v1/echo", handler)])
    (response,) = requests(app, ("POST", "/v1/echo", p.encode_body({"type": "echo", "n": 1})))
    assert response.status_code == 200 and response.headers["content-type"] == p.CONTENT_TYPE
    assert cbor2.loads(response.content) == {"v": 1, "type": "echo", "data": b"\x00\xff"}
    assert seen == [({"v": 1, "type": "echo", "n": 1}, False)]  # in the thread pool: SQLite blocks


def test_the_home_routes_serve_the_service(service: HomeService) -> None:
    hello = p.encode_body({"type": "hello", "qmgr": "DEV1", "now_ms": T0 - 250})
    answer, metrics = requests(app_of(service), ("POST", p.PATH_HELLO, hello), ("GET", "/metrics", None))
    assert answer.status_code == 200
    body = cbor2.loads(answer.content)
    assert (body["type"], body["server"], body["offset_ms"]) == ("hello", "HOME", 250)
    state = service.sessions.current("DEV1")
    assert state is not None and state.clock_offset_ms == 250  # the session is the service's
    assert metrics.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert 'edgeq_sync_device_clock_offset_seconds{device="DEV1"} 0.25' in metrics.text
    assert 'edgeq_sync_requests_total{endpoint="/v1/hello",status="200"} 1' in metrics.text


def test_healthz_reports_the_store_or_503(service: HomeService, monkeypatch: pytest.MonkeyPatch) -> None:
    (ok,) = requests(app_of(service), ("GET", "/healthz", None))
    assert (ok.status_code, ok.json()) == (200, {"status": "ok", "qmgr": "HOME", "queues": 1, "protocol": 1})

    def broken() -> list[str]:
        raise OSError("disk gone")

    monkeypatch.setattr(service.qm, "queue_names", broken)
    (down,) = requests(app_of(service), ("GET", "/healthz", None))
    assert (down.status_code, down.json()) == (503, {"status": "error", "detail": "disk gone"})


def test_unknown_paths_and_methods_answer_in_cbor_and_are_not_counted(service: HomeService) -> None:
    missing, wrong, metrics = requests(
        app_of(service), ("POST", "/v1/nope", b""), ("GET", p.PATH_PUT, None), ("GET", "/metrics", None))
    assert (missing.status_code, cbor2.loads(missing.content)["code"]) == (404, "not-found")
    assert (wrong.status_code, cbor2.loads(wrong.content)["code"]) == (405, "method-not-allowed")
    assert cbor2.loads(wrong.content)["detail"] == f"GET {p.PATH_PUT}: method-not-allowed"
    assert "edgeq_sync_requests_total{" not in metrics.text

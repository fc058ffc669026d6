"""The home server's routes: handlers that decode, call the service, encode; /healthz,
/metrics, and HTTP errors in CBOR. Driven in-process (httpx's ASGI transport) over a real
HomeService and store."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import cbor2
import httpx
import pytest
from starlette.applications import Starlette
from starlette.exceptions import HTTPException

from edgeq import ManualClock, Message, QueueManager
from edgeq.sync import protocol as p
from edgeq.sync.server.home import HomeService
from edgeq.sync.server.routes import HomeRoutes, http_error, protocol_route
from tests.sync.conftest import T0

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
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://home") as client:
            return [await client.request(method, path, content=body,
                                         headers=CBOR if body is not None else None)
                    for method, path, body in calls]

    return asyncio.run(run())


def app_of(service: HomeService) -> Starlette:
    return Starlette(routes=HomeRoutes(service).routes, exception_handlers={HTTPException: http_error})


def test_a_protocol_route_decodes_runs_the_handler_off_the_event_loop_and_encodes(
    service: HomeService
) -> None:
    seen: list[tuple[Mapping[str, Any], bool]] = []

    def pull(body: Mapping[str, Any]) -> dict[str, Any]:  # the service's own handler, watched
        seen.append((body, threading.current_thread() is threading.main_thread()))
        return service.pull(body)

    service.qm.define_queue("DEV1.INBOX")
    uid = service.qm.put("DEV1.INBOX", Message(b"\x00\xff"))
    app = Starlette(routes=[protocol_route(p.PATH_HELLO, service.hello), protocol_route(p.PATH_PULL, pull)])
    request = {"type": "pull", "qmgr": "DEV1", "now_ms": T0, "queue": "INBOX", "max": 5}
    hello, response = requests(app, ("POST", p.PATH_HELLO,
                                     p.encode_body({"type": "hello", "qmgr": "DEV1", "now_ms": T0})),
                               ("POST", p.PATH_PULL, p.encode_body(request)))
    assert hello.status_code == 200
    assert response.status_code == 200 and response.headers["content-type"] == p.CONTENT_TYPE
    answer = cbor2.loads(response.content)
    assert (answer["v"], answer["type"]) == (1, "pull")
    assert [(m["u"], m["d"]) for m in answer["messages"]] == [(str(uid), b"\x00\xff")]  # bytes stay bytes
    assert seen == [({"v": 1, **request}, False)]  # in the thread pool: SQLite blocks
    assert service.qm.browse("DEV1.INBOX") == []  # the handler ran: locked for the pull


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


def test_healthz_reports_the_store_or_503(service: HomeService) -> None:
    (ok,) = requests(app_of(service), ("GET", "/healthz", None))
    assert (ok.status_code, ok.json()) == (200, {"status": "ok", "qmgr": "HOME", "queues": 1, "protocol": 1,
                                                 "auth": "open"})

    service.qm.close()  # the store can no longer be read
    (down,) = requests(app_of(service), ("GET", "/healthz", None))
    assert down.status_code == 503 and down.json()["status"] == "error"
    assert "the queue manager is closed" in down.json()["detail"]


def test_unknown_paths_and_methods_answer_in_cbor_and_are_not_counted(service: HomeService) -> None:
    missing, wrong, metrics = requests(
        app_of(service), ("POST", "/v1/nope", b""), ("GET", p.PATH_PUT, None), ("GET", "/metrics", None))
    assert (missing.status_code, cbor2.loads(missing.content)["code"]) == (404, "not-found")
    assert (wrong.status_code, cbor2.loads(wrong.content)["code"]) == (405, "method-not-allowed")
    assert cbor2.loads(wrong.content)["detail"] == f"GET {p.PATH_PUT}: method-not-allowed"
    assert "edgeq_sync_requests_total{" not in metrics.text

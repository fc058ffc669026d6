"""The home server over real HTTP: clear error codes, nothing stored on a bad request."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import cbor2
import httpx
import pytest

from edgeq import ManualClock, QueueManager
from edgeq.sync import protocol as p
from tests.sync.conftest import T0, LiveServer

CBOR = {"content-type": p.CONTENT_TYPE}


def post(
    http: httpx.Client, server: LiveServer, path: str, body: Any, **kw: Any
) -> tuple[int, dict[str, Any]]:
    raw = body if isinstance(body, bytes) else p.encode_body(body)
    response = http.post(server.url + path, content=raw, headers=kw.pop("headers", CBOR), **kw)
    assert response.headers["content-type"].startswith(p.CONTENT_TYPE)
    return response.status_code, cbor2.loads(response.content)


def hello(http: httpx.Client, server: LiveServer, device: str = "DEV1", now: int = T0) -> dict[str, Any]:
    status, body = post(http, server, p.PATH_HELLO, {"type": "hello", "qmgr": device, "now_ms": now})
    assert status == 200, body
    return body


def put_body(*uids: str, queue: str = "ORDERS", now: int = T0, **extra: Any) -> dict[str, Any]:
    messages = [{"u": uid, "d": b"\x00payload\xff", "x": 60_000, **extra} for uid in uids]
    return {"type": "put", "qmgr": "DEV1", "now_ms": now, "queue": queue, "messages": messages}


def test_puts_are_rebased_on_server_ms_and_the_hello_offset_stays_as_measured(
    http: httpx.Client, server: LiveServer, home_qm: QueueManager
) -> None:
    """``server_ms`` is the device's lower bound of the server's clock when it read the
    remaining lifetimes, never trusted beyond the server's own clock; without it (an
    older agent) the hello's offset measures the transit. No request changes that offset."""
    hello(http, server, now=T0 - 400)  # a hello that spent 400 ms in the network (clocks agree)
    puts = {
        "DEV1.1000": {**put_body("DEV1.1000", now=T0 - 100), "server_ms": T0 - 250},  # read 250 ms ago
        "DEV1.2000": {**put_body("DEV1.2000", now=T0 - 100), "server_ms": T0 + 5_000},  # stale bounds
        "DEV1.3000": put_body("DEV1.3000", now=T0 - 1_000),  # legacy: 1,000 - 400 ms of transit
    }
    for body in puts.values():
        assert post(http, server, p.PATH_PUT, body)[0] == 200
        assert server.sessions.get("DEV1").clock_offset_ms == 400
    confirm = {"type": "confirm", "qmgr": "DEV1", "now_ms": T0, "queue": "ORDERS", "uids": list(puts)}
    assert post(http, server, p.PATH_CONFIRM, confirm)[0] == 200
    deadlines = {str(m.uid): m.expiry_deadline_ms for m in home_qm.browse("ORDERS")}
    assert deadlines == {"DEV1.1000": T0 + 59_750, "DEV1.2000": T0 + 60_000, "DEV1.3000": T0 + 59_400}
    status, body = post(http, server, p.PATH_PUT, {**put_body("DEV1.4000"), "server_ms": -1})
    assert (status, body["code"]) == (422, "invalid") and "server_ms" in body["detail"]


def test_hello_records_the_devices_clock_offset(http: httpx.Client, server: LiveServer) -> None:
    body = hello(http, server, now=T0 - 1_500)  # the device's clock is 1.5 s behind
    assert (body["v"], body["type"], body["server"], body["offset_ms"]) == (1, "hello", "HOME", 1_500)
    assert server.sessions.get("DEV1").clock_offset_ms == 1_500


def test_put_then_confirm_makes_messages_visible(http: httpx.Client, server: LiveServer,
                                                 home_qm: QueueManager) -> None:
    hello(http, server)
    status, body = post(http, server, p.PATH_PUT, put_body("DEV1.1000", "DEV1.2000"))
    assert status == 200 and [r["s"] for r in body["results"]] == ["stored", "stored"]
    assert home_qm.browse("ORDERS") == []  # locked and invisible until confirmed
    confirm = {"type": "confirm", "qmgr": "DEV1", "now_ms": T0, "queue": "ORDERS", "uids": ["DEV1.1000"]}
    status, body = post(http, server, p.PATH_CONFIRM, confirm)
    assert status == 200 and body["results"] == [{"u": "DEV1.1000", "s": "confirmed"}]
    assert [m.data for m in home_qm.browse("ORDERS")] == [b"\x00payload\xff"]


def test_requests_before_hello_are_told_to_say_hello(http: httpx.Client, server: LiveServer,
                                                     home_qm: QueueManager) -> None:
    status, body = post(http, server, p.PATH_PUT, put_body("DEV1.1000"))
    assert (status, body["code"]) == (428, "hello-required")
    assert home_qm.depth("ORDERS") == 0


def test_unknown_queue_is_a_per_message_result(http: httpx.Client, server: LiveServer) -> None:
    hello(http, server)
    status, body = post(http, server, p.PATH_PUT, put_body("DEV1.1000", queue="NOPE"))
    assert status == 200
    assert body["results"][0]["s"] == "refused" and body["results"][0]["why"].startswith("no-queue")


def _bad_requests() -> list[tuple[str, bytes, dict[str, str], int, str]]:
    good = p.encode_body(put_body("DEV1.1000"))
    return [
        ("truncated", good[:-5], CBOR, 400, "malformed"),
        ("garbage", b"\xff\x00not cbor", CBOR, 400, "malformed"),
        ("trailing", good + b"\x00", CBOR, 400, "malformed"),
        ("not a map", cbor2.dumps([1, 2, 3]), CBOR, 400, "malformed"),
        ("no version", cbor2.dumps({"type": "put"}), CBOR, 400, "unsupported-version"),
        ("future version", cbor2.dumps({**put_body("DEV1.1000"), "v": 2}), CBOR, 400, "unsupported-version"),
        ("json", b'{"v": 1}', {"content-type": "application/json"}, 415, "unsupported-media-type"),
        ("wrong type", p.encode_body({**put_body("DEV1.1000"), "type": "confirm"}), CBOR, 422, "invalid"),
        ("bad uid", p.encode_body(put_body("nodot")), CBOR, 422, "invalid"),
        ("text data", p.encode_body({**put_body(), "messages": [{"u": "DEV1.1", "d": "txt"}]}), CBOR, 422,
         "invalid"),
        ("no queue name", p.encode_body({**put_body("DEV1.1000"), "queue": ""}), CBOR, 422, "invalid"),
        ("bad priority", p.encode_body(put_body("DEV1.1000", p=12)), CBOR, 422, "invalid"),
        ("valid then bad", p.encode_body({**put_body("DEV1.1000"), "messages": [
            {"u": "DEV1.1000", "d": b"ok"}, {"u": "DEV1.2000", "d": b"ok", "x": -1}]}), CBOR, 422, "invalid"),
    ]


@pytest.mark.parametrize(("what", "raw", "headers", "status", "code"), _bad_requests(),
                         ids=[case[0] for case in _bad_requests()])
def test_bad_requests_get_clear_codes_and_store_nothing(
    http: httpx.Client, server: LiveServer, home_qm: QueueManager,
    what: str, raw: bytes, headers: dict[str, str], status: int, code: str,
) -> None:
    hello(http, server)
    got, body = post(http, server, p.PATH_PUT, raw, headers=headers)
    assert (got, body["code"], body["v"]) == (status, code, 1), body
    assert body["detail"]
    assert home_qm.depth("ORDERS") == 0
    # and the server keeps serving
    assert post(http, server, p.PATH_PUT, put_body("DEV1.3000"))[0] == 200


def test_oversized_bodies_are_refused_before_decoding(
    http: httpx.Client, home_qm: QueueManager, make_server: Callable[..., LiveServer]
) -> None:
    server = make_server(home_qm, max_body_bytes=4096)
    hello(http, server)
    big = put_body("DEV1.1000")
    big["messages"][0]["d"] = b"x" * 10_000
    status, body = post(http, server, p.PATH_PUT, big)
    assert (status, body["code"]) == (413, "too-large")
    # without a Content-Length (chunked), the limit holds while streaming
    chunks = iter([p.encode_body(big)[:3000], p.encode_body(big)[3000:]])
    response = http.post(server.url + p.PATH_PUT, content=chunks, headers=CBOR)
    assert (response.status_code, cbor2.loads(response.content)["code"]) == (413, "too-large")
    assert home_qm.depth("ORDERS") == 0


def test_too_many_messages_per_request_is_invalid(
    http: httpx.Client, home_qm: QueueManager, make_server: Callable[..., LiveServer]
) -> None:
    server = make_server(home_qm, max_batch=2)
    hello(http, server)
    status, body = post(http, server, p.PATH_PUT, put_body("DEV1.1000", "DEV1.2000", "DEV1.3000"))
    assert (status, body["code"]) == (422, "invalid") and "at most 2" in body["detail"]


def test_unknown_paths_and_methods_answer_in_cbor(http: httpx.Client, server: LiveServer) -> None:
    response = http.post(server.url + "/v1/nope", content=b"", headers=CBOR)
    assert (response.status_code, cbor2.loads(response.content)["code"]) == (404, "not-found")
    response = http.get(server.url + p.PATH_PUT)
    assert (response.status_code, cbor2.loads(response.content)["code"]) == (405, "method-not-allowed")


def test_authenticator_seam_refuses_with_401(
    http: httpx.Client, home_qm: QueueManager, make_server: Callable[..., LiveServer]
) -> None:
    seen: list[tuple[str | None, str]] = []

    def authenticate(request: Any) -> None:
        seen.append((request.device, request.path))
        if request.headers.get("x-token") != "s3cret":
            raise PermissionError("bad token")

    server = make_server(home_qm, authenticate=authenticate)
    body = {"type": "hello", "qmgr": "DEV1", "now_ms": T0}
    status, answer = post(http, server, p.PATH_HELLO, body)
    assert (status, answer["code"], answer["detail"]) == (401, "unauthorized", "bad token")
    status, _ = post(http, server, p.PATH_HELLO, body, headers={**CBOR, "x-token": "s3cret"})
    assert status == 200 and seen == [("DEV1", "/v1/hello")] * 2


def test_healthz(http: httpx.Client, server: LiveServer) -> None:
    response = http.get(server.url + "/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "qmgr": "HOME", "queues": 1, "protocol": 1, "auth": "open"}


def test_metrics_are_prometheus_text(
    http: httpx.Client, server: LiveServer, server_clock: ManualClock
) -> None:
    hello(http, server, now=T0 - 250)  # the device's clock is 250 ms behind
    post(http, server, p.PATH_PUT, put_body("DEV1.1000", "DEV1.2000", now=T0 - 250))
    post(http, server, p.PATH_PUT, put_body("DEV1.1000", now=T0 - 250))  # not a resend: a duplicate
    post(http, server, p.PATH_PUT, b"junk")
    response = http.get(server.url + "/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    text = response.text
    for line in text.splitlines():  # every line is a comment or `name{labels} value`
        assert line.startswith("# ") or re.fullmatch(r"[a-z_]+(\{[^}]*\})? -?[0-9.e+]+", line), line
    assert "edgeq_sync_messages_received_total 2" in text
    assert "edgeq_sync_messages_duplicate_total 1" in text
    assert f'edgeq_sync_device_last_seen_timestamp_seconds{{device="DEV1"}} {T0 / 1000}' in text
    assert 'edgeq_sync_device_clock_offset_seconds{device="DEV1"} 0.25' in text
    assert 'edgeq_sync_requests_total{endpoint="/v1/put",status="400"} 1' in text
    # the store's flash budget: two 9-byte messages held (locked, awaiting their confirm)
    assert 'edgeq_queue_depth_messages{queue="ORDERS"} 2' in text
    assert 'edgeq_queue_bytes{queue="ORDERS"} 18' in text
    assert "edgeq_store_bytes 18" in text

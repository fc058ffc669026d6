"""A scripted home server for unit tests of the agent's parts: an ``httpx.MockTransport``
whose answers a test writes as plain functions of the decoded request body."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
from edgeq.sync import protocol as p

from edgeq import ManualClock

#: An answer: a body (status 200), or ``(status, body)``.
Answer = dict[str, Any] | tuple[int, dict[str, Any]]


class FakeHome:
    """Answers ``/v1/hello`` by itself; every other path by ``handlers[path](body)``.
    ``clock`` is the server's clock (every answer's ``now_ms``); ``requests`` records
    ``(path, decoded body)`` of every request, in order."""

    def __init__(self, clock: ManualClock, *, max_batch: int = 5_000, max_body_bytes: int = 16 * 1024 * 1024) -> None:
        self.clock = clock
        self.max_batch = max_batch
        self.max_body_bytes = max_body_bytes
        self.handlers: dict[str, Callable[[dict[str, Any]], Answer]] = {}
        self.requests: list[tuple[str, dict[str, Any]]] = []

    def paths(self) -> list[str]:
        return [path for path, _ in self.requests]

    def bodies(self, path: str) -> list[dict[str, Any]]:
        return [body for seen, body in self.requests if seen == path]

    def _hello(self, body: dict[str, Any]) -> Answer:
        return {"type": "hello", "server": "HOME", "offset_ms": self.clock() - body["now_ms"],
                "max_body_bytes": self.max_body_bytes, "max_batch": self.max_batch}

    def handle(self, request: httpx.Request) -> httpx.Response:
        body = p.decode_body(request.content)
        path = request.url.path
        self.requests.append((path, body))
        answer = self._hello(body) if path == p.PATH_HELLO else self.handlers[path](body)
        status, out = answer if isinstance(answer, tuple) else (200, answer)
        return httpx.Response(status, content=p.encode_body({"now_ms": self.clock(), **out}),
                              headers={"content-type": p.CONTENT_TYPE})


def refusal(status: int, code: str, detail: str = "no") -> tuple[int, dict[str, Any]]:
    """An error answer."""
    return status, {"type": "error", "code": code, "detail": detail}


def results(items: list[Any], status: str | Callable[[Any], str]) -> list[dict[str, Any]]:
    """Per-item results, each uid (a message's ``u``, or the uid itself) with ``status``."""
    out = []
    for item in items:
        uid = item["u"] if isinstance(item, dict) else item
        out.append({"u": uid, "s": status(item) if callable(status) else status})
    return out

"""``/api/v1/queues/{name}/messages`` and ``/api/v1/dead-letters``: a queue's messages a page at a time
(in arrival order, any state), one message whole; re-sending or deleting a dead-lettered one.
An encrypted queue's data and fields are never shown, and nothing is decrypted (:mod:`.browse`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing, contextmanager
from typing import Any

from starlette.requests import Request
from starlette.routing import Route

from edgeq.errors import QueueNotFound
from edgeq.store.opening import connect
from edgeq.sync.server.api.browse import PREVIEW_BYTES, message_page, one_message
from edgeq.sync.server.api.endpoints import Api
from edgeq.sync.server.api.http import ApiError, cursor, limit, queue_name, uid

__all__ = ["PREVIEW_BYTES", "routes"]


@contextmanager
def _listed(name: str) -> Iterator[None]:
    """A missing queue as the API's 404."""
    try:
        yield
    except QueueNotFound:
        raise ApiError(404, f"no queue {name!r}: GET /api/v1/queues lists them") from None


def routes(api: Api) -> list[Route]:
    qm = api.qm

    def page(name: str, after: int | None, size: int) -> dict[str, Any]:
        with closing(connect(qm.path, read_only=True)) as conn, _listed(name):
            return message_page(conn, name, after=after, size=size, now_ms=api.clock())

    def one(name: str, text: str) -> dict[str, Any]:
        wanted = uid(text)
        with closing(connect(qm.path, read_only=True)) as conn, _listed(name):
            found = one_message(conn, name, wanted, now_ms=api.clock())
        if found is None:
            raise ApiError(404, f"queue {name!r} holds no message {text}: it was got, expired or never there")
        return found

    def messages(request: Request) -> dict[str, Any]:
        return page(queue_name(request.path_params["name"]), cursor(request), limit(request))

    def message(request: Request) -> dict[str, Any]:
        return one(queue_name(request.path_params["name"]), request.path_params["uid"])

    def dead_letters(request: Request) -> dict[str, Any]:
        after, size = cursor(request), limit(request)
        name = qm.dead_letter_queue()
        if name not in qm.queue_names():
            return {"queue": name, "messages": [], "next": None}
        return page(name, after, size)

    def dead_letter(request: Request) -> dict[str, Any]:
        return one(qm.dead_letter_queue(), request.path_params["uid"])

    def target(request: Request) -> str:
        return str(request.path_params["uid"])

    return [
        Route("/queues/{name}/messages", api.read(messages), methods=["GET"]),
        Route("/queues/{name}/messages/{uid}", api.read(message), methods=["GET"]),
        Route("/dead-letters", api.read(dead_letters), methods=["GET"]),
        Route("/dead-letters/{uid}", api.read(dead_letter), methods=["GET"]),
        Route("/dead-letters/{uid}/resend", api.act("resend-dead-letter", target), methods=["POST"]),
        Route("/dead-letters/{uid}/delete", api.act("delete-dead-letter", target), methods=["POST"]),
    ]

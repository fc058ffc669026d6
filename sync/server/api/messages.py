"""``/api/v1/queues/{name}/messages`` and ``/api/v1/dead-letters``: a queue's messages a page at a time
(in arrival order, any state; ``?order=get``: the ready ones in get order), one message whole; re-sending
or deleting a dead-lettered one.
An encrypted queue's data and fields are never shown, and nothing is decrypted (:mod:`.browse`)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import closing, contextmanager
from typing import Any

from starlette.requests import Request
from starlette.routing import Route

from edgeq.errors import QueueNotFound
from edgeq.store.opening import connect
from edgeq.sync.server.api.browse import PREVIEW_BYTES, message_page, one_message, ready_page
from edgeq.sync.server.api.endpoints import Api
from edgeq.sync.server.api.http import ApiError, cursor, limit, queue_name, uid

__all__ = ["PREVIEW_BYTES", "routes"]


_GET_CURSOR = re.compile(r"(-?\d{1,18})\.(\d{1,18})")


#: a page asked for: its length, and its cursor: an id (arrival order) or a (rank, seq) (``?order=get``)
_Paging = tuple[int, int | tuple[int, int] | None, bool]


def _paging(request: Request) -> _Paging:
    """The page ``request`` asks for: ``?limit=``, ``?after=`` (a page's ``next``) and ``?order=``."""
    order, text = request.query_params.get("order", "arrival"), request.query_params.get("after")
    if order not in ("arrival", "get"):
        raise ApiError(400, f"order must be arrival or get, not {order[:20]!r}")
    if order == "arrival":
        return limit(request), cursor(request), False
    found = None if not text else _GET_CURSOR.fullmatch(text)
    if text and found is None:
        raise ApiError(400, f"after must be the 'next' of the page before (RANK.SEQ), not {text[:40]!r}")
    return limit(request), None if found is None else (int(found[1]), int(found[2])), True


@contextmanager
def _listed(name: str) -> Iterator[None]:
    """A missing queue as the API's 404."""
    try:
        yield
    except QueueNotFound:
        raise ApiError(404, f"no queue {name!r}: GET /api/v1/queues lists them") from None


def routes(api: Api) -> list[Route]:
    qm = api.qm

    def page(name: str, paging: _Paging) -> dict[str, Any]:
        size, after, in_get_order = paging
        with closing(connect(qm.path, read_only=True)) as conn, _listed(name):
            if in_get_order:
                keys = after if isinstance(after, tuple) else None
                return ready_page(conn, name, after=keys, size=size, now_ms=api.clock())
            return message_page(conn, name, after=after if isinstance(after, int) else None, size=size,
                                now_ms=api.clock())

    def one(name: str, text: str) -> dict[str, Any]:
        wanted = uid(text)
        with closing(connect(qm.path, read_only=True)) as conn, _listed(name):
            found = one_message(conn, name, wanted, now_ms=api.clock())
        if found is None:
            raise ApiError(404, f"queue {name!r} holds no message {text}: it was got, expired or never there")
        return found

    def messages(request: Request) -> dict[str, Any]:
        return page(queue_name(request.path_params["name"]), _paging(request))

    def message(request: Request) -> dict[str, Any]:
        return one(queue_name(request.path_params["name"]), request.path_params["uid"])

    def dead_letters(request: Request) -> dict[str, Any]:
        paging = _paging(request)  # checked even while there is no dead-letter queue
        name = qm.dead_letter_queue()
        if name not in qm.queue_names():
            return {"queue": name, "messages": [], "next": None}
        return page(name, paging)

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

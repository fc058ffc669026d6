"""The API's answers: JSON bodies, JSON errors (a status and a message saying what to do), and the
checks of what a request asks for (paging, names, uids)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from edgeq.errors import EdgeqError, InvalidArgument, InvalidType
from edgeq.names import check_name
from edgeq.sync.server.api.paging import DEFAULT_LIMIT, MAX_LIMIT
from edgeq.uid import MessageUID

__all__ = ["DEFAULT_LIMIT", "MAX_LIMIT", "ApiError", "answer", "cursor", "limit", "queue_name", "refusal",
           "uid"]


class ApiError(EdgeqError):
    """A request the API refuses: answered with ``status`` and ``{"error": message}``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status

    def response(self) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if self.status == 401 else None
        return JSONResponse({"error": str(self), "status": self.status}, self.status, headers=headers)


def answer(body: Any, status: int = 200) -> JSONResponse:
    return JSONResponse(body, status)


def limit(request: Request) -> int:
    """The page length asked for (``?limit=``): 1 to :data:`MAX_LIMIT`."""
    text = request.query_params.get("limit")
    if text is None:
        return DEFAULT_LIMIT
    if not (len(text) <= 4 and text.isascii() and text.isdigit() and 1 <= int(text) <= MAX_LIMIT):
        raise ApiError(400, f"limit must be a whole number from 1 to {MAX_LIMIT}, not {text[:20]!r}")
    return int(text)


def cursor(request: Request, name: str = "after") -> int | None:
    """A paging cursor (``?after=``: the ``next`` of the page before), or None for the first page."""
    text = request.query_params.get(name)
    if text is None or text == "":
        return None
    if not (text.isascii() and text.isdigit() and len(text) <= 18):
        raise ApiError(400, f"{name} must be the 'next' of the page before (a whole number), "
                            f"not {text[:20]!r}")
    return int(text)


def queue_name(text: str) -> str:
    """A queue name from a path, checked (400 if it cannot be one)."""
    try:
        check_name(text, "queue name")
    except InvalidArgument as exc:
        raise ApiError(400, str(exc)) from None
    return text


def uid(text: str) -> MessageUID:
    """A message uid from a path (``ORIGIN.STAMP``), checked (400 if it cannot be one)."""
    try:
        return MessageUID.parse(text)
    except EdgeqError as exc:
        raise ApiError(400, f"{text[:80]!r} is not a message uid (ORIGIN.STAMP, as listed): {exc}") from None


def refusal(exc: EdgeqError) -> ApiError:
    """``exc`` as the API answers it: its own status, 404 for what is not there, 400 for a bad argument,
    409 for anything else refused."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, LookupError):
        return ApiError(404, str(exc))
    return ApiError(400 if isinstance(exc, (InvalidArgument, InvalidType)) else 409, str(exc))

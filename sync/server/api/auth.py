"""Who is asking: an API token (``Authorization: Bearer edgeq_...``) or the console's session cookie
(a person signed in at /console; a form it posts must carry the session's CSRF token in the
``X-Edgeq-CSRF`` header). Each brings a role (docs/security.md, "Roles")."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from edgeq.sync.server.api.http import ApiError
from edgeq.sync.server.api.tokens import find_token
from edgeq.sync.server.console.auth import COOKIE, Role, load_credential

__all__ = ["CSRF_HEADER", "Principal", "authenticate"]

CSRF_HEADER = "X-Edgeq-CSRF"


@dataclass(frozen=True, slots=True)
class Principal:
    """Who made a request (``token:<name>`` or ``console:<account>``) and what they may do."""

    who: str
    role: Role


async def authenticate(request: Request, path: str | Path, clock: Callable[[], int]) -> Principal:
    """The request's principal; a 401 :class:`ApiError` if it has no valid credential."""
    header = request.headers.get("authorization")
    if header is not None:
        scheme, _, text = header.partition(" ")
        bearer = scheme.lower() == "bearer"
        token = await run_in_threadpool(find_token, path, text.strip()) if bearer else None
        if token is None:
            raise ApiError(401, "the token is unknown or revoked (or the header is not "
                                "'Authorization: Bearer edgeq_...'): see edgeq server token list")
        return Principal(f"token:{token.name}", token.role)
    session = request.cookies.get(COOKIE)
    cred = None if session is None else await run_in_threadpool(load_credential, path, session)
    if session is None or cred is None or not cred.session_valid(session, now_ms=clock()):
        raise ApiError(401, "no credential: send 'Authorization: Bearer <token>' (edgeq server token "
                            "create), or sign in to the console")
    if request.method != "GET" and request.headers.get(CSRF_HEADER) != cred.csrf_token(session):
        raise ApiError(403, f"a console session's action must carry its CSRF token in {CSRF_HEADER}")
    return Principal(f"console:{cred.name}", cred.role)

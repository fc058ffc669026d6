"""The operator console: a read-only web page over the home server's store, under ``/console``.

Off unless ``create_app(..., console=True)`` (``edgeq serve --console``). Every page but
the login form needs a session: a cookie (signed with the secret in the store, HttpOnly,
SameSite=Strict, Secure over TLS) given for the operator's password
(:mod:`edgeq.sync.consoleauth`; set with ``edgeq server set-console-password``). The one
state-changing form, logout, carries a per-session CSRF token. Pages are rendered on
the server (Jinja2 templates shipped in the package, inline SVG charts), and refresh
themselves.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from edgeq.sync.consoleauth import SESSION_MS, ConsoleCredential, load_credential
from edgeq.sync.consolecharts import line_chart
from edgeq.sync.consoledata import read_console
from edgeq.sync.sessions import DeviceSessions
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.templating import Jinja2Templates

__all__ = ["COOKIE", "console_routes"]

COOKIE = "edgeq_console"
#: how often the page reloads itself (seconds)
REFRESH_S = 10
#: a login form is small: refuse a larger body before reading it
MAX_FORM_BYTES = 4096


def _templates() -> Jinja2Templates:
    templates = Jinja2Templates(directory=str(Path(__file__).parent / "templates"))
    templates.env.filters["age"] = _age
    return templates


def _age(ms: int | None) -> str:
    """A duration for a person: 42 s, 5 min, 3 h, 2 d."""
    if ms is None:
        return "—"
    s = ms // 1000
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if s >= size:
            return f"{s // size} {unit}"
    return f"{s} s"


def console_routes(path: str | Path, *, clock: Callable[[], int], sessions: DeviceSessions) -> list[BaseRoute]:
    """The routes of ``/console`` over the store at ``path``: ``clock`` is the server's (ms),
    ``sessions`` its device sessions (for the clock bounds this process measured)."""
    templates = _templates()

    def credential() -> ConsoleCredential | None:
        return load_credential(path)

    async def signed_in(request: Request) -> tuple[ConsoleCredential, str] | None:
        cred = await run_in_threadpool(credential)
        token = request.cookies.get(COOKIE)
        if cred is None or token is None or not cred.session_valid(token, now_ms=clock()):
            return None
        return cred, token

    def bounds() -> dict[str, tuple[int, int]]:
        out = {}
        for s in sessions.all():
            seen = [x for x in (s.device_offset_ms, None if s.clock_offset_ms is None else -s.clock_offset_ms)
                    if x is not None]
            if seen:
                out[s.name] = (min(seen), max(seen))
        return out

    async def page(request: Request) -> Response:
        """``GET /console``: the fleet, queues, recent events and charts (or the login form)."""
        session = await signed_in(request)
        if session is None:
            return RedirectResponse("/console/login", status_code=303)
        view = await run_in_threadpool(read_console, path, now_ms=clock(), bounds=bounds())
        return templates.TemplateResponse(request, "console.html", {
            "view": view, "csrf": session[0].csrf_token(session[1]), "refresh": REFRESH_S,
            "throughput": line_chart(view.throughput), "expired": line_chart(view.expired)})

    async def login_form(request: Request, error: str = "", status: int = 200) -> Response:
        return templates.TemplateResponse(request, "login.html", {"error": error}, status_code=status)

    async def login(request: Request) -> Response:
        """``POST /console/login``: a session cookie for the operator's password."""
        form = await _form(request)
        cred = await run_in_threadpool(credential)
        if cred is None:
            return await login_form(request, "No console password is set: edgeq server set-console-password.", 403)
        password = form.get("password", "")
        if not await run_in_threadpool(cred.verify, password):
            return await login_form(request, "Wrong password.", 403)
        response = RedirectResponse("/console", status_code=303)
        response.set_cookie(COOKIE, cred.new_session(now_ms=clock()), max_age=SESSION_MS // 1000, path="/console",
                            httponly=True, samesite="strict", secure=request.url.scheme == "https")
        return response

    async def logout(request: Request) -> Response:
        """``POST /console/logout``: end the session (the form's CSRF token must match it)."""
        session = await signed_in(request)
        form = await _form(request)
        if session is None or form.get("csrf") != session[0].csrf_token(session[1]):
            return Response("forbidden: no session, or a form from elsewhere", status_code=403)
        response = RedirectResponse("/console/login", status_code=303)
        response.delete_cookie(COOKIE, path="/console")
        return response

    return [
        Route("/console", page, methods=["GET"]),
        Route("/console/login", login_form, methods=["GET"]),
        Route("/console/login", login, methods=["POST"]),
        Route("/console/logout", logout, methods=["POST"]),
    ]


async def _form(request: Request) -> Mapping[str, str]:
    """A small url-encoded form (no multipart: nothing here uploads)."""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            return {}
    parsed: dict[str, Any] = parse_qs(body.decode("utf-8", "replace"), max_num_fields=10)
    return {k: v[0] for k, v in parsed.items()}

"""The operator console: web pages over the home server's store, under ``/console``.

:func:`console_app` is its own app: ``edgeq serve --console`` runs it in a process and on a
port of its own, so a flood of sign-ins costs devices' requests nothing. Every page but
the login form needs a session: a cookie (signed with the account's secret in the store, HttpOnly,
SameSite=Strict, Secure over TLS) given for an account's name and password
(:mod:`edgeq.sync.server.console.auth`; ``edgeq server console-user add``), checked
one at a time with a growing delay for an address that keeps guessing
(:mod:`edgeq.sync.server.console.login`). Every form that changes anything (an operator's actions,
:mod:`edgeq.sync.server.console.acting`; logout, which revokes the session in the store) carries a
per-session CSRF token. Every answer carries
:func:`security_headers` (a strict Content-Security-Policy, no framing, no caching).
Pages are rendered on the server (Jinja2 templates shipped in the package, inline SVG
charts), and refresh themselves.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from markupsafe import Markup
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.templating import Jinja2Templates

from edgeq.manager import QueueManager
from edgeq.sync.pipeline.report.charts import line_chart, time_marks
from edgeq.sync.server.admin.client import OperatorKey
from edgeq.sync.server.api.admin import collect_replies
from edgeq.sync.server.api.http import ApiError
from edgeq.sync.server.console.acting import Session, act_endpoint, action_pages, outcome
from edgeq.sync.server.console.auth import (
    COOKIE,
    SESSION_MS,
    dummy_verify,
    has_accounts,
    load_credential,
    revoke_session,
)
from edgeq.sync.server.console.data import BUCKET_MS, read_console
from edgeq.sync.server.console.drill import drill_pages
from edgeq.sync.server.console.forms import scope
from edgeq.sync.server.console.lists import LISTS, links, read_asks
from edgeq.sync.server.console.login import LoginGuard

__all__ = ["COOKIE", "console_app", "console_routes", "security_headers"]

#: the session cookie goes with the console's pages and the management API (/api/v1) on its port
COOKIE_PATH = "/"
#: how often the page reloads itself (seconds)
REFRESH_S = 10
#: a login form is small: refuse a larger body before reading it
MAX_FORM_BYTES = 4096
#: an action's form may carry a pasted key or an admin request's parameters
MAX_ACTION_BYTES = 16384
#: the most fields a form may have (the console's largest has six: csrf, confirm and four of its own)
MAX_FIELDS = 10


_TEMPLATES = Path(__file__).parent / "templates"
_Endpoint = Callable[[Request], Awaitable[Response]]


def security_headers() -> dict[str, str]:
    """The headers of every console answer: a Content-Security-Policy allowing nothing but
    the pages' own inline style (by its hash: no script at all), forms posted here only, no
    framing (``frame-ancestors``, and ``X-Frame-Options`` for older browsers), no sniffing,
    no caching of pages showing the fleet, no referrer."""
    base = (_TEMPLATES / "base.html").read_text(encoding="utf-8")
    style = base.split("<style>", 1)[1].split("</style>", 1)[0]
    digest = base64.b64encode(hashlib.sha256(style.encode()).digest()).decode()
    policy = (f"default-src 'none'; style-src 'sha256-{digest}'; img-src 'self' data:; form-action 'self'; "
              "frame-ancestors 'none'; base-uri 'none'")
    return {"Content-Security-Policy": policy, "X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff",
            "Cache-Control": "no-store", "Referrer-Policy": "no-referrer"}


def _secured(endpoint: _Endpoint, headers: Mapping[str, str]) -> _Endpoint:
    """``endpoint`` answering with ``headers`` too."""
    async def secured(request: Request) -> Response:
        response = await endpoint(request)
        response.headers.update(headers)
        return response
    return secured


def _address(request: Request) -> str:
    """The client's address, as the login delays key it (behind a proxy: the proxy's)."""
    return request.client.host if request.client else "unknown"


def _templates() -> Jinja2Templates:
    templates = Jinja2Templates(directory=str(_TEMPLATES))
    templates.env.filters["age"] = _age
    templates.env.filters["scope"] = scope
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


def _per_minute(values: Sequence[int], now_ms: int, *, series: str, title: str, html_id: str) -> Markup:
    """``values`` (the last minutes' counts, oldest first) as a line chart; each point is labelled
    by the whole minute that falls in its bucket, and round ones are shown."""
    start = now_ms - len(values) * BUCKET_MS
    minutes = [-(-(start + i * BUCKET_MS) // 60_000) * 60_000 for i in range(len(values))]
    labels = [datetime.fromtimestamp(t / 1000, UTC).strftime("%H:%M") for t in minutes]
    return Markup(line_chart(labels, {series: values}, title=title, unit=f"{series} / minute", width=600,
                             marks=time_marks(minutes, "00:00", 600), x_title="minute (UTC)",
                             html_id=html_id))


def console_app(qm: QueueManager, *, clock: Callable[[], int], api: Sequence[BaseRoute] = (),
                signer: OperatorKey | None = None) -> Starlette:
    """The console's own app over ``qm``'s store: its routes, ``/healthz`` and the ``api`` routes
    (the management API's, :mod:`edgeq.sync.server.api`); ``signer`` signs its admin requests."""
    async def healthz(request: Request) -> Response:
        return PlainTextResponse("ok")

    app = Starlette(routes=[*console_routes(qm, clock=clock, signer=signer),
                            Route("/healthz", healthz, methods=["GET"]),
                            *api])
    app.router.redirect_slashes = False
    return app


def console_routes(qm: QueueManager, *, clock: Callable[[], int], signer: OperatorKey | None = None
                   ) -> list[BaseRoute]:
    """The routes of ``/console`` over ``qm``'s store; ``clock`` is the server's (ms); ``signer`` the
    operator key admin requests are signed with (None: the console sends none, and says so)."""
    templates, path = _templates(), qm.path
    guard = LoginGuard(clock=clock)

    async def signed_in(request: Request) -> Session | None:
        token = request.cookies.get(COOKIE)
        cred = await run_in_threadpool(load_credential, path, token)
        if cred is None or token is None or not cred.session_valid(token, now_ms=clock()):
            return None
        return cred, token

    async def page(request: Request) -> Response:
        """``GET /console``: the fleet, queues, recent events and charts (or the login form)."""
        session = await signed_in(request)
        if session is None:
            return RedirectResponse("/console/login", status_code=303)
        try:
            asks = read_asks(request.query_params)
        except ApiError as exc:  # a filter too long, a cursor not a page's
            return templates.TemplateResponse(request, "problem.html",
                                              {"problem": str(exc), "me": session[0]}, status_code=exc.status)
        await run_in_threadpool(collect_replies, qm)
        view = await run_in_threadpool(read_console, path, now_ms=clock(), asks=asks)
        done = await run_in_threadpool(outcome, str(path), request)
        return templates.TemplateResponse(request, "console.html", {
            "view": view, "me": session[0], "csrf": session[0].csrf_token(session[1]), "refresh": REFRESH_S,
            "done": done, "asks": asks, "links": {name: links(request.query_params, name) for name in LISTS},
            "throughput": _per_minute(view.throughput, view.now_ms, series="accepted",
                                      title="messages accepted per minute, last hour",
                                      html_id="chart-throughput"),
            "expired": _per_minute(view.expired, view.now_ms, series="expired", html_id="chart-expiries",
                                   title="expiries per minute, last hour")})

    async def login_form(request: Request, error: str = "", status: int = 200, user: str = "") -> Response:
        return templates.TemplateResponse(request, "login.html", {"error": error, "user": user},
                                          status_code=status)

    async def too_many(request: Request, address: str) -> Response:
        wait_s = -(-guard.wait_ms(address) // 1000)
        source = "lately, from many addresses" if guard.flood_wait_ms() else f"from {address}"
        said = f"Too many wrong passwords {source}: try again in {wait_s} s."
        response = await login_form(request, said, 429)
        response.headers["Retry-After"] = str(wait_s)
        return response

    async def login(request: Request) -> Response:
        """``POST /console/login``: a session cookie for an account's name and password (429, and no
        check, while the client's address waits after wrong ones)."""
        address = _address(request)
        if guard.wait_ms(address):
            return await too_many(request, address)
        try:
            form = await _form(request)
        except ApiError as exc:
            return await login_form(request, str(exc), exc.status)
        user, password = form.get("user", "").strip(), form.get("password", "")
        if not user:
            return await login_form(request, "Give your account's name (edgeq server console-user list).",
                                    400)
        cred = await run_in_threadpool(lambda: load_credential(path, account=user))
        if cred is None and not await run_in_threadpool(has_accounts, path):
            return await login_form(request, "No console account is set: edgeq server console-user add.",
                                    403)
        ok = await guard.check(address,
                               lambda: dummy_verify(password) if cred is None else cred.verify(password))
        if ok is None:
            return await too_many(request, address)
        if not ok or cred is None:
            return await login_form(request, "Wrong account name or password.", 403, user[:64])
        response = RedirectResponse("/console", status_code=303)
        response.set_cookie(COOKIE, cred.new_session(now_ms=clock()), max_age=SESSION_MS // 1000,
                            path=COOKIE_PATH,
                            httponly=True, samesite="strict", secure=request.url.scheme == "https")
        return response

    async def logout(request: Request) -> Response:
        """``POST /console/logout``: end the session (the form's CSRF token must match it)."""
        session = await signed_in(request)
        try:
            form = await _form(request)
        except ApiError as exc:
            return Response(str(exc), status_code=exc.status)
        if session is None or form.get("csrf") != session[0].csrf_token(session[1]):
            return Response("forbidden: no session, or a form from elsewhere", status_code=403)
        await run_in_threadpool(revoke_session, path, session[1], now_ms=clock())
        response = RedirectResponse("/console/login", status_code=303)
        response.delete_cookie(COOKIE, path=COOKIE_PATH)
        return response

    async def form_page(request: Request) -> Response:
        return await login_form(request)

    async def not_found(request: Request) -> Response:
        return Response("not found: the console's pages are /console, /console/login, /console/devices, "
                        "/console/devices/NAME, /console/queues/NAME, /console/admin, /console/admin/ID, "
                        "/console/rule-events and /console/actions",
                        status_code=404)

    headers = security_headers()
    drill = drill_pages(path, clock=clock, templates=templates, signed_in=signed_in,
                        dlq=qm.dead_letter_queue, collect=lambda: collect_replies(qm),
                        admin_key=None if signer is None else signer.key_id, more=action_pages(qm))
    act = act_endpoint(qm, clock=clock, templates=templates, signed_in=signed_in, form=_action_form,
                       signer=signer)
    return [
        Route("/console", _secured(page, headers), methods=["GET"]),
        *(Route(route, _secured(endpoint, headers), methods=["GET"]) for route, endpoint in drill),
        Route("/console/login", _secured(form_page, headers), methods=["GET"]),
        Route("/console/login", _secured(login, headers), methods=["POST"]),
        Route("/console/logout", _secured(logout, headers), methods=["POST"]),
        Route("/console/actions/{action}", _secured(act, headers), methods=["POST"]),
        Route("/console/{rest:path}", _secured(not_found, headers)),  # the headers on every answer
    ]


async def _form(request: Request) -> Mapping[str, str]:
    """A small url-encoded form (sign-in, sign-out): :func:`_read_form` up to :data:`MAX_FORM_BYTES`."""
    return await _read_form(request, MAX_FORM_BYTES)


async def _action_form(request: Request) -> Mapping[str, str]:
    """An action's form: :func:`_read_form` up to :data:`MAX_ACTION_BYTES`."""
    return await _read_form(request, MAX_ACTION_BYTES)


async def _read_form(request: Request, limit: int) -> Mapping[str, str]:
    """A url-encoded form (no multipart: nothing here uploads); larger than ``limit`` bytes, or of more
    than :data:`MAX_FIELDS` fields, an :class:`ApiError` (413, 400), read no further."""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise ApiError(413, f"the form is too large, nothing was done: a form here is at most "
                                f"{limit // 1024} KiB (give a key or an admin request's parameters of a few "
                                "kilobytes)")
    try:
        parsed: dict[str, Any] = parse_qs(body.decode("utf-8", "replace"), max_num_fields=MAX_FIELDS)
    except ValueError:  # parse_qs's "Max number of fields exceeded"
        raise ApiError(400, f"the form has more than {MAX_FIELDS} fields, nothing was done: post the "
                            "console's own form") from None
    return {k: v[0] for k, v in parsed.items()}

"""The console's drill-down pages: ``/console/devices/{name}``, ``/console/queues/{name}`` (and a message
of it), ``/console/admin`` (the admin requests, filtered and paged). Read-only, like the rest."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from markupsafe import Markup
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.templating import Jinja2Templates

from edgeq.admin.wire import ACTIONS as ADMIN_ACTIONS
from edgeq.errors import EdgeqError, QueueNotFound
from edgeq.names import check_name
from edgeq.sync.pipeline.report.charts import time_chart
from edgeq.sync.server.admin.records import read_cursor
from edgeq.sync.server.api.admin import NO_KEY
from edgeq.sync.server.api.http import ApiError, cursor, uid
from edgeq.sync.server.console.acting import Page, Session, outcome
from edgeq.sync.server.console.detail import KINDS, POINTS, read_admin, read_device, read_message, read_queue
from edgeq.sync.server.series import RANGES, STEPS, check_range

__all__ = ["drill_pages"]

#: the admin requests' ``?status=`` filter (the API's words): whether they were replied to, and its label
STATUSES = {"": (None, "all"), "pending": (False, "no reply yet"), "replied": (True, "replied")}
_Endpoint = Callable[[Request], Awaitable[Response]]


def _name(text: str, what: str) -> str:
    """A device or queue name from a path or a filter (a 400 if it cannot be one)."""
    try:
        return check_name(text, what)
    except EdgeqError as exc:
        raise ApiError(400, str(exc)) from None


def drill_pages(path: str | Path, *, clock: Callable[[], int], templates: Jinja2Templates,
                signed_in: Callable[[Request], Awaitable[Session | None]],
                dlq: Callable[[], str], collect: Callable[[], None], admin_key: str | None,
                more: Sequence[tuple[str, Page]] = ()) -> list[tuple[str, _Endpoint]]:
    """The drill-down pages (GET) over the store at ``path``, and ``more``, by route; ``signed_in``: a
    request's session. Each page is given who is signed in (``me``), the CSRF token for its action
    forms (``csrf``), the action ``?done=`` names (``done``) and the dead-letter queue's name (``dlq``);
    ``collect`` records the admin replies waiting, before a page shows admin requests; ``admin_key``: the
    key id the console signs admin requests with (None: it sends none)."""
    def page(fn: Page) -> _Endpoint:
        """A page: the sign-in form without a session; ``fn`` (in a thread) names its template and context."""
        async def endpoint(request: Request) -> Response:
            session = await signed_in(request)
            if session is None:
                return RedirectResponse("/console/login", status_code=303)
            now, me = clock(), {"me": session[0], "csrf": session[0].csrf_token(session[1])}
            try:
                template, context = await run_in_threadpool(fn, request, now)
                done = await run_in_threadpool(outcome, str(path), request)
            except ApiError as exc:  # what was asked cannot be (400) or is not there (404)
                return templates.TemplateResponse(request, "problem.html", {"problem": str(exc), **me},
                                                  status_code=exc.status)
            return templates.TemplateResponse(request, template, {**context, **me, "done": done, "dlq": dlq(),
                                                                  "now_ms": now})
        return endpoint

    def device(request: Request, now: int) -> tuple[str, dict[str, Any]]:
        name, span = _name(request.path_params["name"], "device name"), _range(request)
        collect()
        found = read_device(path, name, before=_after(request), now_ms=now, span=span)
        if found is None or found.health is None:
            raise ApiError(404, f"no device {name!r} has been heard from or registered: the fleet lists them")
        h, step = found.health, STEPS[span]
        every = _every(step)
        charts = [(f"Messages accepted per {every}", time_chart(
                      h.start_ms, step, {"accepted": h.accepted}, unit=f"messages / {every}",
                      title=f"messages accepted per {every}, last {span}", html_id="chart-device-accepted")),
                  (f"Clock offset, mean per {every}", time_chart(
                      h.start_ms, step, {"clock offset": h.offset_ms}, unit="ms (mean)",
                      title=f"clock offset, mean per {every}, last {span}", html_id="chart-device-offset"))]
        return "device.html", {"d": found, "ranges": list(RANGES),
                               "charts": [(t, Markup(c)) for t, c in charts], "admin_key": admin_key,
                               "admin_actions": ADMIN_ACTIONS, "no_key": NO_KEY}

    def queue(request: Request, now: int) -> tuple[str, dict[str, Any]]:
        name, span = _name(request.path_params["name"], "queue name"), _range(request)
        found = read_queue(path, name, now_ms=now, span=span, after=cursor(request))
        if found is None:
            raise ApiError(404, f"no queue {name!r}: the console's Queues table lists them")
        every = _every(STEPS[span])
        chart = time_chart(found.start_ms, STEPS[span], found.series, unit=f"messages / {every}",
                           title=f"in, out and expired per {every}, last {span}", html_id="chart-queue")
        return "queue.html", {"q": found, "ranges": list(RANGES), "kinds": KINDS, "chart": Markup(chart),
                              "points": {**POINTS, **{p: p for p in found.row.expiries if p not in POINTS}}}

    def message(request: Request, now: int) -> tuple[str, dict[str, Any]]:
        name, text = _name(request.path_params["name"], "queue name"), request.path_params["uid"]
        try:
            found = read_message(path, name, uid(text), now_ms=now)
        except QueueNotFound:
            raise ApiError(404, f"no queue {name!r}: the console's Queues table lists them") from None
        if found is None:
            raise ApiError(404, f"queue {name!r} holds no message {text[:80]!r}: it was got, expired or "
                                "never there")
        return "message.html", {"queue": name, "m": found}

    def admin(request: Request, now: int) -> tuple[str, dict[str, Any]]:
        device, status = request.query_params.get("device", ""), request.query_params.get("status", "")
        if status not in STATUSES:
            raise ApiError(400, f"status must be pending or replied (or nothing: all), not {status[:20]!r}")
        collect()
        found = read_admin(path, device=_name(device, "device name") if device else None,
                           replied=STATUSES[status][0], before=_after(request))
        return "admin.html", {"admin": found, "device": device, "status": status, "statuses": STATUSES}

    return [(route, page(fn)) for route, fn in (
        ("/console/devices/{name}", device), ("/console/queues/{name}", queue),
        ("/console/queues/{name}/messages/{uid}", message), ("/console/admin", admin), *more)]


def _range(request: Request) -> str:
    """The page's ``?range=`` (1h if none; a 400 if it is not one of :data:`RANGES`)."""
    try:
        return check_range(request.query_params.get("range"))
    except EdgeqError as exc:
        raise ApiError(400, str(exc)) from None


def _every(step_ms: int) -> str:
    """A chart's step in words: minute, 15 min, 2 h."""
    minutes = step_ms // 60_000
    return "minute" if minutes == 1 else f"{minutes} min" if minutes < 60 else f"{minutes // 60} h"


def _after(request: Request) -> tuple[int, str] | None:
    """The admin requests' page cursor (``?after=``: the page before's ``next``; a 400 if it is not one)."""
    try:
        return read_cursor(request.query_params.get("after"))
    except EdgeqError as exc:
        raise ApiError(400, str(exc)) from None


"""The console's actions (docs/console.md, "Actions"): a button posts a small form; the answer is a page
asking to confirm; the confirmed form does the action with :func:`.api.actions.perform` (the API's own),
then goes back (303) to a page showing how it ended. An operator's only; every form carries the
session's CSRF token. Also the parked rule events' page and the record of actions."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from contextlib import closing
from typing import Any
from urllib.parse import quote

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.templating import Jinja2Templates

from edgeq.errors import EdgeqError
from edgeq.manager import QueueManager
from edgeq.store.opening import connect
from edgeq.store.rules import RuleTx
from edgeq.sync.server.api import audit
from edgeq.sync.server.api.actions import ACTIONS, perform
from edgeq.sync.server.api.auth import Principal
from edgeq.sync.server.api.http import ApiError, cursor, refusal
from edgeq.sync.server.console.auth import ConsoleCredential
from edgeq.sync.server.console.detail import PAGE

__all__ = ["Page", "Session", "act_endpoint", "action_pages", "outcome"]

#: a signed-in request's account (its credential) and session token
Session = tuple[ConsoleCredential, str]
#: a page: given the request and the time, its template and context (read in a thread)
Page = Callable[[Request, int], tuple[str, dict[str, Any]]]
_Endpoint = Callable[[Request], Awaitable[Response]]


def _back(qm: QueueManager, action: str, target: str) -> str:
    """The page an action goes back to, to show how it ended."""
    if action == "purge-queue":
        return f"/console/queues/{quote(target, safe='')}"
    if action == "revoke-device":
        return f"/console/devices/{quote(target, safe='')}"
    if action.endswith("-dead-letter"):
        return f"/console/queues/{quote(qm.dead_letter_queue(), safe='')}"
    return "/console/rule-events"


def outcome(path: str, request: Request) -> dict[str, Any] | None:
    """The recorded action ``?done=`` names (the page an action went back to shows it), or None."""
    try:
        done = cursor(request, "done")
    except ApiError:
        return None
    return None if done is None else audit.one(path, done)


def act_endpoint(qm: QueueManager, *, clock: Callable[[], int], templates: Jinja2Templates,
                 signed_in: Callable[[Request], Awaitable[Session | None]],
                 form: Callable[[Request], Awaitable[Mapping[str, str]]]) -> _Endpoint:
    """``POST /console/actions/{action}``: without ``confirm``, the page asking to; with it, the action."""
    def problem(request: Request, session: Session, text: str, status: int) -> Response:
        return templates.TemplateResponse(request, "problem.html", {
            "problem": text, "me": session[0], "csrf": session[0].csrf_token(session[1])}, status_code=status)

    async def act(request: Request) -> Response:
        session, fields = await signed_in(request), await form(request)
        if session is None:
            return Response("forbidden: no session (sign in at /console/login)", status_code=403)
        cred, token = session
        who, name, target = f"console:{cred.name}", request.path_params["action"], fields.get("target", "")
        if fields.get("csrf") != cred.csrf_token(token):
            return Response("forbidden: a form from elsewhere (no or a wrong CSRF token)", status_code=403)
        if name not in ACTIONS:
            return problem(request, session,
                           f"no action {name[:40]!r}: the console's are {', '.join(ACTIONS)}", 404)
        if fields.get("confirm") != "yes":
            if cred.role != "operator":
                return problem(request, session,
                               f"{name} needs the operator role; {who} is a {cred.role}", 403)
            try:
                question = await run_in_threadpool(ACTIONS[name].ask, qm, target)
            except EdgeqError as exc:
                return problem(request, session, str(exc), refusal(exc).status)
            return templates.TemplateResponse(request, "confirm.html", {
                "me": cred, "csrf": cred.csrf_token(token), "action": name, "target": target,
                "question": question, "back": _back(qm, name, target)})
        try:
            done, _ = await run_in_threadpool(lambda: perform(
                qm, name, target, who=Principal(who, cred.role), clock=clock))
        except EdgeqError as exc:  # recorded: shown here, with what to do
            return problem(request, session, str(exc), refusal(exc).status)
        return RedirectResponse(f"{_back(qm, name, target)}?done={done}", status_code=303)
    return act


def action_pages(qm: QueueManager) -> list[tuple[str, Page]]:
    """The parked rule events' page and the record of actions (GET), by route."""
    def rule_events(request: Request, now: int) -> tuple[str, dict[str, Any]]:
        with closing(connect(qm.path, read_only=True)) as conn:
            parked = RuleTx(conn).failures(parked=True)
        return "rules.html", {"parked": parked}

    def actions(request: Request, now: int) -> tuple[str, dict[str, Any]]:
        who, action = request.query_params.get("who", ""), request.query_params.get("action", "")
        found = audit.recorded(qm.path, before=cursor(request), limit=PAGE, who=who or None,
                               action=action or None)
        return "actions.html", {"actions": found, "who": who, "action": action, "names": list(ACTIONS),
                                "next": found[-1]["id"] if len(found) == PAGE else None}

    return [("/console/rule-events", rule_events), ("/console/actions", actions)]

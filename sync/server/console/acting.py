"""The console's actions (docs/console.md, "Actions"): a button posts a small form; the answer is a page
asking to confirm; the confirmed form does the action with :func:`.api.actions.perform` (the API's own),
then goes back (303) to a page showing how it ended. An operator's only; every form carries the
session's CSRF token. Also the parked rule events' page and the record of actions."""

from __future__ import annotations

import json
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
from edgeq.sync.server.admin.client import OperatorKey
from edgeq.sync.server.api import audit
from edgeq.sync.server.api.actions import ACTIONS, perform
from edgeq.sync.server.api.admin import collect_replies
from edgeq.sync.server.api.auth import Principal
from edgeq.sync.server.api.http import ApiError, cursor, refusal
from edgeq.sync.server.console import forms
from edgeq.sync.server.console.auth import ConsoleCredential
from edgeq.sync.server.console.detail import PAGE
from edgeq.sync.server.console.forms import FORMS

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
                 form: Callable[[Request], Awaitable[Mapping[str, str]]],
                 signer: OperatorKey | None) -> _Endpoint:
    """``POST /console/actions/{action}``: without ``confirm``, the page asking to; with it, the action (of
    :data:`.api.actions.ACTIONS`, on a ``target``, or of :data:`.forms.FORMS`, on its fields)."""
    def problem(request: Request, session: Session, text: str, status: int) -> Response:
        return templates.TemplateResponse(request, "problem.html", {
            "problem": text, "me": session[0], "csrf": session[0].csrf_token(session[1])}, status_code=status)

    def ask(name: str, fields: Mapping[str, str]) -> tuple[str, str]:
        """What the action will do, and the page to cancel to."""
        if name in FORMS:
            return FORMS[name].ask(qm, signer, fields), FORMS[name].back(fields, None)
        return ACTIONS[name].ask(qm, fields["target"]), _back(qm, name, fields["target"])

    def do(name: str, fields: Mapping[str, str], who: Principal) -> str:
        """Do it (recorded, however it ends); the page showing how it ended."""
        if name not in FORMS:
            done, _ = perform(qm, name, fields["target"], who=who, clock=clock)
            return f"{_back(qm, name, fields['target'])}?done={done}"
        done, answer = FORMS[name].do(qm, signer, who, fields)
        return f"{FORMS[name].back(fields, answer)}?done={done}"

    async def act(request: Request) -> Response:
        session = await signed_in(request)
        if session is None:
            return Response("forbidden: no session (sign in at /console/login)", status_code=403)
        cred, token = session
        try:
            posted = await form(request)
        except ApiError as exc:  # too large (413) or too many fields (400): nothing done
            return problem(request, session, str(exc), exc.status)
        who, name = f"console:{cred.name}", request.path_params["action"]
        if posted.get("csrf") != cred.csrf_token(token):
            return Response("forbidden: a form from elsewhere (no or a wrong CSRF token)", status_code=403)
        if name not in ACTIONS and name not in FORMS:
            return problem(request, session,
                           f"no action {name[:40]!r}: the console's are {', '.join([*ACTIONS, *FORMS])}", 404)
        fields = {k: posted.get(k, "") for k in (FORMS[name].fields if name in FORMS else ("target",))}
        if posted.get("confirm") != "yes":
            if cred.role != "operator":
                return problem(request, session,
                               f"{name} needs the operator role; {who} is a {cred.role}", 403)
            try:
                question, back = await run_in_threadpool(ask, name, fields)
            except EdgeqError as exc:
                return problem(request, session, str(exc), refusal(exc).status)
            return templates.TemplateResponse(request, "confirm.html", {
                "me": cred, "csrf": cred.csrf_token(token), "action": name, "fields": fields,
                "question": question, "back": back})
        try:
            back = await run_in_threadpool(do, name, fields, Principal(who, cred.role))
        except EdgeqError as exc:  # recorded: shown here, with what to do
            return problem(request, session, str(exc), refusal(exc).status)
        return RedirectResponse(back, status_code=303)
    return act


def action_pages(qm: QueueManager) -> list[tuple[str, Page]]:
    """The parked rule events' page, the record of actions, the device registration form and one admin
    request's page (GET), by route."""
    def rule_events(request: Request, now: int) -> tuple[str, dict[str, Any]]:
        with closing(connect(qm.path, read_only=True)) as conn:
            parked = RuleTx(conn).failures(parked=True)
        return "rules.html", {"parked": parked}

    def actions(request: Request, now: int) -> tuple[str, dict[str, Any]]:
        who, action = request.query_params.get("who", ""), request.query_params.get("action", "")
        found = audit.recorded(qm.path, before=cursor(request), limit=PAGE, who=who or None,
                               action=action or None)
        return "actions.html", {"actions": found, "who": who, "action": action, "names": [*ACTIONS, *FORMS],
                                "next": found[-1]["id"] if len(found) == PAGE else None}

    def register(request: Request, now: int) -> tuple[str, dict[str, Any]]:
        return "register.html", {}

    def admin_request(request: Request, now: int) -> tuple[str, dict[str, Any]]:
        collect_replies(qm)
        shown = forms.admin_request(qm, request.path_params["id"], now)
        return "request.html", {"r": shown, "results": json.dumps(
            None if shown["reply"] is None else shown["reply"]["results"], indent=2, sort_keys=True)}

    return [("/console/rule-events", rule_events), ("/console/actions", actions),
            ("/console/devices", register), ("/console/admin/{id}", admin_request)]

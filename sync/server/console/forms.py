"""The console's actions taking a form, not just a target (docs/console.md, "Actions"): register a device,
re-key it, change its queues (:mod:`..api.registry`), send and re-send an admin request
(:mod:`..api.admin`). Each says what it will do; confirmed, it calls the API's own action (recorded)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote

from edgeq.admin.wire import ACTIONS as ADMIN_ACTIONS
from edgeq.manager import QueueManager
from edgeq.store.devices import DeviceRecord
from edgeq.sync.keys import fingerprint
from edgeq.sync.server.admin.client import AdminClient, OperatorKey
from edgeq.sync.server.api import admin, registry
from edgeq.sync.server.api.auth import Principal
from edgeq.sync.server.api.endpoints import Done
from edgeq.sync.server.api.http import ApiError, queue_name

__all__ = ["FORMS", "FormAction", "admin_request", "scope"]

Form = Mapping[str, str]


@dataclass(frozen=True)
class FormAction:
    """An action on a form's ``fields`` (carried through its confirmation page): ``ask`` says what it will
    do (an :class:`ApiError` if it cannot be), ``do`` does it as ``who`` (the API's action: recorded; the
    record's id and the answer);
    ``back(form, answer)`` is the page showing how it ended (answer None: the one to cancel to)."""

    name: str
    fields: tuple[str, ...]
    ask: Callable[[QueueManager, OperatorKey | None, Form], str]
    do: Callable[[QueueManager, OperatorKey | None, Principal, Form], Done]
    back: Callable[[Form, dict[str, Any] | None], str]


def scope(queues: tuple[str, ...] | list[str] | None) -> str:
    """The queues a device may push to, in words."""
    return "any queue" if queues is None else ", ".join(queues) or "no queue"


def _queues(form: Form) -> list[str] | None:
    """``scope`` ``any`` (None) or ``listed``: the names in ``queues`` (commas or spaces between)."""
    if form.get("scope") == "any":
        return None
    if form.get("scope") != "listed":
        raise ApiError(400, "say where the device may push: scope any (any queue) or listed (those named)")
    try:
        return [queue_name(q) for q in form.get("queues", "").replace(",", " ").split()]
    except ApiError as exc:
        raise ApiError(400, f"the allowed queues: {exc}") from None


def _queues_given(form: Form) -> object:
    """:func:`_queues`, or (not valid) the text as given: the API's action refuses it, recorded."""
    try:
        return _queues(form)
    except ApiError:
        return form.get("queues")


def _registered(qm: QueueManager, form: Form) -> DeviceRecord:
    name = registry._name(form)
    found = qm.device(name)
    if found is None or found.public_key is None:
        raise ApiError(404, f"device {name} is not registered: register it first (/console/devices)")
    return found


def _device_page(form: Form, answer: dict[str, Any] | None) -> str:
    return f"/console/devices/{quote(form.get('name') or form.get('device', ''), safe='')}"


def _ask_register(qm: QueueManager, signer: OperatorKey | None, form: Form) -> str:
    name, key, queues = registry._name(form), registry._public_key(form), _queues(form)
    found = qm.device(name)
    if found is not None and found.public_key is not None:
        raise ApiError(409, f"device {name} is registered already: give it a new key or change its queues "
                            "on its page")
    return f"Register device {name} with key {fingerprint(key)}: it may push to {scope(queues)}."


def _register(qm: QueueManager, signer: OperatorKey | None, who: Principal, form: Form) -> Done:
    return registry.register_device(qm, who, {"name": form.get("name"), "public_key": form.get("public_key"),
                                              "queues": _queues_given(form)})


def _ask_rekey(qm: QueueManager, signer: OperatorKey | None, form: Form) -> str:
    found, key = _registered(qm, form), registry._public_key(form)
    lifted = "; its revocation is lifted" if found.revoked_ms is not None else ""
    old = fingerprint(found.public_key or b"")
    return (f"Give device {found.name} the key {fingerprint(key)} (was: {old}): requests signed with the "
            f"old key will be refused from now on; it may still push to "
            f"{scope(found.queues)}{lifted}.")


def _rekey(qm: QueueManager, signer: OperatorKey | None, who: Principal, form: Form) -> Done:
    return registry.rekey_device(qm, who, {"name": form.get("name"), "public_key": form.get("public_key")})


def _ask_queues(qm: QueueManager, signer: OperatorKey | None, form: Form) -> str:
    found = _registered(qm, form)
    return f"Device {found.name} may push to {scope(_queues(form))} (was: {scope(found.queues)})."


def _set_queues(qm: QueueManager, signer: OperatorKey | None, who: Principal, form: Form) -> Done:
    return registry.set_device_queues(qm, who, {"name": form.get("name"), "queues": _queues_given(form)})


def _params(form: Form) -> object:
    """The parameters' JSON text as a value (not JSON: the text itself, which the action refuses)."""
    text = form.get("params", "").strip() or "{}"
    try:
        return json.loads(text)
    except ValueError:
        return text


def _ask_send(qm: QueueManager, signer: OperatorKey | None, form: Form) -> str:
    if signer is None:
        raise ApiError(409, admin.NO_KEY)
    device, action, target = form.get("device", ""), form.get("action", ""), form.get("target") or None
    if qm.device(device) is None:
        raise ApiError(404, f"no device {device[:60]!r} is known here: the fleet lists them")
    if action not in ADMIN_ACTIONS:
        raise ApiError(400, f"action {action[:40]!r} is not an admin action: one of "
                            f"{', '.join(ADMIN_ACTIONS)}")
    if target is not None:
        queue_name(target)
    params = _params(form)
    if not isinstance(params, dict):
        raise ApiError(400, f"the parameters must be a JSON object, such as {{\"expiry_ms\": 60000}} (docs/"
                            f"admin.md lists each action's), not {form.get('params', '')[:60]!r}")
    said = f" with parameters {json.dumps(params, sort_keys=True)}" if params else ""
    return (f"Send {action} on {target or 'the queue manager'} to device {device}{said}, signed with key "
            f"{signer.key_id}: {device} runs it when it next syncs; its reply shows on the request's page.")


def _send(qm: QueueManager, signer: OperatorKey | None, who: Principal, form: Form) -> Done:
    return admin.send_admin_request(qm, who, {"device": form.get("device"), "action": form.get("action"),
                                              "target": form.get("target") or None, "params": _params(form)},
                                    signer=signer)


def admin_request(qm: QueueManager, text: str, now_ms: int) -> dict[str, Any]:
    """Admin request ``text`` as the API shows it (a 400 or 404 :class:`ApiError` if it cannot be)."""
    request_id = admin._request_id(text)
    with AdminClient(qm) as client:
        return admin._found(client, request_id).as_dict(now_ms)


def _ask_resend(qm: QueueManager, signer: OperatorKey | None, form: Form) -> str:
    shown = admin_request(qm, form.get("target", ""), qm.now_ms())
    return (f"Re-send admin request {shown['request_id']} ({shown['action']} on "
            f"{shown['target'] or 'the queue manager'}) to device {shown['device']}: the same request, so a "
            "device that ran it already answers from its remembered reply and never runs it twice.")


def _resend(qm: QueueManager, signer: OperatorKey | None, who: Principal, form: Form) -> Done:
    return admin.resend_admin_request(qm, who, {"id": form.get("target")})


def _sent_page(form: Form, answer: dict[str, Any] | None) -> str:
    """The new request's page (cancelled: the device's)."""
    if answer is None:
        return _device_page(form, answer)
    return f"/console/admin/{quote(str(answer.get('request_id', '')), safe='')}"


def _request_page(form: Form, answer: dict[str, Any] | None) -> str:
    return f"/console/admin/{quote(form.get('target', ''), safe='')}"


_DEVICE: Final = ("name", "public_key", "scope", "queues")
#: every form action, by the name the record of actions gives it
FORMS: Final[Mapping[str, FormAction]] = {a.name: a for a in (
    FormAction("register-device", _DEVICE, _ask_register, _register, _device_page),
    FormAction("rekey-device", ("name", "public_key"), _ask_rekey, _rekey, _device_page),
    FormAction("set-device-queues", ("name", "scope", "queues"), _ask_queues, _set_queues, _device_page),
    FormAction("send-admin-request", ("device", "action", "target", "params"), _ask_send, _send, _sent_page),
    FormAction("resend-admin-request", ("target",), _ask_resend, _resend, _request_page),
)}

"""Registering devices over the API: register one, give it a new key, change its queues. Each action
takes ``(qm, who, arguments)`` (the console calls them so too), checks the role and is recorded (it
returns :data:`.endpoints.Done`); the checks are the store's (``edgeq.store.devices``), the same as
``edgeq server devices``'."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from starlette.routing import Route

from edgeq.errors import EdgeqError
from edgeq.manager import QueueManager
from edgeq.names import check_name
from edgeq.sync.keys import parse_public_key
from edgeq.sync.server.api.audit import audited
from edgeq.sync.server.api.auth import Principal
from edgeq.sync.server.api.devices import device_json
from edgeq.sync.server.api.endpoints import Api, Done
from edgeq.sync.server.api.http import ApiError

__all__ = ["register_device", "rekey_device", "routes", "set_device_queues"]


def register_device(qm: QueueManager, who: Principal, arguments: Mapping[str, Any]) -> Done:
    """Register ``name`` with ``public_key`` (a ``.pub`` file's PEM text) and ``queues`` (absent or
    null: any); an existing one is refused (409) unless ``replace``; a shared key unless ``force``."""
    def do() -> dict[str, Any]:
        name = _name(arguments)
        key = _public_key(arguments)
        queues = _queues(arguments, "queues", required=False)
        others = qm.register_device(name, key, queues=queues, share_key=_flag(arguments, "force"),
                                    replace=_flag(arguments, "replace"))
        return _answer(qm, name, shares_key_with=others)
    return audited(qm.path, who, "register-device", _target(arguments), do, clock=qm.now_ms)


def rekey_device(qm: QueueManager, who: Principal, arguments: Mapping[str, Any]) -> Done:
    """Give registered device ``name`` a new ``public_key``: its queues kept, a revocation lifted."""
    def do() -> dict[str, Any]:
        name = _name(arguments)
        others = qm.exchange.rekey_device(name, _public_key(arguments), share_key=_flag(arguments, "force"))
        return _answer(qm, name, shares_key_with=others)
    return audited(qm.path, who, "rekey-device", _target(arguments), do, clock=qm.now_ms)


def set_device_queues(qm: QueueManager, who: Principal, arguments: Mapping[str, Any]) -> Done:
    """Change the ``queues`` registered device ``name`` may push to (null: any)."""
    def do() -> dict[str, Any]:
        name = _name(arguments)
        qm.exchange.set_device_queues(name, _queues(arguments, "queues", required=True))
        return _answer(qm, name)
    return audited(qm.path, who, "set-device-queues", _target(arguments), do, clock=qm.now_ms)


def routes(api: Api) -> list[Route]:
    return [
        Route("/devices", api.act_on(register_device), methods=["POST"]),
        Route("/devices/{name}/key", api.act_on(rekey_device), methods=["POST"]),
        Route("/devices/{name}/queues", api.act_on(set_device_queues), methods=["PUT", "POST"]),
    ]


def _answer(qm: QueueManager, name: str, **more: Any) -> dict[str, Any]:
    found = qm.device(name)
    if found is None:  # removed meanwhile: devices are never removed, so this is a damaged store
        raise ApiError(409, f"device {name} vanished while it was changed: run edgeq check on the store")
    return {"device": device_json(found), **more}


def _target(arguments: Mapping[str, Any]) -> str:
    """The device named, as the record shows it (checked in the action)."""
    return str(arguments.get("name"))[:100]


def _name(arguments: Mapping[str, Any]) -> str:
    name = arguments.get("name")
    if not isinstance(name, str):
        raise ApiError(400, "give the device's name: \"name\": \"DEV1\" (its queue manager name)")
    try:
        return check_name(name, "device name")
    except EdgeqError as exc:
        raise ApiError(400, str(exc)) from None


def _public_key(arguments: Mapping[str, Any]) -> bytes:
    text = arguments.get("public_key")
    if not isinstance(text, str):
        raise ApiError(400, "give \"public_key\": the text of the device's .pub file (from edgeq keys new)")
    try:
        return parse_public_key(text.encode(), "public_key")
    except EdgeqError as exc:
        raise ApiError(400, str(exc)) from None


def _queues(arguments: Mapping[str, Any], key: str, *, required: bool) -> list[str] | None:
    if required and key not in arguments:
        raise ApiError(400, f"give \"{key}\": a list of queue names ([] for none), or null for any")
    queues = arguments.get(key)
    if queues is not None and not (isinstance(queues, list) and all(isinstance(q, str) for q in queues)):
        raise ApiError(400, f"\"{key}\" must be a list of queue names ([] for none), or null for any")
    return queues


def _flag(arguments: Mapping[str, Any], key: str) -> bool:
    value = arguments.get(key, False)
    if not isinstance(value, bool):
        raise ApiError(400, f"\"{key}\" must be true or false, not {value!r:.40}")
    return value

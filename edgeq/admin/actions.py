"""What each admin action does on a device, through the queue manager's own verbs, so a request
behaves as the same local call; a bad target, param or verb error is a failed item, never raised."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from edgeq.admin.wire import AdminRequest, as_python
from edgeq.errors import EdgeqError, QueueNotEmpty
from edgeq.queues.attributes import QueueAttributes, QueueUsage
from edgeq.results import PutResult
from edgeq.store.rules import FailureRow
from edgeq.store.syncstate import SyncTx
from edgeq.store.tx import Tx

if TYPE_CHECKING:
    from edgeq.events.bindings import BindingInfo
    from edgeq.exchange.transmit import SyncOverview
    from edgeq.message import Message
    from edgeq.store.connection import ConnectionFactory
    from edgeq.uid import MessageUID

__all__ = ["AdminHost", "Item", "run_action"]

log = logging.getLogger("edgeq.admin")

#: One result of a reply: ``{"object": ..., "rc": ..., "reason": ..., ...values}``.
Item = dict[str, object]


class AdminHost(Protocol):
    """What the executor calls on the queue manager (``QueueManager`` is one): the core never imports it."""

    name: str

    @property
    def origin(self) -> str:
        """The origin of the uids the store issues."""
        ...

    def now_ms(self) -> int:
        """The queue manager's clock."""
        ...

    # ``*args: Any, **attributes: Any`` takes the facade's keyword-only signature as it is.
    def define_queue(self, name: str, *args: Any, **attributes: Any) -> None:
        ...

    def define_remote_queue(self, name: str, *args: Any, **attributes: Any) -> None:
        ...

    def define_home_server_queue(self, name: str, *, server: str, **attributes: Any) -> None:
        ...

    def alter_queue(self, name: str, **attributes: Any) -> QueueAttributes:
        ...

    def delete_queue(self, name: str) -> None:
        ...

    def queue_attributes(self, name: str) -> QueueAttributes:
        ...

    def queue_usage(self, name: str) -> QueueUsage:
        ...

    def queue_names(self) -> list[str]:
        ...

    def purge(self, name: str) -> int:
        ...

    def sweep_expired(self, name: str | None = None) -> int:
        ...

    def queue_bindings(self, queue: str) -> list[BindingInfo]:
        ...

    def rule_failures(self, *, parked: bool | None = None) -> list[FailureRow]:
        ...

    def retry_rule_failures(self, *, parked: bool = False, event_id: int | None = None) -> int:
        ...

    def sync_overview(self) -> SyncOverview:
        ...

    def browse(self, queue: str, *, limit: int | None = None) -> list[Message]:
        ...

    def put_each(self, queue: str, messages: Sequence[Message]) -> list[PutResult]:
        ...

    def delete_message(self, queue: str, uid: MessageUID | str) -> None:
        ...


def item(obj: str | None, reason: str | None = None, **values: object) -> Item:
    """One result: success without a reason, failed with one."""
    return {"object": obj, "rc": "success" if reason is None else "failed", "reason": reason, **values}


class _Refused(Exception):
    """A target or param the action cannot take: the item fails with this reason."""


def run_action(host: AdminHost, db: ConnectionFactory, request: AdminRequest) -> tuple[list[Item], str]:
    """Run ``request``'s action on ``host``; return its items and a one-line message. Never raises:
    an unexpected error is logged and answered as an internal error."""
    action = _ACTIONS[request.action]
    what = f"{request.action} {request.target or ''}".strip()
    try:
        items = action(host, db, request)
    except _Refused as exc:
        return [item(request.target, str(exc))], f"{what}: {exc}"
    except EdgeqError as exc:
        return [item(request.target, str(exc), **_extra(host, db, request, exc))], f"{what}: {exc}"
    except Exception as exc:  # a bug must not stop the device's admin queue: answered, logged
        log.exception("admin request %s (%s) failed unexpectedly", request.request_id, what)
        reason = f"internal error ({type(exc).__name__}: {exc}); see the device's log"
        return [item(request.target, reason)], f"{what}: {reason}"
    failed = sum(1 for i in items if i["rc"] == "failed")
    summary = "done" if not failed else f"{failed} of {len(items)} failed"
    return items, f"{what}: {summary}"


def _extra(
    host: AdminHost, db: ConnectionFactory, request: AdminRequest, exc: EdgeqError
) -> dict[str, object]:
    """What a failed item says besides its reason: a refused delete's live count."""
    if isinstance(exc, QueueNotEmpty) and request.target is not None:
        with db.read() as conn:
            row = Tx(conn).queue(request.target)
        return {} if row is None else {"depth": row.depth}
    return {}


# -- checks ------------------------------------------------------------------------------------


def _queue(request: AdminRequest) -> str:
    if request.target is None:
        raise _Refused(f"{request.action} needs a target queue")
    return request.target


def _no_target(request: AdminRequest) -> None:
    if request.target is not None:
        raise _Refused(f"{request.action} acts on the queue manager: send it without a target")


def _params(request: AdminRequest, allowed: Sequence[str], required: Sequence[str] = ()) -> dict[str, Any]:
    """The request's params as keyword arguments, every name checked against ``allowed``."""
    unknown = sorted(set(request.params) - set(allowed))
    if unknown:
        hint = f"use {', '.join(sorted(allowed))}" if allowed else "it takes none"
        raise _Refused(f"unknown parameter(s) {', '.join(unknown)} for {request.action}: {hint}")
    missing = [name for name in required if name not in request.params]
    if missing:
        raise _Refused(f"{request.action} needs parameter(s) {', '.join(missing)}")
    out = {name: as_python(value) for name, value in request.params.items()}
    if "rules" in out:
        _check_rule_names(out["rules"])
    return out


def _check_rule_names(specs: object) -> None:
    """Refuse a module path (``pkg.mod:Class``) as a rule: by request only installed plugins, by
    name, so a device never imports code the operator names."""
    if not isinstance(specs, list):
        return  # the verb itself says what is wrong
    for spec in specs:
        name = spec if isinstance(spec, str) else spec[0] if isinstance(spec, list) and spec else None
        if isinstance(name, str) and ":" in name:
            raise _Refused(f"rule {name!r} is a module path: "
                           "by admin request only installed rule plugins may be "
                           "bound, by name (edgeq rules list on the device shows them)")


def _keywords(verb: Callable[..., object], *, drop: Sequence[str] = ()) -> list[str]:
    """A verb's keyword-only parameters (its queue attributes), so every attribute the local
    API takes is taken by request too, under the same name."""
    return [p.name for p in inspect.signature(verb).parameters.values()
            if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name not in drop]


# -- the actions -------------------------------------------------------------------------------


def _inquire_queue(host: AdminHost, db: ConnectionFactory, request: AdminRequest) -> list[Item]:
    name = _queue(request)
    _params(request, ())
    usage = host.queue_usage(name)  # MQe's size inquiry: expired messages are purged first
    attributes = host.queue_attributes(name).as_dict()
    with db.read() as conn:
        row = Tx(conn).queue(name)
        oldest = None if row is None else SyncTx(conn).oldest_arrival(row.id)
    age = None if oldest is None else max(0, host.now_ms() - oldest)
    return [item(name, attributes=attributes, depth=usage.depth, bytes=usage.bytes, oldest_age_ms=age)]


def _inquire_all(host: AdminHost, db: ConnectionFactory, request: AdminRequest) -> list[Item]:
    _no_target(request)
    _params(request, ())
    items = []
    for name in host.queue_names():
        try:
            kind = host.queue_attributes(name).kind
            usage = host.queue_usage(name)
        except EdgeqError as exc:  # deleted meanwhile, or a damaged row: that queue's item fails
            items.append(item(name, str(exc)))
            continue
        items.append(item(name, kind=kind, depth=usage.depth, bytes=usage.bytes))
    return items


def _define_queue(host: AdminHost, db: ConnectionFactory, request: AdminRequest) -> list[Item]:
    name = _queue(request)
    kind = request.params.get("kind", "local")
    local = _keywords(host.define_queue)
    if kind == "local":
        host.define_queue(name, **_without_kind(_params(request, ["kind", *local])))
    elif kind == "remote":
        remote = _keywords(host.define_remote_queue)
        host.define_remote_queue(name, **_without_kind(_params(request, ["kind", *remote], ["target_qmgr"])))
    elif kind == "home":
        params = _without_kind(_params(request, ["kind", "server", *local], ["server"]))
        host.define_home_server_queue(name, **params)
    else:
        raise _Refused(f"kind {kind!r} is not a queue kind: use 'local', 'remote' or 'home'")
    return [item(name, attributes=host.queue_attributes(name).as_dict())]


def _without_kind(params: dict[str, Any]) -> dict[str, Any]:
    params.pop("kind", None)
    return params


def _alter_queue(host: AdminHost, db: ConnectionFactory, request: AdminRequest) -> list[Item]:
    name = _queue(request)
    allowed = {*_keywords(host.define_queue), *_keywords(host.define_remote_queue)} - {
        "target_qmgr", "target_queue", "mode", "encryption"}
    attributes = host.alter_queue(name, **_params(request, sorted(allowed)))
    return [item(name, attributes=attributes.as_dict())]


def _delete_queue(host: AdminHost, db: ConnectionFactory, request: AdminRequest) -> list[Item]:
    name = _queue(request)
    _params(request, ())
    host.delete_queue(name)  # MQe: expired messages are purged first, then it must be empty
    return [item(name)]


def _purge(host: AdminHost, db: ConnectionFactory, request: AdminRequest) -> list[Item]:
    name = _queue(request)
    _params(request, ())
    return [item(name, purged=host.purge(name))]


def _sweep(host: AdminHost, db: ConnectionFactory, request: AdminRequest) -> list[Item]:
    name = request.target
    _params(request, ())
    names = [name] if name is not None else host.queue_names()
    items = []
    for queue in names:
        try:
            items.append(item(queue, discarded=host.sweep_expired(queue)))
        except EdgeqError as exc:
            items.append(item(queue, str(exc)))
    return items


def _inquire_rules(host: AdminHost, db: ConnectionFactory, request: AdminRequest) -> list[Item]:
    name = request.target
    _params(request, ())
    failures: dict[str, list[dict[str, object]]] = {}
    for f in host.rule_failures():
        failures.setdefault(f.queue, []).append({
            "event_id": f.event_id, "binding": f.binding, "rule": f.rule, "attempts": f.attempts,
            "last_error": f.last_error[:1000], "last_ms": f.last_ms, "next_ms": f.next_ms, "parked": f.parked,
        })
    items = []
    for queue in [name] if name is not None else host.queue_names():
        bindings = [{"name": b.name, "config": b.config, "persisted": b.persisted, "error": b.error}
                    for b in host.queue_bindings(queue)]
        if name is not None or bindings or queue in failures:
            items.append(item(queue, bindings=bindings, failures=failures.get(queue, [])))
    return items


def _retry_rules(host: AdminHost, db: ConnectionFactory, request: AdminRequest) -> list[Item]:
    _no_target(request)
    params = _params(request, ("parked", "event_id"))
    if not isinstance(params.get("parked", False), bool):
        raise _Refused(f"parked must be true or false, not {params['parked']!r}")
    return [item(None, retried=host.retry_rule_failures(**params))]


def _inquire_sync(host: AdminHost, db: ConnectionFactory, request: AdminRequest) -> list[Item]:
    _no_target(request)
    _params(request, ())
    overview = host.sync_overview()
    now = host.now_ms()
    items = [item(None, agent=_json_safe(overview.agent))]
    for q in overview.queues:
        items.append(item(
            q.name, kind=q.kind, peer=q.peer, target_queue=q.target_queue, backlog=q.depth,
            oldest_age_ms=None if q.oldest_arrived_ms is None else max(0, now - q.oldest_arrived_ms),
            refused_messages=q.refused_messages, refusals=q.refusals, last_refusal=q.last_refusal,
            last_refusal_ms=q.last_refusal_ms, refusal_limit=q.refusal_limit, state=_json_safe(q.state),
        ))
    return items


def _json_safe(value: Mapping[str, Any]) -> dict[str, Any]:
    """What the sync agent recorded (JSON) as reply values: its keys and plain values."""
    return {
        str(k): v for k, v in value.items() if isinstance(v, (str, int, float, bool, list, dict)) or v is None
    }


_ACTIONS: dict[str, Callable[[AdminHost, ConnectionFactory, AdminRequest], list[Item]]] = {
    "inquire-queue": _inquire_queue,
    "inquire-all": _inquire_all,
    "define-queue": _define_queue,
    "alter-queue": _alter_queue,
    "delete-queue": _delete_queue,
    "purge": _purge,
    "sweep": _sweep,
    "inquire-rules": _inquire_rules,
    "retry-rules": _retry_rules,
    "inquire-sync": _inquire_sync,
}

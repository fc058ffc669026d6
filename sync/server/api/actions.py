"""The actions an operator may take, each one function the API's endpoint and the console's confirmed form
both call (:func:`perform`: done, recorded in ``api_actions``, however it ends); and what each
confirmation page says it will do (docs/console.md, "Actions")."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from contextlib import closing
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Final

from edgeq.manager import QueueManager
from edgeq.store.opening import connect
from edgeq.store.rules import FailureRow, RuleTx
from edgeq.sync.server.api import audit
from edgeq.sync.server.api.browse import device_json, one_message
from edgeq.sync.server.api.http import ApiError, queue_name, uid

if TYPE_CHECKING:
    from edgeq.sync.server.api.auth import Principal

__all__ = ["ACTIONS", "Action", "perform"]

log = logging.getLogger("edgeq.rules")


@dataclass(frozen=True)
class Action:
    """An action by name: ``do(qm, target, who)`` does it and returns what the API answers; ``ask(qm,
    target)`` says what it will do, for a person to confirm (an :class:`ApiError` if it cannot be)."""

    name: str
    do: Callable[[QueueManager, str, str], dict[str, Any]]
    ask: Callable[[QueueManager, str], str]


def perform(qm: QueueManager, action: str, target: str, *, who: Principal,
            clock: Callable[[], int]) -> tuple[int, Any]:
    """Do ``action`` on ``target`` as ``who`` (:func:`.audit.audited`: an operator's only, recorded however it
    ends); the record's id and the answer."""
    return audit.audited(qm.path, who, action, target, lambda: ACTIONS[action].do(qm, target, who.who),
                         clock=clock)


def _depth(qm: QueueManager, name: str) -> int:
    """Every message ``name`` holds (locked and expired ones too: what a purge deletes)."""
    with closing(connect(qm.path, read_only=True)) as conn:
        found = conn.execute("SELECT count(*) FROM messages JOIN queues ON queues.id = messages.queue_id "
                             "WHERE queues.name = ?", (name,)).fetchone()
    return int(found[0])


def _queue(qm: QueueManager, text: str) -> str:
    name = queue_name(text)
    if name not in qm.queue_names():
        raise ApiError(404, f"no queue {name!r}: GET /api/v1/queues lists them")
    return name


def purge_queue(qm: QueueManager, target: str, who: str) -> dict[str, Any]:
    name = queue_name(target)
    return {"queue": name, "purged": qm.purge(name)}


def _ask_purge(qm: QueueManager, target: str) -> str:
    name = _queue(qm, target)
    return f"Purge queue {name}: {_depth(qm, name)} messages will be deleted (locked and expired ones too)."


def _dead_letter(qm: QueueManager, target: str) -> tuple[str, str]:
    """A dead-lettered message's uid and the queue it left (a 404 if the dead-letter queue holds no such)."""
    wanted, dlq = uid(target), qm.dead_letter_queue()
    with closing(connect(qm.path, read_only=True)) as conn:
        found = one_message(conn, dlq, wanted, now_ms=qm.now_ms()) if dlq in qm.queue_names() else None
    if found is None:
        raise ApiError(404, f"{wanted} is not on the dead-letter queue {dlq}: it was re-sent, deleted or "
                            "never there")
    left = (found["fields"] or {}).get("dlq.queue", {}).get("value", "?")
    return str(wanted), str(left)


def resend_dead_letter(qm: QueueManager, target: str, who: str) -> dict[str, Any]:
    wanted = uid(target)
    result = qm.dlq_resend([wanted])
    if result.kept:
        why = result.kept[0][1]
        raise ApiError(404 if why.startswith("not on") or why.startswith("there is no") else 409,
                       f"{wanted} was not re-sent: {why}")
    return {"resent": [str(u) for u in result.moved]}


def delete_dead_letter(qm: QueueManager, target: str, who: str) -> dict[str, Any]:
    wanted = uid(target)
    return {"deleted": qm.dlq_delete([wanted]), "uid": str(wanted)}


def _ask_resend(qm: QueueManager, target: str) -> str:
    wanted, left = _dead_letter(qm, target)
    return f"Re-send dead-lettered message {wanted} to queue {left}, the queue it left."


def _ask_delete(qm: QueueManager, target: str) -> str:
    wanted, left = _dead_letter(qm, target)
    return f"Delete dead-lettered message {wanted} (it left queue {left}) for good."


def revoke_device(qm: QueueManager, target: str, who: str) -> dict[str, Any]:
    before = qm.device(target)
    if before is None:
        raise ApiError(404, f"no device {target[:60]!r}: GET /api/v1/devices lists them")
    if before.revoked_ms is not None:
        return {"revoked": False, "detail": "it was revoked already", "device": device_json(before)}
    qm.revoke_device(before.name)
    after = qm.device(before.name)
    return {"revoked": True, "device": None if after is None else device_json(after)}


def _ask_revoke(qm: QueueManager, target: str) -> str:
    if qm.device(target) is None:
        raise ApiError(404, f"no device {target[:60]!r}: GET /api/v1/devices lists them")
    return f"Revoke device {target}: every request it sends will be refused from now on."


def _event_id(target: str) -> int:
    if not (target.isascii() and target.isdigit() and len(target) <= 18):
        raise ApiError(400, f"a rule event's id is a whole number (as listed), not {target[:20]!r}")
    return int(target)


def _parked(qm: QueueManager, target: str) -> list[FailureRow]:
    """Rule event ``target``'s parked deliveries (a 404 if it has none)."""
    event = _event_id(target)
    found = [f for f in qm.rule_failures(parked=True) if f.event_id == event]
    if not found:
        raise ApiError(404, f"rule event {event} has no parked delivery: GET /api/v1/rule-events?parked=true "
                            "lists them")
    return found


def _rules(found: list[FailureRow]) -> str:
    return ", ".join(f"rule {f.rule} (binding {f.binding})" for f in found)


def retry_rule_event(qm: QueueManager, target: str, who: str) -> dict[str, Any]:
    found = _parked(qm, target)
    succeeded = qm.retry_rule_failures(parked=True, event_id=found[0].event_id)
    still = [asdict(f) for f in qm.rule_failures() if f.event_id == found[0].event_id]
    return {"event_id": found[0].event_id, "retried": len(found), "succeeded": succeeded, "failing": still}


def drop_rule_event(qm: QueueManager, target: str, who: str) -> dict[str, Any]:
    event = _event_id(target)
    with closing(connect(qm.path)) as conn:
        conn.execute("BEGIN IMMEDIATE")
        try:
            dropped = RuleTx(conn).drop(event)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
    if not dropped:
        raise ApiError(404, f"rule event {event} has no parked delivery: GET /api/v1/rule-events?parked=true "
                            "lists them")
    for f in dropped:
        log.warning("rule %s: parked event %s on queue %s dropped by %s; it will never be delivered to it "
                    "(the record of actions, GET /api/v1/actions, keeps who and when)",
                    f.rule, f.event_id, f.queue, who)
    return {"event_id": event, "dropped": [asdict(f) for f in dropped]}


def _ask_retry(qm: QueueManager, target: str) -> str:
    found = _parked(qm, target)
    return (f"Retry rule event {found[0].event_id} on queue {found[0].queue}: deliver it again to "
            f"{_rules(found)}.")


def _ask_drop(qm: QueueManager, target: str) -> str:
    found = _parked(qm, target)
    return (f"Drop rule event {found[0].event_id} on queue {found[0].queue}: it will never be delivered to "
            f"{_rules(found)}.")


#: every action, by the name the record of actions gives it
ACTIONS: Final[Mapping[str, Action]] = {a.name: a for a in (
    Action("purge-queue", purge_queue, _ask_purge),
    Action("resend-dead-letter", resend_dead_letter, _ask_resend),
    Action("delete-dead-letter", delete_dead_letter, _ask_delete),
    Action("revoke-device", revoke_device, _ask_revoke),
    Action("retry-rule-event", retry_rule_event, _ask_retry),
    Action("drop-rule-event", drop_rule_event, _ask_drop),
)}

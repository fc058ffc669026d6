"""Remote and home-server queues: what the sync layer builds on (see ``docs/protocol.md``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal

from edgeq.bindings import RuleSpec
from edgeq.errors import (
    InvalidArgument,
    InvalidType,
    RemoteUnavailable,
)
from edgeq.message import Message
from edgeq.names import check_name
from edgeq.queues import QueueAttributes
from edgeq.uid import MessageUID

if TYPE_CHECKING:

    pass

from edgeq.qm_base import (
    QueueManagerBase,
    _check_count,
    _check_uid,
)

__all__ = ["RemoteMixin"]


class RemoteMixin(QueueManagerBase):
    """Remote and home-server queues, and the transmission verbs the sync agent uses."""

    def release_locks(self, queue: str) -> int:
        """Undo every assured-get lock on a queue (its getter is gone); return how many.

        Each released message is visible again with ``backout_count`` + 1.
        """
        self._touch(queue)
        with self._write() as tx:
            q = self._queue(tx, queue)
            ids = tx.get_locked(q.id)
            tx.back_out(ids)
        return len(ids)

    def define_remote_queue(
        self,
        name: str,
        *,
        target_qmgr: str,
        target_queue: str | None = None,
        mode: Literal["async", "sync"] = "async",
        expiry_ms: int | None = None,
        cap_expiry_ms: int | None = None,
        max_depth: int | None = None,
        max_message_bytes: int | None = None,
        default_priority: int = 4,
        rules: Sequence[RuleSpec] | None = None,
        encryption: str | None = None,
    ) -> None:
        """Define a remote queue: puts are kept here (durably, expiry running) and
        transmitted to ``target_queue`` (default: the same name) on queue manager
        ``target_qmgr`` by the sync agent. ``mode="async"`` stores and forwards
        later; ``mode="sync"`` transmits inside ``put`` and raises
        :class:`RemoteUnavailable` (keeping nothing) if that fails. Applications
        cannot get or browse a remote queue.

        >>> import tempfile, os
        >>> from edgeq import Message, QueueManager
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> qm.define_remote_queue("ORDERS", target_qmgr="HOME")
        >>> qm.queue_attributes("ORDERS").target_queue
        'ORDERS'
        >>> qm.close()
        """
        check_name(target_qmgr, "target queue manager name")
        if target_queue is not None:
            check_name(target_queue, "target queue name")
        if mode not in ("async", "sync"):
            raise InvalidArgument(f"mode must be 'async' or 'sync', not {mode!r}")
        attrs = {
            "expiry_ms": expiry_ms, "cap_expiry_ms": cap_expiry_ms, "max_depth": max_depth,
            "max_message_bytes": max_message_bytes, "default_priority": default_priority, "ordering": "priority",
        }
        kind = {
            "kind": "remote", "target_qmgr": target_qmgr, "target_queue": target_queue or name, "mode": mode,
            "encryption": self._cipher(encryption),
        }
        self._define(name, attrs, rules, kind)

    def define_home_server_queue(self, name: str, *, server: str, **attributes: Any) -> None:
        """Define a home-server queue: a local queue that the sync agent fills by pulling,
        from home server ``server``, the messages addressed to this queue manager's
        ``name`` (held there on the queue ``<this qm name>.<name>``). Other keywords
        are those of :meth:`define_queue`.
        """
        check_name(server, "home server name")
        rules = attributes.pop("rules", None)
        cipher = self._cipher(attributes.pop("encryption", None))
        defaults: dict[str, Any] = {"default_priority": 4, "ordering": "priority"}
        self._define(name, {**defaults, **attributes}, rules, {"kind": "home", "server": server, "encryption": cipher})

    def remote_queues(self) -> list[QueueAttributes]:
        """The remote queues defined here."""
        return self._queues_of_kind("remote")

    def home_server_queues(self) -> list[QueueAttributes]:
        """The home-server queues defined here."""
        return self._queues_of_kind("home")

    def set_transmitter(self, transmitter: Callable[[str], None] | None) -> None:
        """Register what pushes a sync-mode remote queue inside ``put`` (the sync agent
        does this): ``transmitter(queue_name)`` must deliver the queue now or raise."""
        if transmitter is not None and not callable(transmitter):
            raise InvalidType("the transmitter must be callable as transmitter(queue_name)")
        self._transmitter = transmitter

    def _transmit_now(self, queue: str, uids: list[MessageUID]) -> None:
        """Sync mode: deliver at once, or take the messages back and raise."""
        if not uids:
            return
        transmitter = self._transmitter
        reason = "no sync agent is running (nothing called set_transmitter)"
        if transmitter is not None:
            try:
                transmitter(queue)
                reason = "the server did not take every message"
            except Exception as exc:
                reason = f"{type(exc).__name__}: {exc}"
        with self._write() as tx:
            q = self._queue(tx, queue)
            left = [row.id for uid in uids if (row := tx.find(q.id, uid.origin, uid.stamp)) is not None]
            tx.delete(q.id, left)
        if left:
            raise RemoteUnavailable(
                f"remote queue {queue!r} is synchronous and could not deliver to {q.target_qmgr}: {reason}; "
                "nothing was kept: retry when the server is reachable, or use mode='async'"
            )

    def next_for_transmission(self, queue: str, limit: int) -> list[Message]:
        """The next ``limit`` messages to transmit from a remote queue, in get order,
        without removing or locking them. Expired ones met first are discarded
        (rules see ``where="get"``): an expired message is never transmitted."""
        return self._take(queue, _check_count(limit), wanted=None, remove=False, confirm_id=None)

    def transmitted(self, queue: str, uids: Sequence[MessageUID | str]) -> int:
        """Delete local copies the target has confirmed, in one transaction (rules see
        reason ``transmitted``); uids no longer here are skipped. Returns how many."""
        checked = [_check_uid(uid) for uid in uids]
        self._touch(queue)
        now = self._clock()
        with self._write() as tx:
            q = self._queue(tx, queue)
            ids = [row.id for uid in checked if (row := tx.find(q.id, uid.origin, uid.stamp)) is not None]
            events = self._events(queue, "removed", tx.delete(q.id, ids), now, reason="transmitted")
            self._record(tx, events)
        self._rules.dispatch(events)
        return len(ids)

"""Remote and home-server queues: what the sync layer builds on (see ``docs/protocol.md``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from edgeq.bindings import RuleSpec
from edgeq.errors import (
    InvalidArgument,
    InvalidType,
    RemoteUnavailable,
)
from edgeq.message import Message
from edgeq.names import check_name, check_origin
from edgeq.queues import QueueAttributes
from edgeq.store import Tx
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
        cannot get or browse a remote queue. A store never given a ``journal``
        setting journals its expiries from now on (``journal_mode == "device"``),
        for the sync agent to report.

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
        self._sync_queue_defined()

    def define_home_server_queue(self, name: str, *, server: str, **attributes: Any) -> None:
        """Define a home-server queue: a local queue that the sync agent fills by pulling,
        from home server ``server``, the messages addressed to this queue manager's
        ``name`` (held there on the queue ``<this qm name>.<name>``). Other keywords
        are those of :meth:`define_queue`. As with :meth:`define_remote_queue`, a
        store never given a ``journal`` setting journals its expiries from now on.

        >>> import tempfile, os
        >>> from edgeq import QueueManager
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> qm.define_home_server_queue("INBOX", server="HOME")
        >>> qm.queue_attributes("INBOX").server, qm.journal_mode
        ('HOME', 'device')
        >>> qm.close()
        """
        check_name(server, "home server name")
        rules = attributes.pop("rules", None)
        cipher = self._cipher(attributes.pop("encryption", None))
        defaults: dict[str, Any] = {"default_priority": 4, "ordering": "priority"}
        self._define(name, {**defaults, **attributes}, rules, {"kind": "home", "server": server, "encryption": cipher})
        self._sync_queue_defined()

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

    # -- settling: exactly-once without a time window (docs/protocol.md) --------------------

    def settled_below(self) -> int:
        """This store's low-water mark: no uid of its :attr:`origin` with a stamp below it
        is held on a remote queue, so none will ever be transmitted again. The sync agent
        sends it on every request; the receiver then forgets those uids (:meth:`settle`).

        >>> import tempfile, os
        >>> from edgeq import Message, QueueManager
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> qm.define_remote_queue("ORDERS", target_qmgr="HOME")
        >>> uid = qm.put("ORDERS", Message(b"x"))
        >>> qm.settled_below() == uid.stamp
        True
        >>> _ = qm.transmitted("ORDERS", [uid]); qm.settled_below() == uid.stamp + 1
        True
        >>> qm.close()
        """
        with self._db.read() as conn:
            return Tx(conn).transmission_low_water(self._origin)

    def settle(self, origin: str, below: int) -> int:
        """The sender of ``origin``'s messages says it holds none with a stamp below
        ``below`` any more (its :meth:`settled_below`): forget those remembered
        confirmed uids on every queue. From then on ``origin``'s uids are forgotten only
        this way, never by age (``remember_confirmed_ms`` no longer applies to them).
        Returns how many were forgotten.

        >>> import tempfile, os
        >>> from edgeq import Message, MessageUID, QueueManager
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "h.db"), name="HOME")
        >>> qm.define_queue("Q"); uid = MessageUID("DEV1:abc", 5)
        >>> _ = qm.put("Q", Message(b"x", uid=uid), confirm_id=1); qm.confirm_put("Q", uid)
        >>> qm.remembered_count("DEV1:abc"), qm.settle("DEV1:abc", 6), qm.remembered_count("DEV1:abc")
        (1, 1, 0)
        >>> qm.close()
        """
        check_origin(origin, "settle origin")
        below = _check_stamp(below, "below")
        with self._write(durable=False) as tx:  # lost in a power cut: only remembered a little longer
            return tx.settle(origin, below, self._clock())

    def settle_queue(self, queue: str, held: Mapping[str, int]) -> int:
        """The sender of ``queue``'s messages (a home server, for a home-server queue)
        still holds, per origin, nothing below ``held[origin]``, and nothing of an origin
        it does not name (its :meth:`held_low_water`): forget the rest of the confirmed
        uids this queue remembers; those origins are no longer forgotten by age.
        Returns how many were forgotten."""
        if not isinstance(held, Mapping):
            raise InvalidType("held must be a mapping of origin -> lowest stamp held")
        checked = {check_origin(o, "held origin"): _check_stamp(s, f"held[{o!r}]") for o, s in held.items()}
        self._touch(queue)
        with self._write(durable=False) as tx:
            return tx.settle_queue(self._queue(tx, queue).id, checked, self._clock())

    def held_low_water(self, queue: str) -> dict[str, int]:
        """Per origin, the lowest stamp ``queue`` holds in any state: a puller may be
        offered again only what is at or above it (sent with every pull).

        >>> import tempfile, os
        >>> from edgeq import Message, MessageUID, QueueManager
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "h.db"), name="HOME")
        >>> qm.define_queue("Q"); _ = qm.put_many("Q", [Message(b"a", uid=MessageUID("X", 9)),
        ...                                            Message(b"b", uid=MessageUID("X", 7))])
        >>> qm.held_low_water("Q")
        {'X': 7}
        >>> qm.close()
        """
        self._touch(queue)
        with self._db.read() as conn:
            tx = Tx(conn)
            return tx.held_low_water(self._queue(tx, queue).id)

    def remembered_count(self, origin: str | None = None) -> int:
        """How many confirmed uids this queue manager remembers to recognise late
        duplicates (of ``origin`` only, if given): bounded by what senders still hold."""
        if origin is not None:
            check_origin(origin, "origin")
        with self._db.read() as conn:
            return Tx(conn).remembered_count(origin)


def _check_stamp(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
        raise InvalidArgument(f"{what} must be a stamp (an int from 0 to 2**63-1), not {value!r}")
    return value

"""The queue manager: local queues in one SQLite file, with MQe's expiry semantics."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from edgeq.bindings import RuleSpec, build_bindings, check_specs
from edgeq.codec import encode_fields
from edgeq.crypto import IntegrityError
from edgeq.dispatch import Pending
from edgeq.errors import (
    ConfirmIdNotFound,
    DuplicateMessage,
    EdgeqError,
    InvalidArgument,
    InvalidType,
    MessageExpired,
    MessageNotFound,
    MessageTooLarge,
    QueueFull,
    QueueNotEmpty,
)
from edgeq.expiry import effective_deadline, own_deadline
from edgeq.journal import JournalTx, entry_row
from edgeq.message import Message, check_fields
from edgeq.names import check_name
from edgeq.queues import QueueAttributes, check_attributes
from edgeq.results import ConfirmResult, PutResult
from edgeq.rows import EXPIRY_KINDS, to_message
from edgeq.store import MessageRow, NewMessage, QueueRow, Tx
from edgeq.types import Filter, MessageState, Ordering, RemovalReason, Where
from edgeq.uid import MessageUID

if TYPE_CHECKING:

    pass

from edgeq.qm_admin import AdminMixin
from edgeq.qm_base import (
    _DISCARD_BATCH,
    _PAGE,
    _check_confirm_id,
    _check_count,
    _check_uid,
    _expired,
    _matches,
    _plain_size,
)
from edgeq.qm_remote import RemoteMixin
from edgeq.qm_rules import RulesMixin

__all__ = ["QueueManager"]

log = logging.getLogger("edgeq")

class QueueManager(RulesMixin, RemoteMixin, AdminMixin):
    """A queue manager: named local queues, durable in one SQLite file.

    >>> import tempfile, os
    >>> from edgeq import Message, Int32
    >>> path = os.path.join(tempfile.mkdtemp(), "device.db")
    >>> with QueueManager(path, name="DEV1") as qm:
    ...     qm.define_queue("ORDERS", expiry_ms=3_600_000)
    ...     uid = qm.put("ORDERS", Message(b"42 widgets", expiry=Int32(60_000)))
    ...     qm.depth("ORDERS"), qm.get("ORDERS").data
    (1, b'42 widgets')

    ``name`` (1-48 of ``A-Za-z0-9._-``) is needed to create a store and is
    checked against the stored one when reopening. ``durability="full"`` (WAL,
    ``synchronous=FULL``) survives power loss; ``"normal"`` may lose the last
    commits on power loss (never on a process crash) for speed. ``timeout`` is
    how long a call waits for another connection's write lock. ``clock``
    returns epoch ms; the default reads ``time.time()``, so freezegun works.
    Confirmed assured puts are remembered, so a late duplicate of one is
    recognised even after the message was consumed: until their sender settles
    them (:meth:`settle`, which the sync agent drives: no time limit), or, for
    senders that never do, for ``remember_confirmed_ms`` (a day by default;
    None: not at all). Each store has an incarnation, part of every uid it issues
    (:attr:`origin`), so a store made again under the same name never reissues
    an earlier one's uids. ``journal="server"`` keeps an append-only
    history of accepted, expired and delivered messages (``journal="device"``:
    only expiries, to report to the server; ``"off"``: none); the setting is
    stored, so later opens (``journal=None``) keep it. A store never given one
    journals ``"device"`` as soon as it has a remote or home-server queue (from
    that queue's definition on, and at every open), so expiries before the first
    ``edgeq sync`` still reach the server; ``journal="off"`` keeps it off. See :mod:`edgeq.journal`. A rule hook that raises on a durable event is retried up to
    ``rule_retry_limit`` times, backing off from ``rule_retry_base_ms``, then parked.

    One instance may be shared by threads; several processes may open the same
    file. Every message is delivered to exactly one getter.
    """
    def define_queue(
        self,
        name: str,
        *,
        expiry_ms: int | None = None,
        cap_expiry_ms: int | None = None,
        max_depth: int | None = None,
        max_message_bytes: int | None = None,
        default_priority: int = 4,
        ordering: Ordering = "priority",
        depth_threshold: int | None = None,
        rules: Sequence[RuleSpec] | None = None,
        encryption: str | None = None,
    ) -> None:
        """Define a local queue; raise :class:`QueueExists` if it is defined already.

        ``encryption="aes-256-gcm"`` seals message data and fields in the store
        with the queue manager's store key (see :mod:`edgeq.crypto`); the default
        is the queue manager's ``default_encryption``.

        ``depth_threshold``: rules' ``on_threshold`` fires when a put takes the
        depth up to it. ``rules``: rules to bind by name, each a name or a
        ``(name, config)`` pair, e.g. ``[("dead-letter", {"queue": "DLQ"}), "log"]``;
        the bindings are stored and re-attached whenever the store is opened. Each
        rule validates its config now: on any error nothing is defined.

        >>> import tempfile, os
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> qm.define_queue("ALERTS", expiry_ms=30_000, ordering="fifo")
        >>> qm.queue_attributes("ALERTS").ordering
        'fifo'
        >>> qm.close()
        """
        self._define(
            name,
            {
                "expiry_ms": expiry_ms,
                "cap_expiry_ms": cap_expiry_ms,
                "max_depth": max_depth,
                "max_message_bytes": max_message_bytes,
                "default_priority": default_priority,
                "ordering": ordering,
                "depth_threshold": depth_threshold,
            },
            rules,
            {"encryption": self._cipher(encryption)},
        )

    def alter_queue(self, name: str, **attributes: Any) -> QueueAttributes:
        """Change some of a queue's attributes (same keywords as :meth:`define_queue`).

        A new ``expiry_ms`` applies at once to messages already on the queue that
        have no expiry of their own; a new ``cap_expiry_ms`` only to new puts; a new
        ``ordering`` re-orders the messages there; ``rules=[...]`` replaces the
        persisted rule bindings. Returns the new attributes.

        >>> import tempfile, os
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> qm.define_queue("Q")
        >>> qm.alter_queue("Q", max_depth=1000).max_depth
        1000
        >>> qm.close()
        """
        check_name(name, "queue name")
        if not attributes:
            raise InvalidArgument("alter_queue needs at least one attribute to change, e.g. expiry_ms=60000")
        specs = check_specs(attributes.pop("rules")) if "rules" in attributes else None
        check_attributes(attributes)
        built = build_bindings(self, name, specs) if specs is not None else []
        with self._write() as tx:
            queue = self._queue(tx, name)
            if attributes:
                tx.update_queue(queue.id, attributes)
            if "expiry_ms" in attributes and attributes["expiry_ms"] != queue.expiry_ms:
                tx.retime(queue.id, attributes["expiry_ms"])
            if "ordering" in attributes and attributes["ordering"] != queue.ordering:
                tx.rerank(queue.id, attributes["ordering"] == "priority")
            bound = self._bind(tx, queue, specs, built) if specs is not None else None
            result = QueueAttributes.from_row(self._queue(tx, name))
        if bound is not None:
            self._rules.set_persisted(name, bound)
        return result

    def queue_attributes(self, name: str) -> QueueAttributes:
        """The definition of a queue.

        >>> import tempfile, os
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> qm.define_queue("Q", max_depth=10); qm.queue_attributes("Q").max_depth
        10
        >>> qm.close()
        """
        check_name(name, "queue name")
        with self._db.read() as conn:
            return QueueAttributes.from_row(self._queue(Tx(conn), name))

    def queue_names(self) -> list[str]:
        """The names of the queues defined here, sorted.

        >>> import tempfile, os
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> qm.define_queue("B"); qm.define_queue("A"); qm.queue_names()
        ['A', 'B']
        >>> qm.close()
        """
        with self._db.read() as conn:
            return [q.name for q in Tx(conn).queues()]

    def delete_queue(self, name: str) -> None:
        """Delete an empty queue. Expired messages are purged first (MQe's "deleted"
        check point); any other message left raises :class:`QueueNotEmpty`."""
        self._touch(name)
        self._discard_expired(name, "delete")
        with self._write() as tx:
            queue = self._queue(tx, name)
            if queue.depth:
                raise QueueNotEmpty(
                    f"queue {name!r} still holds {queue.depth} unexpired message(s): get them, "
                    "or purge() the queue, before deleting it"
                )
            tx.delete_queue(queue.id)
        with self._active_lock:
            self._active.discard(name)
        if self._rules.wants(name):
            self._rules.dispatch([Pending("queue_deleted", name, self._clock())])
        self._rules.drop(name)

    def depth(self, name: str) -> int:
        """How many messages the queue holds, locked ones included; expired ones are
        purged first (MQe's "size inquired" check point), so none is ever counted.

        One indexed probe plus one row read: constant time at any depth.
        """
        self._touch(name)
        self._discard_expired(name, "depth")
        with self._db.read() as conn:
            return self._queue(Tx(conn), name).depth

    def purge(self, name: str) -> int:
        """Remove every message from a queue (rules see reason ``purged``); return how many."""
        self._touch(name)
        if not self._observed(name, "removed"):
            with self._write() as tx:
                return tx.delete_all(self._queue(tx, name).id)
        return self._remove_in_batches(name, lambda tx, q, now: tx.ids(q.id, _DISCARD_BATCH), "removed", reason="purged")

    def sweep_expired(self, name: str | None = None) -> int:
        """Discard expired messages now (IBM MQ's expiry scan); return how many.

        With no name, sweeps every queue. Rules see ``where="sweep"`` (or
        ``"activate"`` for a queue's first use since the queue manager opened).

        >>> import tempfile, os
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> qm.define_queue("Q"); qm.sweep_expired("Q")
        0
        >>> qm.close()
        """
        names = [name] if name is not None else self.queue_names()
        total = 0
        for queue in names:
            # On a queue's first reference, activation discards first (MQe's
            # check point, where="activate"); those count as swept too.
            total += self._touch(queue) + self._discard_expired(queue, "sweep")
        return total

    def start_expiry_sweeper(self, interval_s: float) -> None:
        """Sweep every queue every ``interval_s`` seconds in a background thread (APScheduler).

        Stopped by :meth:`stop_expiry_sweeper` or :meth:`close`.
        """
        if isinstance(interval_s, bool) or not isinstance(interval_s, (int, float)) or interval_s <= 0:
            raise InvalidArgument(f"interval_s must be a positive number of seconds, not {interval_s!r}")
        if self._scheduler is not None:
            raise InvalidArgument("the expiry sweeper is already running: stop_expiry_sweeper() first")
        from apscheduler.schedulers.background import BackgroundScheduler

        scheduler = BackgroundScheduler(daemon=True)
        scheduler.add_job(
            self._sweep_job, "interval", seconds=interval_s, max_instances=1, coalesce=True, id="edgeq-sweep"
        )
        scheduler.start()
        self._scheduler = scheduler

    def _sweep_job(self) -> None:
        try:
            self.sweep_expired()
            self._rules.retry()  # also retries rule deliveries that are due on an idle queue
        except Exception:
            log.exception("periodic expiry sweep of %s failed", self.path)

    def put(self, queue: str, message: Message, *, confirm_id: int | None = None) -> MessageUID:
        """Put a message; return its uid.

        With ``confirm_id`` the message is stored locked and invisible until
        :meth:`confirm_put` (MQe's assured put). A message that is already expired
        is discarded at once (rules see ``where="add"``) and never stored; its uid
        is still returned.

        >>> import tempfile, os
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> qm.define_queue("Q")
        >>> uid = qm.put("Q", Message(b"x"), confirm_id=17)
        >>> qm.get("Q") is None
        True
        >>> qm.confirm_put("Q", uid); qm.get("Q").uid == uid
        True
        >>> qm.close()
        """
        return self.put_many(queue, [message], confirm_id=confirm_id)[0]

    def put_many(
        self, queue: str, messages: Sequence[Message], *, confirm_id: int | None = None
    ) -> list[MessageUID]:
        """Put several messages in one transaction: all are stored, or none.

        Raises :class:`DuplicateMessage`, :class:`QueueFull` or
        :class:`MessageTooLarge` for the first message that cannot be stored (and
        stores none). See :meth:`put_each` for per-message outcomes instead.
        """
        results, q = self._put(queue, messages, confirm_id, strict=True)
        uids = [r.uid for r in results]
        if q is not None and q.kind == "remote" and q.mode == "sync":
            self._transmit_now(queue, [r.uid for r in results if r.status == "stored"])
        return uids

    def put_each(
        self, queue: str, messages: Sequence[Message], *, confirm_id: int | None = None
    ) -> list[PutResult]:
        """Put a batch in one transaction, with an outcome per message instead of an error.

        Each :class:`~edgeq.results.PutResult` says ``stored``, ``replaced`` (a
        resend over an unconfirmed copy), ``unconfirmed`` (an unconfirmed copy is
        held and this is not a resend: confirm it, or resend), ``duplicate``
        (already confirmed: held, consumed, or remembered within
        ``remember_confirmed_ms``), ``expired``
        (discarded on arrival) or ``refused`` (too large, queue full). This is
        what a receiver of batches (the home server) needs.

        >>> import tempfile, os
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="HOME")
        >>> qm.define_queue("Q")
        >>> m = Message(b"x", uid=MessageUID("DEV1", 5))
        >>> [r.status for r in qm.put_each("Q", [m, m.replace(resend=True)], confirm_id=1)]
        ['stored', 'refused']
        >>> qm.close()
        """
        results, q = self._put(queue, messages, confirm_id, strict=False)
        if q is not None and q.kind == "remote" and q.mode == "sync":
            self._transmit_now(queue, [r.uid for r in results if r.status == "stored"])
        return results

    def _put(
        self, queue: str, messages: Sequence[Message], confirm_id: int | None, *, strict: bool
    ) -> tuple[list[PutResult], QueueRow | None]:
        if isinstance(messages, (Message, bytes, str)) or not isinstance(messages, Sequence):
            raise InvalidType("put takes a sequence of Message objects")
        for message in messages:
            if not isinstance(message, Message):
                raise InvalidType(
                    f"put takes an edgeq.Message, not {type(message).__name__}: wrap data as Message(b'...')"
                )
        if confirm_id is not None:
            confirm_id = _check_confirm_id(confirm_id)
        if not messages:
            return [], None
        self._touch(queue)
        now = self._clock()
        events: list[Pending] = []
        try:
            results, q = self._put_rows(queue, messages, confirm_id, now, events, strict=strict)
        except DuplicateMessage as exc:
            refused = next((m for m in messages if m.uid == exc.uid), None)
            if refused is not None and self._rules.wants(queue):
                self._rules.dispatch([Pending("duplicate", queue, now, message=refused)])
            raise
        duplicates = [m for m, r in zip(messages, results, strict=True) if r.status in ("duplicate", "unconfirmed")]
        if duplicates and self._rules.wants(queue):
            events += [Pending("duplicate", queue, now, message=m) for m in duplicates]
        self._rules.dispatch(events)
        return results, q

    def _put_rows(
        self, queue: str, messages: Sequence[Message], confirm_id: int | None, now: int,
        events: list[Pending], *, strict: bool,
    ) -> tuple[list[PutResult], QueueRow]:
        """The put transaction: one outcome per message; with ``strict`` the first
        message that cannot be stored raises and rolls the whole batch back.
        Fills ``events`` with what the rules are owed."""
        with self._write() as tx:
            q = self._queue(tx, queue)
            first = tx.stamps(now, len(messages))
            depth = q.depth
            cap_at = None if q.cap_expiry_ms is None else now + q.cap_expiry_ms
            rows: list[NewMessage] = []
            results: list[PutResult] = []
            seen: set[MessageUID] = set()
            # No copy of a row unless a rule or the journal wants its event.
            observed_expired, observed_added = self._observed(queue, "expired"), self._observed(queue, "added")
            for offset, message in enumerate(messages):
                seq = first + offset
                uid = message.uid or MessageUID._trusted(self._origin, seq)
                created = message.created_ms if message.uid is not None and message.created_ms else now
                priority = q.default_priority if message.priority is None else message.priority
                fields = encode_fields(message.fields)
                own = own_deadline(message.expiry, created)
                deadline = effective_deadline(own, now, q.expiry_ms, cap_at)
                row = NewMessage(
                    uid.origin, uid.stamp, MessageState.READY if confirm_id is None else MessageState.PUT_LOCKED, confirm_id,
                    priority if q.ordering == "priority" else 0, seq, priority, created, now,
                    EXPIRY_KINDS[type(message.expiry)], None if message.expiry is None else int(message.expiry),
                    cap_at, deadline, message.correlation_id, message.reply_to,
                    None if message.expiry_report == "none" else message.expiry_report, fields, message.data,
                )
                error, existing = self._refusal(tx, q, uid, message, row, depth, seen)
                if isinstance(error, PutResult):
                    results.append(error)  # a duplicate of something already confirmed
                    if strict and error.error is not None:
                        raise error.error
                    continue
                if error is not None:
                    if strict:
                        raise error
                    results.append(PutResult(uid, "refused", str(error), error))
                    continue
                if message.uid is not None:  # only a caller's uids can repeat within a batch
                    seen.add(uid)
                if deadline is not None and deadline <= now:
                    # MQe's "added" check point: never stored, rules still told.
                    if observed_expired:
                        events.extend(self._events(queue, "expired", [self._as_row(row)], now, where="add"))
                    results.append(PutResult(uid, "expired"))
                    continue
                if existing is not None:  # _refusal let it through: a resend over an unconfirmed copy
                    tx.delete(q.id, [existing.id])
                    depth -= 1
                depth += 1
                rows.append(self._seal(q, row))
                results.append(PutResult(uid, "replaced" if existing is not None else "stored"))
                if observed_added:
                    events.extend(self._events(queue, "added", [self._as_row(row)], now))
            tx.insert(q.id, rows)
            threshold = q.depth_threshold
            if threshold is not None and q.depth < threshold <= depth and self._rules.wants(queue):
                events.append(Pending("threshold", queue, now, depth=depth))
            self._record(tx, events)
        return results, q

    def _refusal(
        self, tx: Tx, q: QueueRow, uid: MessageUID, message: Message, row: NewMessage, depth: int,
        seen: set[MessageUID],
    ) -> tuple[EdgeqError | PutResult | None, MessageRow | None]:
        """Why this message cannot be stored (an error, or a duplicate outcome), or None;
        and the copy of it already held, if any (a resend replaces it)."""
        size = len(row.data) + len(row.fields or b"")
        if q.max_message_bytes is not None and size > q.max_message_bytes:
            return MessageTooLarge(
                f"message is {size} bytes (data plus fields) but queue {q.name!r} takes at most "
                f"{q.max_message_bytes} (max_message_bytes): split it, or raise the limit with alter_queue"
            ), None
        existing = None
        if message.uid is not None:  # a uid made just now is new by construction: no lookups
            if uid in seen:
                return DuplicateMessage(f"message {uid} appears twice in one batch: put it once", uid), None
            existing = tx.find(q.id, uid.origin, uid.stamp)
            if existing is not None and not (message.resend and existing.state == MessageState.PUT_LOCKED):
                error = self._duplicate(q.name, uid, existing, message.resend)
                if existing.state == MessageState.PUT_LOCKED:  # held but not confirmed: confirm it, or resend
                    return PutResult(uid, "unconfirmed", "held, awaiting its confirm", error), None
                return PutResult(uid, "duplicate", "already held", error), None
            if existing is None and tx.remembered(q.id, uid.origin, uid.stamp):
                error = DuplicateMessage(
                    f"queue {q.name!r} already received and confirmed message {uid}: this is a duplicate; "
                    "drop it",
                    uid,
                )
                return PutResult(uid, "duplicate", "already confirmed", error), None
        if existing is None and q.max_depth is not None and depth >= q.max_depth:
            return QueueFull(
                f"queue {q.name!r} is full ({q.max_depth} messages, its max_depth): get some "
                "messages, or raise max_depth with alter_queue"
            ), None
        return None, existing

    @staticmethod
    def _as_row(row: NewMessage) -> MessageRow:
        return MessageRow(
            0, row.origin, row.stamp, row.state, row.confirm_id, row.priority, row.created_ms,
            row.arrived_ms, row.expiry_kind, row.expiry_value, row.cap_at, row.deadline, 0,
            row.correlation_id, row.reply_to, row.report, row.fields, row.data,
        )

    def _duplicate(self, queue: str, uid: MessageUID, existing: MessageRow, resend: bool) -> DuplicateMessage:
        if existing.state == MessageState.PUT_LOCKED:
            return DuplicateMessage(
                f"queue {queue!r} already holds an unconfirmed copy of {uid}: confirm_put it, "
                "or put again with resend=True to replace it",
                uid,
            )
        what = "resend of" if resend else "second put of"
        return DuplicateMessage(
            f"queue {queue!r} already holds confirmed message {uid}: this {what} it is a duplicate; "
            "drop it (a resend only replaces an unconfirmed copy)",
            uid,
        )

    def get(
        self, queue: str, *, confirm_id: int | None = None, filter: Filter | None = None
    ) -> Message | None:
        """Take the next message (priority, then arrival); None when none is available.

        Expired messages ahead of it are discarded (rules see ``where="get"``) and
        never returned. With ``confirm_id`` the message is only locked, until
        :meth:`confirm_get` deletes it or :meth:`undo` restores it. ``filter``
        takes only a message whose fields equal every given value.

        >>> import tempfile, os
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> qm.define_queue("Q")
        >>> _ = qm.put("Q", Message(b"low", priority=1)); _ = qm.put("Q", Message(b"high", priority=8))
        >>> qm.get("Q").data
        b'high'
        >>> qm.close()
        """
        got = self.get_many(queue, 1, confirm_id=confirm_id, filter=filter)
        return got[0] if got else None

    def get_many(
        self, queue: str, count: int, *, confirm_id: int | None = None, filter: Filter | None = None
    ) -> list[Message]:
        """Take up to ``count`` messages in one transaction (see :meth:`get`)."""
        count = _check_count(count)
        if confirm_id is not None:
            confirm_id = _check_confirm_id(confirm_id)
        wanted = check_fields(filter) if filter is not None else None
        return self._take(queue, count, wanted=wanted, remove=True, confirm_id=confirm_id)

    def browse(self, queue: str, *, filter: Filter | None = None, limit: int | None = None) -> list[Message]:
        """The visible messages in get order, without removing them.

        Never returns expired or locked messages; expired ones that match are
        discarded (rules see ``where="browse"``).

        >>> import tempfile, os
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> qm.define_queue("Q")
        >>> _ = qm.put("Q", Message(b"a", fields={"k": "v"})); _ = qm.put("Q", Message(b"b"))
        >>> [m.data for m in qm.browse("Q", filter={"k": "v"})]
        [b'a']
        >>> qm.close()
        """
        if limit is not None:
            limit = _check_count(limit)
        wanted = check_fields(filter) if filter is not None else None
        self._touch(queue)
        now = self._clock()
        events: list[Pending] = []
        with self._write() as tx:
            q = self._readable(tx, queue)
            if tx.has_expired(q.id, now):
                ids = tx.expired_ids(q.id, now, q.depth, ready_only=True)
                if wanted is not None:
                    ids = [row.id for row in tx.rows(ids) if _matches(self._unseal_for_rules(queue, row), wanted)]
                events = self._events(queue, "expired", tx.delete(q.id, ids), now, where="browse")
                self._record(tx, events)
        self._rules.dispatch(events)
        out: list[Message] = []
        corrupt: tuple[MessageRow, IntegrityError] | None = None
        with self._db.read() as conn:
            tx = Tx(conn)
            q = self._queue(tx, queue)
            for rows in tx.ready(q.id, _PAGE):
                for row in rows:
                    if _expired(row, now):
                        continue
                    try:
                        opened = self._unseal(queue, row)
                    except IntegrityError as exc:
                        corrupt = (row, exc)
                        break
                    if wanted is not None and not _matches(opened, wanted):
                        continue
                    out.append(to_message(opened, now))
                    if limit is not None and len(out) >= limit:
                        return out
                if corrupt is not None:
                    break
        if corrupt is not None:
            with self._write() as wtx:
                wq = self._queue(wtx, queue)
                held = wtx.find(wq.id, corrupt[0].origin, corrupt[0].stamp)
                events = self._quarantine(wtx, wq, held, now) if held is not None and held == corrupt[0] else []
                self._record(wtx, events)
            self._rules.dispatch(events)
            raise corrupt[1]
        return out

    def _delete_row(self, tx: Tx, q: QueueRow, row: MessageRow, now: int, where: Where,
                    reason: RemovalReason) -> list[Pending]:
        """Delete one message: an expired one counts as discarded at ``where``."""
        removed = tx.delete(q.id, [row.id])
        if _expired(row, now):
            events = self._events(q.name, "expired", removed, now, where=where)
        else:
            events = self._events(q.name, "removed", removed, now, reason=reason)
        self._record(tx, events)
        return events

    def confirm_put(self, queue: str, uid: MessageUID | str) -> None:
        """Make an assured put visible, ordered by confirm time. Confirming twice is harmless.

        Raises :class:`MessageExpired` (and discards it) if it expired while locked,
        :class:`MessageNotFound` if the queue does not hold it.
        """
        (result,) = self.confirm_put_each(queue, [uid])
        if result.status == "unknown":
            raise MessageNotFound(
                f"queue {queue!r} holds no message {result.uid}: it was never put, was undone, or expired "
                "and was discarded; put it again (with resend=True)"
            )
        if result.status == "expired":
            raise MessageExpired(
                f"message {result.uid} expired before its put was confirmed; it has been discarded"
            )

    def confirm_put_each(
        self, queue: str, uids: Sequence[MessageUID | str], *, device: str | None = None,
        clock_offset_ms: int | None = None,
    ) -> list[ConfirmResult]:
        """Confirm a batch of assured puts in one transaction, with an outcome per uid:
        ``confirmed``, ``already`` (confirmed before: harmless), ``unknown`` (not held:
        put it again) or ``expired`` (it expired while locked and was discarded).
        ``device`` and ``clock_offset_ms`` (the sender's clock minus ours) go
        into the journal's ``accepted`` entries.

        >>> import tempfile, os
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="HOME")
        >>> qm.define_queue("Q"); uid = qm.put("Q", Message(b"x"), confirm_id=1)
        >>> [r.status for r in qm.confirm_put_each("Q", [uid, uid, "DEV9.1"])]
        ['confirmed', 'already', 'unknown']
        >>> qm.close()
        """
        if isinstance(uids, (str, MessageUID)) or not isinstance(uids, Sequence):
            raise InvalidType("confirm_put_each takes a sequence of uids")
        checked = [_check_uid(uid) for uid in uids]
        self._touch(queue)
        now = self._clock()
        results: list[ConfirmResult] = []
        keys = [(uid.origin, uid.stamp) for uid in checked]
        with self._write() as tx:
            q = self._queue(tx, queue)
            held = tx.find_many(q.id, keys)  # set-based: a few queries per batch, not per uid
            remembered = tx.remembered_many(q.id, [k for k in keys if k not in held])
            events: list[Pending] = []
            ready: list[MessageRow] = []
            ready_ids: set[int] = set()
            expired: list[int] = []
            for uid, key in zip(checked, keys, strict=True):
                row = held.get(key)
                if row is None:
                    results.append(ConfirmResult(uid, "already" if key in remembered else "unknown"))
                elif row.state != MessageState.PUT_LOCKED or row.id in ready_ids:
                    results.append(ConfirmResult(uid, "already"))  # MQe ignores a second confirm
                elif _expired(row, now):
                    if row.id not in expired:
                        expired.append(row.id)
                    results.append(ConfirmResult(uid, "expired"))
                else:
                    ready.append(row)
                    ready_ids.add(row.id)
                    results.append(ConfirmResult(uid, "confirmed"))
            events = self._events(queue, "expired", tx.delete(q.id, expired), now, where="add")
            if ready:
                tx.make_ready([row.id for row in ready], tx.stamps(now, len(ready)))
            if self._remember_ms is not None:
                tx.remember(q.id, [(row.origin, row.stamp) for row in ready], now)
                tx.forget_before(now - self._remember_ms)
            if self._journal == "server":
                JournalTx(tx.conn).add(
                    entry_row(
                        "accepted", "server", now, queue, f"{row.origin}.{row.stamp}", row.origin,
                        size=_plain_size(row), created_ms=row.created_ms, arrived_ms=row.arrived_ms,
                        confirmed_ms=now, clock_offset_ms=clock_offset_ms, device=device or row.origin,
                    )
                    for row in ready
                )
            self._record(tx, events)
        self._rules.dispatch(events)
        return results

    def confirm_get(self, queue: str, uid: MessageUID | str) -> None:
        """Complete an assured get: delete the locked message.

        Raises :class:`MessageExpired` (and discards it) if it expired while locked,
        :class:`MessageNotFound` if no message ``uid`` is locked by a get.
        """
        uid = _check_uid(uid)
        self._touch(queue)
        now = self._clock()
        with self._write() as tx:
            q = self._queue(tx, queue)
            row = tx.find(q.id, uid.origin, uid.stamp)
            if row is None or row.state != MessageState.GET_LOCKED:
                state = "is not locked by an assured get" if row is not None else "is not on the queue"
                raise MessageNotFound(
                    f"message {uid} {state} {queue!r}: confirm_get only completes a get(confirm_id=...) "
                    "not yet confirmed or undone"
                )
            events = self._delete_row(tx, q, row, now, "get", "confirmed")
        self._rules.dispatch(events)
        if _expired(row, now):
            raise MessageExpired(f"message {uid} expired while locked by an assured get; it has been discarded")

    def confirm_get_each(self, queue: str, uids: Sequence[MessageUID | str]) -> list[ConfirmResult]:
        """Complete a batch of assured gets in one transaction, with an outcome per uid:
        ``confirmed`` (deleted), ``expired`` (it expired while locked: discarded,
        rules see ``where="get"``) or ``unknown`` (not locked by a get here).

        >>> import tempfile, os
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="HOME")
        >>> qm.define_queue("Q"); _ = qm.put("Q", Message(b"x"))
        >>> m = qm.get("Q", confirm_id=3)
        >>> [r.status for r in qm.confirm_get_each("Q", [m.uid, m.uid])]
        ['confirmed', 'unknown']
        >>> qm.close()
        """
        if isinstance(uids, (str, MessageUID)) or not isinstance(uids, Sequence):
            raise InvalidType("confirm_get_each takes a sequence of uids")
        checked = [_check_uid(uid) for uid in uids]
        self._touch(queue)
        now = self._clock()
        results: list[ConfirmResult] = []
        with self._write() as tx:
            q = self._readable(tx, queue)
            held = tx.find_many(q.id, [(uid.origin, uid.stamp) for uid in checked])
            taken: dict[int, MessageRow] = {}
            for uid in checked:
                row = held.get((uid.origin, uid.stamp))
                if row is None or row.state != MessageState.GET_LOCKED or row.id in taken:
                    results.append(ConfirmResult(uid, "unknown"))
                else:
                    taken[row.id] = row
                    results.append(ConfirmResult(uid, "expired" if _expired(row, now) else "confirmed"))
            removed = tx.delete(q.id, list(taken))
            events = self._events(queue, "expired", [r for r in removed if _expired(r, now)], now, where="get")
            events += self._events(
                queue, "removed", [r for r in removed if not _expired(r, now)], now, reason="confirmed"
            )
            self._record(tx, events)
        self._rules.dispatch(events)
        return results

    def undo(self, queue: str, confirm_id: int) -> int:
        """Undo whatever ``confirm_id`` locked: an assured get's messages become visible
        again (``backout_count`` + 1); an assured put's locked copies are removed.
        Returns how many messages it undid."""
        confirm_id = _check_confirm_id(confirm_id)
        self._touch(queue)
        now = self._clock()
        with self._write() as tx:
            q = self._queue(tx, queue)
            rows = tx.find_by_confirm_id(q.id, confirm_id)
            if not rows:
                raise ConfirmIdNotFound(
                    f"nothing on queue {queue!r} is locked under confirm id {confirm_id}: it was already "
                    "confirmed, undone, or expired"
                )
            tx.back_out([r.id for r in rows if r.state == MessageState.GET_LOCKED])
            removed = tx.delete(q.id, [r.id for r in rows if r.state == MessageState.PUT_LOCKED])
            events = self._events(queue, "removed", removed, now, reason="deleted")
            self._record(tx, events)
        self._rules.dispatch(events)
        return len(rows)

    def delete_message(self, queue: str, uid: MessageUID | str) -> None:
        """Delete one message by uid, whatever its state (rules see reason ``deleted``;
        an expired one is discarded as expired, ``where="get"``)."""
        uid = _check_uid(uid)
        self._touch(queue)
        now = self._clock()
        with self._write() as tx:
            q = self._queue(tx, queue)
            row = tx.find(q.id, uid.origin, uid.stamp)
            if row is None:
                raise MessageNotFound(f"queue {queue!r} holds no message {uid}")
            events = self._delete_row(tx, q, row, now, "get", "deleted")
        self._rules.dispatch(events)

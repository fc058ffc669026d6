"""The queue manager: a facade over the parts that do the work (reference: docs/api.md)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Self

from edgeq.consume.consumers import Consumer, Listener
from edgeq.crypto import StoreKeys
from edgeq.errors import InvalidType
from edgeq.events.bindings import BindingInfo, RuleSpec
from edgeq.events.dispatch import Pending
from edgeq.exchange.transmit import SyncOverview
from edgeq.message import Message
from edgeq.parts import build_parts, start_rules
from edgeq.queues.attributes import QueueAttributes, QueueUsage, StoreUsage
from edgeq.queues.deadletter import Resent
from edgeq.results import ConfirmResult, PutResult, QuarantineEntry
from edgeq.store.devices import DeviceRecord
from edgeq.store.journal import JournalEntry, JournalSide
from edgeq.store.rules import FailureRow
from edgeq.types import (
    DEFAULT_MAX_REDELIVERY_DELAY_MS,
    DEFAULT_REDELIVERY_DELAY_MS,
    Clock,
    Durability,
    Filter,
    OnFull,
    Ordering,
)
from edgeq.uid import MessageUID

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    from edgeq.admin.executor import AdminExecutor
    from edgeq.admin.store import AdminKey
    from edgeq.admin.wire import AdminReply
    from edgeq.check.report import CheckReport
    from edgeq.rules import QueueRule

__all__ = ["QueueManager"]


class QueueManager:
    """Named queues, durable in one SQLite file; thread-safe. Sync-only verbs: ``qm.exchange``."""

    def __init__(
        self, path: str | Path, name: str | None = None, *, durability: Durability = "full",
        timeout: float = 30.0, clock: Clock | None = None, rule_retry_limit: int = 5,
        rule_retry_base_ms: int = 1_000, remember_confirmed_ms: int | None = 86_400_000,
        journal: JournalSide | Literal["off"] | None = None, keys: StoreKeys | str | Path | None = None,
        default_encryption: str | None = None, max_store_bytes: int | None = None,
    ) -> None:
        p = build_parts(
            self, path, name, durability=durability, timeout=timeout, clock=clock,
            rule_retry_limit=rule_retry_limit, rule_retry_base_ms=rule_retry_base_ms,
            remember_confirmed_ms=remember_confirmed_ms, journal=journal, keys=keys,
            default_encryption=default_encryption, max_store_bytes=max_store_bytes,
        )
        self.path, self.name, self._clock, self._max_store_bytes = p.path, p.name, p.clock, p.max_store_bytes
        self._db, self._waker, self._unwatch = p.db, p.waker, p.unwatch
        self._sealer, self._sink, self._expiry, self._gets = p.sealer, p.sink, p.expiry, p.gets
        self._transmitter, self._puts, self._catalog = p.transmitter, p.puts, p.catalog
        self._rulebook, self._devices = p.rulebook, p.devices
        self._consumers, self._dead_letters = p.consumers, p.transmitter.dead_letters
        self._admin_executor: AdminExecutor | None = None  # built at the first admin verb
        #: The verbs only the sync agent and the home server call (edgeq.exchange).
        self.exchange = p.exchange
        start_rules(p, self)

    # -- the store ---------------------------------------------------------------------------
    @property
    def origin(self) -> str:
        """The origin of the uids this store issues: its name and incarnation."""
        return self._puts.origin

    @property
    def max_store_bytes(self) -> int | None:
        """The flash budget of the whole store this object enforces (None: none)."""
        return self._max_store_bytes

    @property
    def journal_mode(self) -> JournalSide | None:
        """``"server"``, ``"device"`` or None: what this store journals."""
        return self._sink.journal

    def now_ms(self) -> int:
        """The time by this queue manager's clock (epoch ms): what expiry is judged by."""
        return self._clock()

    def close(self) -> None:
        """Tell rules, stop the sweeper, end waits and listeners, close the store; safe twice."""
        self._waker.close()
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None
        self._expiry.stop_sweeper()
        if self._db.closed:
            return
        now = self._clock()
        rules = self._sink.rules
        self._sink.dispatch([Pending("closed", q, now) for q in self._expiry.active() if rules.wants(q)])
        with self._sink.write():
            pass  # forgets the events delivered since the last write
        self._db.close()

    @contextmanager
    def tracer(self, callback: Callable[[str], None]) -> Iterator[None]:
        """Pass every SQL statement run, in any thread, to ``callback`` while the block runs."""
        if not callable(callback):
            raise InvalidType("tracer takes a callable, called with each SQL statement")
        self._db.set_tracer(callback)
        try:
            yield
        finally:
            self._db.set_tracer(None)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"QueueManager({str(self.path)!r}, name={self.name!r})"

    # -- messages ----------------------------------------------------------------------------
    def put(self, queue: str, message: Message, *, confirm_id: int | None = None) -> MessageUID:
        """Put a message; return its uid. With ``confirm_id``: invisible until :meth:`confirm_put`."""
        return self._puts.put_many(queue, [message], confirm_id=confirm_id)[0]

    def put_many(
        self, queue: str, messages: Sequence[Message], *, confirm_id: int | None = None
    ) -> list[MessageUID]:
        """Put several messages in one transaction: all are stored, or none (the first error raises)."""
        return self._puts.put_many(queue, messages, confirm_id=confirm_id)

    def put_each(
        self, queue: str, messages: Sequence[Message], *, confirm_id: int | None = None
    ) -> list[PutResult]:
        """Put a batch in one transaction, with an outcome per message instead of an error."""
        return self._puts.put_each(queue, messages, confirm_id=confirm_id)

    def confirm_put(self, queue: str, uid: MessageUID | str) -> None:
        """Make an assured put visible; confirming twice is harmless."""
        self._puts.confirm_put(queue, uid)

    def confirm_put_each(
        self, queue: str, uids: Sequence[MessageUID | str], *, device: str | None = None,
        clock_offset_ms: int | None = None,
    ) -> list[ConfirmResult]:
        """Confirm a batch of assured puts in one transaction, with an outcome per uid."""
        return self._puts.confirm_put_each(queue, uids, device=device, clock_offset_ms=clock_offset_ms)

    def get(
        self, queue: str, *, confirm_id: int | None = None, filter: Filter | None = None,
        wait: float | timedelta | None = None,
    ) -> Message | None:
        """Take the next message (priority, then arrival), waiting up to ``wait``; None if none."""
        got = self.get_many(queue, 1, confirm_id=confirm_id, filter=filter, wait=wait)
        return got[0] if got else None

    def get_many(
        self, queue: str, count: int, *, confirm_id: int | None = None, filter: Filter | None = None,
        wait: float | timedelta | None = None,
    ) -> list[Message]:
        return self._waker.until(
            lambda: self._gets.get_many(queue, count, confirm_id=confirm_id, filter=filter), wait,
            due=lambda: self._gets.due_in(queue),
        )

    def browse(self, queue: str, *, filter: Filter | None = None, limit: int | None = None) -> list[Message]:
        """The visible messages in get order, without removing them."""
        return self._gets.browse(queue, filter=filter, limit=limit)

    def confirm_get(self, queue: str, uid: MessageUID | str) -> None:
        """Complete an assured get: delete the locked message."""
        self._gets.confirm_get(queue, uid)

    def confirm_get_each(self, queue: str, uids: Sequence[MessageUID | str]) -> list[ConfirmResult]:
        return self._gets.confirm_get_each(queue, uids)

    def undo(
        self, queue: str, confirm_id: int, *, count_backout: bool = True,
        uids: Sequence[MessageUID | str] | None = None,
    ) -> int:
        """Undo what ``confirm_id`` locked (gets back after a redelivery delay); return how many."""
        return self._gets.undo(queue, confirm_id, count_backout=count_backout, uids=uids)

    def delete_message(self, queue: str, uid: MessageUID | str) -> None:
        """Delete one message by uid, whatever its state."""
        self._gets.delete_message(queue, uid)

    def release_locks(self, queue: str) -> int:
        """Undo every assured-get lock on a queue at once (its getter is gone); return how many."""
        return self._gets.release_locks(queue)

    # -- queues ------------------------------------------------------------------------------
    def define_queue(
        self, name: str, *, expiry_ms: int | None = None, cap_expiry_ms: int | None = None,
        max_depth: int | None = None, max_message_bytes: int | None = None, default_priority: int = 4,
        ordering: Ordering = "priority", depth_threshold: int | None = None,
        rules: Sequence[RuleSpec] | None = None, encryption: str | None = None, max_bytes: int | None = None,
        on_full: OnFull = "reject", backout_threshold: int | None = None, backout_queue: str | None = None,
        redelivery_delay_ms: int = DEFAULT_REDELIVERY_DELAY_MS,
        max_redelivery_delay_ms: int = DEFAULT_MAX_REDELIVERY_DELAY_MS, exist_ok: bool = False,
    ) -> None:
        """Define a local queue; :class:`QueueExists` unless ``exist_ok`` and defined exactly so."""
        self._catalog.define_queue(
            name, rules, encryption, exist_ok, expiry_ms=expiry_ms, cap_expiry_ms=cap_expiry_ms,
            max_depth=max_depth, max_message_bytes=max_message_bytes, default_priority=default_priority,
            ordering=ordering, depth_threshold=depth_threshold, max_bytes=max_bytes, on_full=on_full,
            backout_threshold=backout_threshold, backout_queue=backout_queue,
            redelivery_delay_ms=redelivery_delay_ms, max_redelivery_delay_ms=max_redelivery_delay_ms,
        )

    def define_remote_queue(
        self, name: str, *, target_qmgr: str, target_queue: str | None = None,
        mode: Literal["async", "sync"] = "async", expiry_ms: int | None = None,
        cap_expiry_ms: int | None = None, max_depth: int | None = None, max_message_bytes: int | None = None,
        default_priority: int = 4, rules: Sequence[RuleSpec] | None = None, encryption: str | None = None,
        depth_threshold: int | None = None, max_bytes: int | None = None, on_full: OnFull = "reject",
        refusal_limit: int | None = None, compression: str | None = None, exist_ok: bool = False,
    ) -> None:
        """Define a queue whose puts wait here until the sync agent transmits them to ``target_qmgr``."""
        self._catalog.define_remote_queue(
            name, target_qmgr=target_qmgr, target_queue=target_queue, mode=mode, expiry_ms=expiry_ms,
            cap_expiry_ms=cap_expiry_ms, max_depth=max_depth, max_message_bytes=max_message_bytes,
            default_priority=default_priority, rules=rules, encryption=encryption,
            depth_threshold=depth_threshold, max_bytes=max_bytes, on_full=on_full,
            refusal_limit=refusal_limit, compression=compression, exist_ok=exist_ok,
        )

    def define_home_server_queue(
        self, name: str, *, server: str, exist_ok: bool = False, **attributes: Any
    ) -> None:
        """Define a local queue the sync agent fills from home server ``server``."""
        self._catalog.define_home_server_queue(name, server=server, exist_ok=exist_ok, **attributes)

    def alter_queue(self, name: str, **attributes: Any) -> QueueAttributes:
        """Change some of a queue's attributes (the keywords of its define); return the new ones."""
        return self._catalog.alter_queue(name, **attributes)

    def queue_attributes(self, name: str) -> QueueAttributes:
        return self._catalog.queue_attributes(name)

    def queue_usage(self, name: str) -> QueueUsage:
        """What a queue holds against its budget (expired messages discarded first)."""
        return self._catalog.queue_usage(name)

    def store_usage(self) -> StoreUsage:
        """What the whole store holds, read as stored (nothing discarded): cheap to poll."""
        return self._catalog.store_usage()

    def queue_names(self) -> list[str]:
        return self._catalog.queue_names()

    def remote_queues(self) -> list[QueueAttributes]:
        return self._catalog.queues_of_kind("remote")

    def home_server_queues(self) -> list[QueueAttributes]:
        return self._catalog.queues_of_kind("home")

    def delete_queue(self, name: str) -> None:
        """Delete a queue holding no unexpired message (:class:`QueueNotEmpty` otherwise)."""
        self._catalog.delete_queue(name)

    # -- expiry check points (docs/expiry.md) ------------------------------------------------
    def activate(self, name: str) -> int:
        """Discard every expired message on a queue, whatever its state; return how many."""
        return self._expiry.activate(name)

    def depth(self, name: str) -> int:
        """How many messages a queue holds, locked ones included, expired ones purged first."""
        return self._expiry.depth(name)

    def sweep_expired(self, name: str | None = None) -> int:
        """Discard expired messages now, on one queue or every one; return how many."""
        return self._expiry.sweep_expired(name)

    def start_expiry_sweeper(self, interval_s: float) -> None:
        """Sweep every queue every ``interval_s`` seconds in a background thread."""
        self._expiry.start_sweeper(interval_s)

    def stop_expiry_sweeper(self) -> None:
        self._expiry.stop_sweeper()

    def purge(self, name: str) -> int:
        """Remove every message from a queue (rules see reason ``purged``); return how many."""
        return self._gets.purge(name)

    # -- consumers (docs/consumers.md) -------------------------------------------------------
    def consume(
        self, queue: str, *, wait: float | timedelta | None = None, confirm: bool = True,
        filter: Filter | None = None,
    ) -> Consumer:
        """The messages of ``queue`` for a ``for`` loop; leaving it early undoes the one in hand."""
        return self._consumers.consume(queue, wait, confirm, filter)

    def listen(
        self, queue: str, callback: Callable[[Message], object], *, threads: int = 1, confirm: bool = True,
        filter: Filter | None = None,
    ) -> Listener:
        """Call ``callback`` with every message of ``queue``, from ``threads`` threads, until stopped."""
        return self._consumers.listen(queue, callback, threads, confirm, filter)

    # -- the dead-letter queue ---------------------------------------------------------------
    def dead_letter_queue(self) -> str:
        return self._dead_letters.name()

    def set_dead_letter_queue(self, name: str | None) -> None:
        """Name the store's dead-letter queue (None: the default); a named one is never made for you."""
        self._dead_letters.set_name(name)

    def dlq_browse(self, *, queue: str | None = None, limit: int | None = None) -> list[Message]:
        """The dead-letter queue's messages (of ``queue`` only, if given), with their ``dlq.*`` fields."""
        return self._dead_letters.browse(queue, limit)

    def dlq_resend(
        self, uids: Sequence[MessageUID | str] | None = None, *, queue: str | None = None
    ) -> Resent:
        """Move dead-lettered messages back to the queue each left, in one transaction."""
        return self._dead_letters.resend(uids, queue)

    def dlq_give_up(
        self, queue: str, confirm_id: int, refusals: Sequence[tuple[MessageUID | str, str]]
    ) -> list[tuple[MessageUID, str]]:
        """Move messages got under ``confirm_id`` that cannot be delivered, each ``(uid, why)``, to the
        dead-letter queue; those that cannot go (returned with why) are undone, a backout counted."""
        return self._dead_letters.give_up_gets(queue, confirm_id, refusals)

    def dlq_delete(self, uids: Sequence[MessageUID | str] | None = None) -> int:
        """Delete dead-lettered messages (``uids``, or all) for good; return how many."""
        return self._dead_letters.delete(uids)

    # -- rules (docs/rules.md) ---------------------------------------------------------------
    def add_rule(self, queue: str, rule: QueueRule) -> None:
        """Attach a rule instance to a queue, for the life of this object (not stored)."""
        self._rulebook.add_rule(queue, rule)

    def remove_rule(self, queue: str, rule: QueueRule) -> bool:
        """Detach a rule instance added with :meth:`add_rule`; return whether it was attached."""
        return self._rulebook.remove_rule(queue, rule)

    def queue_bindings(self, queue: str) -> list[BindingInfo]:
        """The rules bound to a queue, in the order they run (persisted ones first)."""
        return self._rulebook.queue_bindings(queue)

    def rule_failures(self, *, parked: bool | None = None) -> list[FailureRow]:
        """Deliveries of durable events that raised: waiting for a retry, or parked."""
        return self._rulebook.rule_failures(parked=parked)

    def retry_rule_failures(self, *, parked: bool = False, event_id: int | None = None) -> int:
        """Retry failed deliveries now; return how many succeeded."""
        return self._rulebook.retry_rule_failures(parked=parked, event_id=event_id)

    def queue_stats(self, queue: str) -> dict[str, int]:
        """A queue's persistent counters (kept by the ``counters`` and ``dead-letter`` rules)."""
        return self._rulebook.queue_stats(queue)

    def apply_stats(
        self, queue: str, increments: Mapping[str, int], *, event_id: int | None = None, durable: bool = True
    ) -> bool:
        """Add to a queue's counters, once per durable ``event_id``; return whether it was applied."""
        return self._rulebook.apply_stats_each(queue, [(increments, event_id)], durable=durable)[0]

    def apply_stats_each(
        self, queue: str, batch: Sequence[tuple[Mapping[str, int], int | None]], *, durable: bool = True
    ) -> list[bool]:
        return self._rulebook.apply_stats_each(queue, batch, durable=durable)

    # -- encryption at rest and damage -------------------------------------------------------
    def rotate_keys(self, queue: str | None = None, *, batch: int = 500) -> int:
        """Re-seal under the current store key every row sealed with another; return how many."""
        return self._sealer.rotate_keys(self._sink, queue, batch=batch)

    def quarantined(self) -> list[QuarantineEntry]:
        return self._sealer.quarantined(self._db)

    def check(self, *, repair: bool = False) -> CheckReport:
        """Look for damage in the store (``edgeq check``); ``repair=True`` then repairs what it can."""
        from edgeq.check.checker import StoreCheck  # an operator's tool: not paid for by every `import edgeq`

        checker = StoreCheck(self._db)
        return checker.repair(self._sink) if repair else checker.run()

    # -- remote administration (docs/admin.md) -----------------------------------------------
    def trust_admin_key(
        self, key_id: str, public_key: bytes | str | Ed25519PublicKey, *, actions: Sequence[str] = ("*",)
    ) -> AdminKey:
        """Trust operator key ``key_id`` to sign admin requests for ``actions`` (again: replaced)."""
        return self._admin().trust(key_id, public_key, actions)

    def untrust_admin_key(self, key_id: str) -> bool:
        """Stop trusting operator key ``key_id``; return whether it was trusted."""
        return self._admin().untrust(key_id)

    def admin_keys(self) -> list[AdminKey]:
        return self._admin().keys()

    def execute_admin(self, request: bytes, *, remaining_ms: int | None = None) -> AdminReply:
        """Check and run one admin request at most once; return its reply (never raises for it)."""
        return self._admin().execute(request, remaining_ms)

    def process_admin(self, *, limit: int = 100) -> list[AdminReply]:
        """Run up to ``limit`` requests waiting on ``SYSTEM.ADMIN`` and put their replies."""
        return self._admin().process(limit)

    def admin_history(self, *, limit: int = 100) -> list[AdminReply]:
        """The admin replies this queue manager remembers (31 days), newest first."""
        return self._admin().history(limit)

    def _admin(self) -> AdminExecutor:
        if self._admin_executor is None:  # built at first use: `import edgeq` does not pay for it
            from edgeq.admin.executor import AdminExecutor

            self._admin_executor = AdminExecutor(self, self._db)
        return self._admin_executor

    # -- sync state, the journal, registered devices -----------------------------------------
    def sync_overview(self) -> SyncOverview:
        """Every remote and home-server queue's backlog and refusals, and the sync agent's state."""
        return self._transmitter.sync_overview()

    def journal_since(self, after_id: int = 0, limit: int = 10_000) -> list[JournalEntry]:
        return self._sink.journal_since(after_id, limit)

    def devices(self) -> list[DeviceRecord]:
        return self._devices.devices()

    def register_device(self, name: str, public_key: bytes, *, queues: Sequence[str] | None = None,
                        share_key: bool = False, replace: bool = True) -> list[str]:
        """Register a device's Ed25519 key for authenticated sync (again: re-keyed, revocation lifted, unless
        not ``replace``); a key another device has is refused unless ``share_key``: returns those devices."""
        return self._devices.register_device(name, public_key, queues=queues, share_key=share_key,
                                             replace=replace)

    def revoke_device(self, name: str) -> None:
        """Revoke a device: the server refuses its requests from now on."""
        self._devices.revoke_device(name)

    def device(self, name: str) -> DeviceRecord | None:
        return self._devices.device(name)

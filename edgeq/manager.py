"""The queue manager: local, remote and home-server queues in one SQLite file, with MQe's
expiry semantics. :class:`QueueManager` is a facade over the parts that do the work
(docs/architecture.md); its options and verbs are described in docs/api.md."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Self

from edgeq.clock import ManualClock, system_clock
from edgeq.consume.consumers import Consumer, Consumers, Listener
from edgeq.consume.waiting import Waker
from edgeq.crypto import CIPHERS, StoreKeys
from edgeq.errors import EdgeqError, InvalidArgument, InvalidType
from edgeq.events.bindings import BindingInfo, RuleBook, RuleSpec, attach_stored
from edgeq.events.dispatch import Dispatcher, Pending
from edgeq.events.sink import EventSink
from edgeq.exchange.holds import Holds
from edgeq.exchange.transmit import SyncOverview, Transmitter
from edgeq.exchange.verbs import Exchange
from edgeq.gets import Gets
from edgeq.message import Message
from edgeq.names import check_name
from edgeq.puts import Puts
from edgeq.queues.attributes import QueueAttributes, QueueUsage, StoreUsage
from edgeq.queues.budget import OverflowTally, check_store_budget
from edgeq.queues.catalog import QueueCatalog
from edgeq.queues.checkpoints import ExpiryPolicy
from edgeq.queues.deadletter import Resent
from edgeq.results import ConfirmResult, PutResult, QuarantineEntry
from edgeq.sealer import Sealer
from edgeq.store.connection import ConnectionFactory
from edgeq.store.damage import damaged
from edgeq.store.devices import DeviceRecord, DeviceRegistry
from edgeq.store.journal import JournalEntry, JournalSide
from edgeq.store.meta import create_store, journal_setting, name_needed, open_identity
from edgeq.store.opening import check_foreign
from edgeq.store.rules import FailureRow, RuleTx
from edgeq.store.schema import SCHEMA_VERSION
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

log = logging.getLogger("edgeq")


class QueueManager:
    """A queue manager: named queues, durable in one SQLite file. The application's verbs are
    here; ``qm.exchange`` holds those only the sync agent and the home server call. The options
    and the verbs by concern: docs/api.md.

    >>> import tempfile, os
    >>> from edgeq import Message, Int32
    >>> path = os.path.join(tempfile.mkdtemp(), "device.db")
    >>> with QueueManager(path, name="DEV1") as qm:
    ...     qm.define_queue("ORDERS", expiry_ms=3_600_000)
    ...     uid = qm.put("ORDERS", Message(b"42 widgets", expiry=Int32(60_000)))
    ...     qm.depth("ORDERS"), qm.get("ORDERS").data
    (1, b'42 widgets')
    """

    def __init__(
        self,
        path: str | Path,
        name: str | None = None,
        *,
        durability: Durability = "full",
        timeout: float = 30.0,
        clock: Clock | None = None,
        rule_retry_limit: int = 5,
        rule_retry_base_ms: int = 1_000,
        remember_confirmed_ms: int | None = 86_400_000,
        journal: JournalSide | Literal["off"] | None = None,
        keys: StoreKeys | str | Path | None = None,
        default_encryption: str | None = None,
        max_store_bytes: int | None = None,
    ) -> None:
        # Every argument is checked before the file is touched.
        if not isinstance(path, (str, Path)):
            raise InvalidType(f"path must be a str or Path, not {type(path).__name__}")
        if name is not None:
            check_name(name, "queue manager name")
        if clock is not None and not callable(clock):
            raise InvalidType("clock must be a callable returning epoch milliseconds")
        self.path = Path(path)
        retries = (("rule_retry_limit", rule_retry_limit), ("rule_retry_base_ms", rule_retry_base_ms))
        for label, value in retries:
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidArgument(f"{label} must be a positive int, not {value!r}")
        if remember_confirmed_ms is not None and (
            isinstance(remember_confirmed_ms, bool) or not isinstance(remember_confirmed_ms, int)
            or remember_confirmed_ms < 1
        ):
            raise InvalidArgument(
                f"remember_confirmed_ms must be a positive int or None, not {remember_confirmed_ms!r}")
        if journal not in (None, "server", "device", "off"):
            raise InvalidArgument(f"journal must be 'server', 'device', 'off' or None, not {journal!r}")
        if default_encryption is not None and default_encryption not in CIPHERS:
            raise InvalidArgument(f"default_encryption must be one of {', '.join(CIPHERS)} or None")
        if isinstance(keys, (str, Path)):
            keys = StoreKeys.load(keys)
        elif keys is not None and not isinstance(keys, StoreKeys):
            raise InvalidType("keys must be a StoreKeys ring or the path of a store key file")
        self._max_store_bytes = check_store_budget(max_store_bytes)
        self._admin_executor: AdminExecutor | None = None  # built at the first admin verb (edgeq.admin.executor)
        self._clock: Clock = clock or system_clock
        keys = keys if keys is not None else StoreKeys.from_env()
        self._db = ConnectionFactory(self.path, durability=durability, timeout=timeout)
        # Waiting gets sleep here; every commit that changed a row wakes them (edgeq.consume.waiting).
        self._waker = Waker(self._db, close_timeout_s=timeout)
        self._db.on_commit = self._waker.notify
        # A manual clock moved on may end a redelivery delay: waiting gets look again.
        self._unwatch = clock.watch(self._waker.notify) if isinstance(clock, ManualClock) else None
        # Nothing is written before the file is recognised, and a new store is made
        # whole or not at all: a failed open leaves no file behind (edgeq.store.meta).
        if check_foreign(self.path, newest=SCHEMA_VERSION):
            if name is None:
                raise name_needed(self.path)
            if not self.path.exists():
                create_store(self.path, name, self._clock, timeout=timeout)
        try:
            self.name, origin = open_identity(self._db, self.path, name, self._clock)
            self._sealer = Sealer(self.name, keys, default_encryption)
            self._sealer.check_keys(self._db, self.path)
            rules = Dispatcher(
                self.name, self._db, self._clock, retry_limit=rule_retry_limit,
                retry_base_ms=rule_retry_base_ms,
                unseal=self._sealer.unseal_for_rules,
            )
            # The parts, each built once; every public method delegates to one of them.
            self._sink = EventSink(self.name, self._db, self._clock, rules,
                                   journal_setting(self._db, journal))
            self._expiry = ExpiryPolicy(self.name, self._sink)
            overflowed = OverflowTally()
            self._gets = Gets(self.name, self._sink, self._sealer, self._expiry, overflowed)
            self._transmitter = Transmitter(self.name, origin, self._sink, self._expiry, self._gets)
            self._puts = Puts(self.name, origin, self._sink, self._sealer, self._expiry, self._transmitter,
                              remember_confirmed_ms, max_store_bytes=self._max_store_bytes,
                              overflowed=overflowed)
            self._catalog = QueueCatalog(self.name, self, self._sink, self._sealer, self._expiry,
                                         max_store_bytes=self._max_store_bytes, overflowed=overflowed)
            self._rulebook = RuleBook(self.name, self, self._sink)
            self._devices = DeviceRegistry(self._db, self._clock)
            self._dead_letters = self._transmitter.dead_letters
            self._consumers = Consumers(self._gets, self._waker)
            #: The verbs only the sync agent and the home server call (edgeq.exchange).
            self.exchange = Exchange(self.name, self._puts, self._transmitter, self._sink,
                                     Holds(self.name, self._sink), self._devices)
            # Plugins load here, explicitly, never at import time.
            with self._db.read() as conn:
                stored = RuleTx(conn).bindings()
            for queue, bindings in attach_stored(self, stored).items():
                rules.set_persisted(queue, bindings)
            rules.recover()
        except EdgeqError:
            self._db.close()
            raise
        except Exception as exc:  # never a raw Python error from a damaged file's bytes
            self._db.close()
            raise damaged(f"opening it failed ({type(exc).__name__}: {exc})", path=str(self.path)) from exc
        except BaseException:
            self._db.close()
            raise

    # -- the store ---------------------------------------------------------------------------

    @property
    def origin(self) -> str:
        """The origin of the uids this store issues: its name and incarnation, e.g.
        ``'DEV1:k3x9qam2pa'`` (see :mod:`edgeq.uid`)."""
        return self._puts.origin

    @property
    def max_store_bytes(self) -> int | None:
        """The flash budget of the whole store this object enforces (None: none)."""
        return self._max_store_bytes

    @property
    def journal_mode(self) -> JournalSide | None:
        """``"server"``, ``"device"`` or None: what this store journals (see :mod:`edgeq.store.journal`)."""
        return self._sink.journal

    def now_ms(self) -> int:
        """The current time by this queue manager's clock (epoch ms): what expiry is judged by."""
        return self._clock()

    def close(self) -> None:
        """Tell rules (``on_closed``), stop the expiry sweeper and close the store. Safe to call twice.

        Waiting gets raise :class:`~edgeq.errors.QueueManagerClosed` at once; consumer
        loops end and listeners stop, a listener's callback in progress finishing
        first (for up to ``timeout`` seconds)."""
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
        """Pass every SQL statement this queue manager runs, in any thread, to
        ``callback`` while the block runs (as sqlite-utils' ``Database.tracer``): to
        see what an operation costs.

        >>> import tempfile, os
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> qm.define_queue("Q"); seen = []
        >>> with qm.tracer(seen.append):
        ...     _ = qm.put("Q", Message(b"x"))
        >>> any(s.startswith("INSERT INTO messages") for s in seen)
        True
        >>> qm.close()
        """
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
        return self._puts.put_many(queue, [message], confirm_id=confirm_id)[0]

    def put_many(
        self, queue: str, messages: Sequence[Message], *, confirm_id: int | None = None
    ) -> list[MessageUID]:
        """Put several messages in one transaction: all are stored, or none.

        Raises :class:`DuplicateMessage`, :class:`QueueFull` or
        :class:`MessageTooLarge` for the first message that cannot be stored (and
        stores none). See :meth:`put_each` for per-message outcomes instead.
        """
        return self._puts.put_many(queue, messages, confirm_id=confirm_id)

    def put_each(
        self, queue: str, messages: Sequence[Message], *, confirm_id: int | None = None
    ) -> list[PutResult]:
        """Put a batch in one transaction, with an outcome per message instead of an error.

        Each :class:`~edgeq.results.PutResult` says ``stored``, ``replaced`` (a
        resend over an unconfirmed copy), ``unconfirmed`` (an unconfirmed copy is
        held and this is not a resend: confirm it, or resend), ``duplicate``
        (already confirmed: held, consumed, or still remembered: until the
        sender settles it, see ``qm.exchange.settle``), ``expired``
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
        return self._puts.put_each(queue, messages, confirm_id=confirm_id)

    def confirm_put(self, queue: str, uid: MessageUID | str) -> None:
        """Make an assured put visible, ordered by confirm time. Confirming twice is harmless.

        Raises :class:`MessageExpired` (and discards it) if it expired while locked,
        :class:`MessageNotFound` if the queue does not hold it.
        """
        self._puts.confirm_put(queue, uid)

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
        return self._puts.confirm_put_each(queue, uids, device=device, clock_offset_ms=clock_offset_ms)

    def get(
        self, queue: str, *, confirm_id: int | None = None, filter: Filter | None = None,
        wait: float | timedelta | None = None,
    ) -> Message | None:
        """Take the next message (priority, then arrival); None when none is available.

        Expired messages ahead of it are discarded (rules see ``where="get"``) and
        never returned. With ``confirm_id`` the message is only locked, until
        :meth:`confirm_get` deletes it or :meth:`undo` restores it. ``filter``
        takes only a message whose fields equal every given value.

        ``wait`` (seconds or a timedelta; ``math.inf``: until a message comes) waits
        for a message when none is available: it returns as soon as one is put (by
        this process or another), or None when the wait ends. It sleeps in between,
        and every retry is an ordinary get: expired messages are discarded, never
        returned. Closing the queue manager ends the wait with
        :class:`~edgeq.errors.QueueManagerClosed` (docs/consumers.md).

        >>> import tempfile, os
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> qm.define_queue("Q")
        >>> _ = qm.put("Q", Message(b"low", priority=1)); _ = qm.put("Q", Message(b"high", priority=8))
        >>> qm.get("Q").data
        b'high'
        >>> qm.close()
        """
        got = self.get_many(queue, 1, confirm_id=confirm_id, filter=filter, wait=wait)
        return got[0] if got else None

    def get_many(
        self, queue: str, count: int, *, confirm_id: int | None = None, filter: Filter | None = None,
        wait: float | timedelta | None = None,
    ) -> list[Message]:
        """Take up to ``count`` messages in one transaction (see :meth:`get`); with
        ``wait``, as soon as there is at least one (an empty list when the wait ends)."""
        return self._waker.until(
            lambda: self._gets.get_many(queue, count, confirm_id=confirm_id, filter=filter), wait,
            due=lambda: self._gets.due_in(queue),
        )

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
        return self._gets.browse(queue, filter=filter, limit=limit)

    def confirm_get(self, queue: str, uid: MessageUID | str) -> None:
        """Complete an assured get: delete the locked message.

        Raises :class:`MessageExpired` (and discards it) if it expired while locked,
        :class:`MessageNotFound` if no message ``uid`` is locked by a get.
        """
        self._gets.confirm_get(queue, uid)

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
        return self._gets.confirm_get_each(queue, uids)

    def undo(
        self, queue: str, confirm_id: int, *, count_backout: bool = True,
        uids: Sequence[MessageUID | str] | None = None,
    ) -> int:
        """Undo whatever ``confirm_id`` locked: an assured get's messages become visible
        again (``backout_count`` + 1) once their queue's redelivery delay has passed
        (``redelivery_delay_ms``, doubling per backout: a failed delivery, deliberate or
        not, is not handed straight back; see :meth:`define_queue`); an assured put's
        locked copies are removed. Returns how many messages it undid.

        On a queue with a ``backout_threshold``, a message whose count reaches it is
        moved to the queue's ``backout_queue`` instead (see :meth:`define_queue`).
        ``count_backout=False`` hands the messages back at once without counting a
        backout (nothing is moved, nothing delayed): for a getter that stops before it
        tried to process them.
        ``uids`` undoes only those messages of ``confirm_id`` (the rest stay locked,
        to confirm or undo later): a batch partly processed.
        """
        return self._gets.undo(queue, confirm_id, count_backout=count_backout, uids=uids)

    def delete_message(self, queue: str, uid: MessageUID | str) -> None:
        """Delete one message by uid, whatever its state (rules see reason ``deleted``;
        an expired one is discarded as expired, ``where="get"``)."""
        self._gets.delete_message(queue, uid)

    def release_locks(self, queue: str) -> int:
        """Undo every assured-get lock on a queue (its getter is gone); return how many.

        Each released message is visible again at once (no redelivery delay: its
        getter is gone, maybe not because of it) with ``backout_count`` + 1.
        """
        return self._gets.release_locks(queue)


    # -- queues ------------------------------------------------------------------------------
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
        max_bytes: int | None = None,
        on_full: OnFull = "reject",
        backout_threshold: int | None = None,
        backout_queue: str | None = None,
        redelivery_delay_ms: int = DEFAULT_REDELIVERY_DELAY_MS,
        max_redelivery_delay_ms: int = DEFAULT_MAX_REDELIVERY_DELAY_MS,
        exist_ok: bool = False,
    ) -> None:
        """Define a local queue; raise :class:`QueueExists` if it is defined already, unless
        ``exist_ok`` and it is defined exactly so (kind, attributes, rules): a script that
        defines its queues can run again. A queue defined otherwise is still refused.

        The flash budget: ``max_bytes`` bounds the data plus fields the queue holds
        (as stored), beside ``max_depth``; ``on_full`` is what a put does when either
        (or the queue manager's ``max_store_bytes``) would be exceeded: ``"reject"``
        raises :class:`QueueFull`; ``"discard-oldest"`` discards the oldest ready
        messages to make room, ``"discard-lowest-priority"`` the lowest-priority
        oldest ones (refusing a message lower than every one held). Expired messages
        go first; locked ones never; rules see each discard as ``removed`` with
        reason ``"overflow"`` (docs/storage.md, "Flash budget").

        ``encryption="aes-256-gcm"`` seals message data and fields in the store
        with the queue manager's store key (see :mod:`edgeq.crypto`); the default
        is the queue manager's ``default_encryption``.

        ``depth_threshold``: rules' ``on_threshold`` fires when a put takes the
        depth up to it. ``rules``: rules to bind by name, each a name or a
        ``(name, config)`` pair, e.g. ``[("dead-letter", {"queue": "DLQ"}), "log"]``;
        the bindings are stored and re-attached whenever the store is opened. Each
        rule validates its config now: on any error nothing is defined.

        Poison messages (IBM MQ's BOTHRESH/BOQNAME): a message whose assured gets were
        undone ``backout_threshold`` times is moved to ``backout_queue`` (defined
        already; encrypted if this queue is) in the undo's own transaction, keeping
        its uid, fields and deadline, instead of being delivered again; rules see it
        removed with reason ``"backout"``. Give both, or neither (docs/consumers.md,
        "Poison messages").

        Redelivery delay: a message whose assured get is undone with a backout (its
        consumer failed) is got again only ``redelivery_delay_ms`` later (1 s; 0: at
        once), doubling with each further backout up to ``max_redelivery_delay_ms``
        (5 minutes), and never after it expires; other messages are got meanwhile
        (docs/consumers.md, "Redelivery delay").

        >>> import tempfile, os
        >>> from edgeq import Message, QueueManager
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> qm.define_queue("ALERTS", expiry_ms=30_000, ordering="fifo")
        >>> qm.queue_attributes("ALERTS").ordering
        'fifo'
        >>> qm.define_queue("ALERTS", expiry_ms=30_000, ordering="fifo", exist_ok=True)  # again: no error
        >>> qm.define_queue("ALERTS", expiry_ms=60_000, ordering="fifo", exist_ok=True)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        edgeq.errors.QueueExists: queue 'ALERTS' is already defined on DEV1, otherwise: expiry_ms 30000, not 60000; ...
        >>> qm.close()
        """
        self._catalog.define_queue(
            name, rules, encryption, exist_ok, expiry_ms=expiry_ms, cap_expiry_ms=cap_expiry_ms,
            max_depth=max_depth,
            max_message_bytes=max_message_bytes, default_priority=default_priority, ordering=ordering,
            depth_threshold=depth_threshold, max_bytes=max_bytes, on_full=on_full,
            backout_threshold=backout_threshold, backout_queue=backout_queue,
            redelivery_delay_ms=redelivery_delay_ms, max_redelivery_delay_ms=max_redelivery_delay_ms,
        )

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
        depth_threshold: int | None = None,
        max_bytes: int | None = None,
        on_full: OnFull = "reject",
        refusal_limit: int | None = None,
        compression: str | None = None,
        exist_ok: bool = False,
    ) -> None:
        """Define a remote queue: puts are kept here (durably, expiry running) and
        transmitted to ``target_queue`` (default: the same name) on queue manager
        ``target_qmgr`` by the sync agent. ``mode="async"`` stores and forwards
        later; ``mode="sync"`` transmits inside ``put`` and raises
        :class:`RemoteUnavailable` (keeping nothing) if that fails. Applications
        cannot get or browse a remote queue. A store never given a ``journal``
        setting journals its expiries from now on (``journal_mode == "device"``),
        for the sync agent to report. ``max_bytes`` and ``on_full`` bound what waits
        here as for :meth:`define_queue`; ``refusal_limit``: how many times the target
        may refuse a message before it moves to the dead-letter queue (rules see it
        removed, reason ``"refused"``; None: the sync agent's default).
        ``compression="zstd"`` (needs ``pip install 'edgeq[zstd]'``) or ``"zlib"``: the sync
        agent sends this queue's batches compressed as a whole,
        to a server that takes that codec (negotiated at hello; docs/protocol.md).
        ``exist_ok`` as for :meth:`define_queue`.

        >>> import tempfile, os
        >>> from edgeq import Message, QueueManager
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> qm.define_remote_queue("ORDERS", target_qmgr="HOME", max_bytes=1 << 20, on_full="discard-oldest")
        >>> qm.queue_attributes("ORDERS").target_queue
        'ORDERS'
        >>> qm.close()
        """
        self._catalog.define_remote_queue(
            name, target_qmgr=target_qmgr, target_queue=target_queue, mode=mode, expiry_ms=expiry_ms,
            cap_expiry_ms=cap_expiry_ms, max_depth=max_depth, max_message_bytes=max_message_bytes,
            default_priority=default_priority, rules=rules, encryption=encryption,
            depth_threshold=depth_threshold,
            max_bytes=max_bytes, on_full=on_full, refusal_limit=refusal_limit, compression=compression,
            exist_ok=exist_ok,
        )

    def define_home_server_queue(
        self, name: str, *, server: str, exist_ok: bool = False, **attributes: Any
    ) -> None:
        """Define a home-server queue: a local queue that the sync agent fills by pulling,
        from home server ``server``, the messages addressed to this queue manager's
        ``name`` (held there on the queue ``<this qm name>.<name>``). Other keywords
        are those of :meth:`define_queue`, and ``compression`` (``"zstd"``, ``"zlib"``):
        the agent asks the server for this queue's batches compressed. As with :meth:`define_remote_queue`, a
        store never given a ``journal`` setting journals its expiries from now on. ``exist_ok``
        as for :meth:`define_queue`.

        >>> import tempfile, os
        >>> from edgeq import QueueManager
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> qm.define_home_server_queue("INBOX", server="HOME")
        >>> qm.queue_attributes("INBOX").server, qm.journal_mode
        ('HOME', 'device')
        >>> qm.close()
        """
        self._catalog.define_home_server_queue(name, server=server, exist_ok=exist_ok, **attributes)

    def alter_queue(self, name: str, **attributes: Any) -> QueueAttributes:
        """Change some of a queue's attributes (same keywords as :meth:`define_queue`).

        A new ``expiry_ms`` applies at once to messages already on the queue that
        have no expiry of their own; a new ``cap_expiry_ms`` only to new puts; a new
        ``ordering`` re-orders the messages there; ``rules=[...]`` replaces the
        persisted rule bindings; a lower ``max_depth`` or ``max_bytes`` takes effect at
        the next put (which makes room by ``on_full``, or is refused); ``refusal_limit``
        (remote queues only) and ``compression`` (remote and home-server queues; from the
        next request) as for :meth:`define_remote_queue`; ``backout_threshold``
        and ``backout_queue`` as for :meth:`define_queue` (set both to None to stop
        moving poison messages); ``redelivery_delay_ms`` and ``max_redelivery_delay_ms``
        from the next backout on. Returns the new attributes.

        >>> import tempfile, os
        >>> from edgeq import Message, QueueManager
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> qm.define_queue("Q")
        >>> qm.alter_queue("Q", max_depth=1000).max_depth
        1000
        >>> qm.close()
        """
        return self._catalog.alter_queue(name, **attributes)

    def queue_attributes(self, name: str) -> QueueAttributes:
        """The definition of a queue.

        >>> import tempfile, os
        >>> from edgeq import Message, QueueManager
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> qm.define_queue("Q", max_depth=10); qm.queue_attributes("Q").max_depth
        10
        >>> qm.close()
        """
        return self._catalog.queue_attributes(name)

    def queue_usage(self, name: str) -> QueueUsage:
        """What a queue holds against its budget: depth, bytes (data plus fields, as
        stored), its limits and how many messages ``on_full`` discarded through this
        object. Expired messages are discarded first, as :meth:`depth` does.

        >>> import tempfile, os
        >>> from edgeq import Message, QueueManager
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> qm.define_queue("Q", max_bytes=100); _ = qm.put("Q", Message(b"12345"))
        >>> u = qm.queue_usage("Q"); (u.depth, u.bytes, u.max_bytes)
        (1, 5, 100)
        >>> qm.close()
        """
        return self._catalog.queue_usage(name)

    def store_usage(self) -> StoreUsage:
        """What the whole store holds, against :attr:`max_store_bytes`, with every queue's
        usage; read as stored (nothing is discarded), so monitoring may call it often."""
        return self._catalog.store_usage()

    def queue_names(self) -> list[str]:
        """The names of the queues defined here, sorted.

        >>> import tempfile, os
        >>> from edgeq import Message, QueueManager
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> qm.define_queue("B"); qm.define_queue("A"); qm.queue_names()
        ['A', 'B']
        >>> qm.close()
        """
        return self._catalog.queue_names()

    def remote_queues(self) -> list[QueueAttributes]:
        """The remote queues defined here."""
        return self._catalog.queues_of_kind("remote")

    def home_server_queues(self) -> list[QueueAttributes]:
        """The home-server queues defined here."""
        return self._catalog.queues_of_kind("home")

    def delete_queue(self, name: str) -> None:
        """Delete an empty queue. Expired messages are purged first (MQe's "deleted"
        check point); any other message left raises :class:`QueueNotEmpty`. The
        backout queue of another queue is refused (:class:`InvalidArgument`) until
        that queue names another, or none."""
        self._catalog.delete_queue(name)

    # -- expiry check points -----------------------------------------------------------------
    def activate(self, name: str) -> int:
        """Activate a queue: discard every expired message on it, whatever its state.

        Happens by itself the first time a queue is used after the queue manager
        opens (MQe's "queue activated" check point). Returns how many it discarded.
        """
        return self._expiry.activate(name)

    def depth(self, name: str) -> int:
        """How many messages the queue holds, locked ones included; expired ones are
        purged first (MQe's "size inquired" check point), so none is ever counted.

        One indexed probe plus one row read: constant time at any depth.
        """
        return self._expiry.depth(name)

    def sweep_expired(self, name: str | None = None) -> int:
        """Discard expired messages now (IBM MQ's expiry scan); return how many.

        With no name, sweeps every queue. Rules see ``where="sweep"`` (or
        ``"activate"`` for a queue's first use since the queue manager opened).

        >>> import tempfile, os
        >>> from edgeq import Message, QueueManager
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> qm.define_queue("Q"); qm.sweep_expired("Q")
        0
        >>> qm.close()
        """
        return self._expiry.sweep_expired(name)

    def start_expiry_sweeper(self, interval_s: float) -> None:
        """Sweep every queue every ``interval_s`` seconds in a background thread (APScheduler).

        Stopped by :meth:`stop_expiry_sweeper` or :meth:`close`.
        """
        self._expiry.start_sweeper(interval_s)

    def stop_expiry_sweeper(self) -> None:
        """Stop the background sweeper, waiting for a sweep in progress. No-op if none runs."""
        self._expiry.stop_sweeper()

    def purge(self, name: str) -> int:
        """Remove every message from a queue (rules see reason ``purged``); return how many."""
        return self._gets.purge(name)
    # -- consumers (docs/consumers.md) -------------------------------------------------------
    def consume(
        self, queue: str, *, wait: float | timedelta | None = None, confirm: bool = True,
        filter: Filter | None = None,
    ) -> Consumer:
        """The messages of ``queue``, one at a time, for a ``for`` loop: each waits for
        the next message (as ``get(wait=...)`` does) and the loop ends when ``wait``
        passes with nothing new (None, the default: never; 0: as soon as the queue is
        empty) or when the queue manager closes.

        With ``confirm=True`` (the default) each message is got assured and confirmed
        when the loop body finishes with it (when the next one is asked for). Used as a
        context manager, an exception leaving the block undoes the message in hand
        (``backout_count`` + 1; got again after the queue's redelivery delay) and
        ``break`` confirms it. A bare
        ``for`` loop cannot tell ``break`` from an exception, so leaving one early
        undoes the message in hand: it is never lost, and may come again.
        ``confirm=False`` takes each message for good when it is handed out.
        ``filter`` takes only messages whose fields equal every given value.

        >>> import tempfile, os
        >>> from edgeq import QueueManager
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> qm.define_queue("Q")
        >>> _ = qm.put_many("Q", [Message(b"a"), Message(b"b")])
        >>> with qm.consume("Q", wait=0) as messages:
        ...     [m.data for m in messages]
        [b'a', b'b']
        >>> qm.depth("Q")
        0
        >>> qm.close()
        """
        return self._consumers.consume(queue, wait, confirm, filter)

    def listen(
        self, queue: str, callback: Callable[[Message], object], *, threads: int = 1, confirm: bool = True,
        filter: Filter | None = None,
    ) -> Listener:
        """Call ``callback`` with every message of ``queue``, from ``threads`` threads,
        until the returned :class:`~edgeq.consume.consumers.Listener` is stopped (``stop()``,
        or leaving it as a context manager) or the queue manager closes.

        With ``confirm=True`` (the default) each message is got assured: the
        callback returning confirms it; the callback raising undoes it
        (``backout_count`` + 1, so a queue's backout threshold applies; got again after
        the queue's redelivery delay, the messages behind it meanwhile) and is logged
        in one line (its traceback at most once a minute per message), and the
        listener carries on. An error of the store itself (a damaged row, the
        queue deleted) stops the listener and is kept in its ``error``.
        ``confirm=False`` takes each message for good before the callback runs.

        >>> import tempfile, os, threading
        >>> from edgeq import QueueManager
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> qm.define_queue("Q"); seen = threading.Event()
        >>> with qm.listen("Q", lambda m: seen.set()) as listener:
        ...     _ = qm.put("Q", Message(b"ping"))
        ...     seen.wait(5)
        True
        >>> listener.delivered, qm.depth("Q")
        (1, 0)
        >>> qm.close()
        """
        return self._consumers.listen(queue, callback, threads, confirm, filter)
    # -- the dead-letter queue ---------------------------------------------------------------
    def dead_letter_queue(self) -> str:
        """The store's dead-letter queue: ``SYSTEM.DEAD.LETTER.QUEUE`` (made when first
        needed) unless :meth:`set_dead_letter_queue` named another."""
        return self._dead_letters.name()

    def set_dead_letter_queue(self, name: str | None) -> None:
        """Name the store's dead-letter queue (kept in the store; None: the default). A
        named queue is never made for you: until it is defined (and while it is full, or
        clear when a message is encrypted), messages that cannot be delivered stay where
        they are, logged, and are offered again."""
        self._dead_letters.set_name(name)

    def dlq_browse(self, *, queue: str | None = None, limit: int | None = None) -> list[Message]:
        """The dead-letter queue's messages in get order (only those that left ``queue``,
        if given), with their ``dlq.*`` header; none while it is not defined. Expired ones
        are discarded first, as ``browse`` does."""
        return self._dead_letters.browse(queue, limit)

    def dlq_resend(
        self, uids: Sequence[MessageUID | str] | None = None, *, queue: str | None = None
    ) -> Resent:
        """Move dead-lettered messages (``uids``, or all; only those that left ``queue``
        if given) back to the queue each left, their ``dlq.*`` fields removed, in one
        transaction: once the operator has fixed the cause (defined the target queue,
        made room). Those that cannot go back stay, listed in ``Resent.kept`` with why.

        A remote queue's message refused ``refusal_limit`` times moved there with a ``dlq.*``
        header (reason, queue, refusal, attempts, time); the operator fixes the cause, then:

        >>> import tempfile, os
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> qm.define_remote_queue("METRICS", target_qmgr="HOME", refusal_limit=1)
        >>> uid = qm.put("METRICS", Message(b"x"))
        >>> why = "no-queue: HOME has no queue METRICS"
        >>> [r.dead_lettered for r in qm.exchange.refused("METRICS", [(uid, why)])]
        [True]
        >>> (dead,) = qm.dlq_browse(); dead.fields["dlq.reason"], dead.fields["dlq.queue"]
        ('refused', 'METRICS')
        >>> qm.dlq_resend([uid]).moved == [uid], qm.depth("METRICS"), qm.dlq_browse()
        (True, 1, [])
        >>> qm.close()
        """
        return self._dead_letters.resend(uids, queue)

    def dlq_delete(self, uids: Sequence[MessageUID | str] | None = None) -> int:
        """Delete dead-lettered messages (``uids``, each of which must be there; or all) in
        one transaction, for good: rules of the dead-letter queue see them removed, reason
        ``deleted``, and the journal records them ``discarded`` (a device reports that to
        its server, whose audit then stops counting them as waiting). Returns how many."""
        return self._dead_letters.delete(uids)

    # -- rules -------------------------------------------------------------------------------
    def add_rule(self, queue: str, rule: QueueRule) -> None:
        """Attach a rule instance to a queue, for the life of this queue manager object.

        Persisted rules, re-attached on every open, are bound by name with
        ``define_queue(..., rules=[...])`` instead.

        >>> from edgeq.rules import QueueRule
        >>> import tempfile, os
        >>> from edgeq import Message, QueueManager
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> qm.define_queue("Q"); qm.add_rule("Q", QueueRule()); qm.close()
        """
        self._rulebook.add_rule(queue, rule)

    def remove_rule(self, queue: str, rule: QueueRule) -> bool:
        """Detach a rule instance added with :meth:`add_rule`; return whether it was attached."""
        return self._rulebook.remove_rule(queue, rule)

    def queue_bindings(self, queue: str) -> list[BindingInfo]:
        """The rules bound to a queue, in the order they run (persisted ones first).

        >>> import tempfile, os
        >>> from edgeq import Message, QueueManager
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> qm.define_queue("Q", rules=["log"]); [b.name for b in qm.queue_bindings("Q")]
        ['log']
        >>> qm.close()
        """
        return self._rulebook.queue_bindings(queue)

    def rule_failures(self, *, parked: bool | None = None) -> list[FailureRow]:
        """Deliveries of durable events that raised: waiting for a retry, or parked.

        >>> import tempfile, os
        >>> from edgeq import Message, QueueManager
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> qm.rule_failures()
        []
        >>> qm.close()
        """
        return self._rulebook.rule_failures(parked=parked)

    def retry_rule_failures(self, *, parked: bool = False, event_id: int | None = None) -> int:
        """Retry failed deliveries now, without waiting for their backoff; with
        ``parked=True`` parked ones get a fresh round of attempts first; with
        ``event_id`` only that event's. Returns how many deliveries succeeded.
        (Due retries also happen by themselves: on later operations, on the
        expiry sweeper's ticks, and when the store is opened.)"""
        return self._rulebook.retry_rule_failures(parked=parked, event_id=event_id)

    def queue_stats(self, queue: str) -> dict[str, int]:
        """A queue's persistent counters (kept by the ``counters`` and ``dead-letter`` rules).

        >>> import tempfile, os
        >>> from edgeq import Message, QueueManager
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> qm.define_queue("Q", rules=["counters"]); _ = qm.put("Q", Message(b"x")); qm.queue_stats("Q")
        {'added': 1}
        >>> qm.close()
        """
        return self._rulebook.queue_stats(queue)

    def apply_stats(
        self, queue: str, increments: Mapping[str, int], *, event_id: int | None = None, durable: bool = True
    ) -> bool:
        """Add to a queue's counters (for rules). With the ``event_id`` of a durable event
        the increment is applied once, however often the event is delivered; returns
        whether it was applied. ``durable=False``: written without waiting for the disk
        (a power cut may lose it; a process crash does not)."""
        return self._rulebook.apply_stats_each(queue, [(increments, event_id)], durable=durable)[0]

    def apply_stats_each(
        self, queue: str, batch: Sequence[tuple[Mapping[str, int], int | None]], *, durable: bool = True
    ) -> list[bool]:
        """:meth:`apply_stats` for a batch of ``(increments, event_id)`` pairs, in one write
        (for a rule's batch hook); returns whether each was applied.

        >>> import tempfile, os
        >>> from edgeq import QueueManager
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1"); qm.define_queue("Q")
        >>> qm.apply_stats_each("Q", [({"seen": 1}, 7), ({"seen": 1}, 7), ({"seen": 2}, None)])
        [True, False, True]
        >>> qm.queue_stats("Q")
        {'seen': 3}
        >>> qm.close()
        """
        return self._rulebook.apply_stats_each(queue, batch, durable=durable)


    # -- encryption at rest ------------------------------------------------------------------
    def rotate_keys(self, queue: str | None = None, *, batch: int = 500) -> int:
        """Re-seal, under the current store key, every row of the encrypted queues (or
        of ``queue``) sealed with another key; return how many rows were re-sealed.

        Works in batches of ``batch`` rows, each its own transaction, so the queues
        stay in use throughout; a crash leaves each row sealed under one key or the
        other (the row says which), and running it again finishes the job. A row
        that fails its integrity check is quarantined.
        """
        return self._sealer.rotate_keys(self._sink, queue, batch=batch)

    def quarantined(self) -> list[QuarantineEntry]:
        """Rows moved to the quarantine because they failed their integrity check."""
        return self._sealer.quarantined(self._db)

    def check(self, *, repair: bool = False) -> CheckReport:
        """Look for damage in the store (``edgeq check``): SQLite's integrity check, every
        message row's checksum in one streaming pass, queue counters, rule bindings,
        rule events, journal rows and the store's identity. ``repair=True`` then
        quarantines damaged rows (rules see them ``removed``, reason ``quarantined``),
        rebuilds indexes and recounts queues; ``report.repairs`` says what was done.
        See :mod:`edgeq.check.checker`.

        >>> import tempfile, os
        >>> from edgeq import Message, QueueManager
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> qm.define_queue("Q"); _ = qm.put("Q", Message(b"x"))
        >>> report = qm.check()
        >>> report.clean, report.checked
        (True, 1)
        >>> qm.close()
        """
        from edgeq.check.checker import StoreCheck  # an operator's tool: not paid for by every `import edgeq`

        checker = StoreCheck(self._db)
        return checker.repair(self._sink) if repair else checker.run()
    # -- remote administration (docs/admin.md) -----------------------------------------------
    def trust_admin_key(
        self, key_id: str, public_key: bytes | str | Ed25519PublicKey, *, actions: Sequence[str] = ("*",)
    ) -> AdminKey:
        """Trust operator key ``key_id`` (its Ed25519 public key: 32 raw bytes, or the PEM of a
        ``.pub`` file) to sign admin requests for ``actions`` (``"*"``: every action; see
        :data:`edgeq.admin.wire.ACTIONS`, :data:`~edgeq.admin.wire.INQUIRE_ACTIONS`). Trusting an id
        again replaces its key and actions.

        >>> import tempfile, os
        >>> from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
        >>> from edgeq import QueueManager
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> public = Ed25519PrivateKey.generate().public_key()
        >>> key = qm.trust_admin_key("ops", public, actions=["inquire-queue"])
        >>> [(k.key_id, k.actions) for k in qm.admin_keys()]
        [('ops', ('inquire-queue',))]
        >>> qm.close()
        """
        return self._admin().trust(key_id, public_key, actions)

    def untrust_admin_key(self, key_id: str) -> bool:
        """Stop trusting operator key ``key_id``; whether it was trusted. Requests it signed,
        and not yet run, are refused from now on."""
        return self._admin().untrust(key_id)

    def admin_keys(self) -> list[AdminKey]:
        """The operator keys this queue manager trusts, by id."""
        return self._admin().keys()

    def execute_admin(self, request: bytes, *, remaining_ms: int | None = None) -> AdminReply:
        """Check and run one admin request (the bytes of an :class:`~edgeq.admin.wire.AdminRequest`),
        at most once; return its reply (also remembered). Never raises for what the request holds:
        a malformed, unsigned, tampered, untrusted, forbidden, misrouted, replayed or expired
        request gets a failed reply and is not run; a request answered before gets the same
        reply again without running; an action that fails gets a failed reply with the reason.
        ``remaining_ms``: the lifetime the request had left when it arrived (its message's
        remaining expiry); None counts its signed lifetime from now. Its expiry is judged on
        this clock alone (:func:`edgeq.admin.executor.deadline_ms`).

        >>> import tempfile, os
        >>> from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
        >>> from edgeq import QueueManager
        >>> from edgeq.admin.wire import AdminRequest
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> key = Ed25519PrivateKey.generate(); _ = qm.trust_admin_key("ops", key.public_key())
        >>> req = AdminRequest.create("define-queue", "ORDERS", {"expiry_ms": 60000}, device="DEV1",
        ...                           reply_qmgr="HOME", created_ms=qm.now_ms(), key_id="ops").sign(key)
        >>> qm.execute_admin(req.to_bytes()).rc, qm.queue_attributes("ORDERS").expiry_ms
        ('success', 60000)
        >>> qm.execute_admin(req.to_bytes()).rc  # the same request again: remembered, not run twice
        'success'
        >>> qm.close()
        """
        return self._admin().execute(request, remaining_ms)

    def process_admin(self, *, limit: int = 100) -> list[AdminReply]:
        """Run up to ``limit`` requests waiting on the admin queue (``SYSTEM.ADMIN``), each as
        :meth:`execute_admin` does, put each reply on the request's reply queue (normally the
        remote queue ``SYSTEM.ADMIN.REPLY``) and then remove the request; return the replies.
        One run at a time per store (a lease; a run that finds another under way returns []).
        After a crash the next run takes the request again: it is answered from the remembered
        reply, and the reply is the same message (same uid) as any put before. Nothing to do
        without an admin queue. The sync agent calls this after each pull."""
        return self._admin().process(limit)

    def admin_history(self, *, limit: int = 100) -> list[AdminReply]:
        """The replies this queue manager remembers (run, refused, interrupted), newest first:
        the device's record of the admin requests it received, kept 31 days."""
        return self._admin().history(limit)

    def _admin(self) -> AdminExecutor:
        """The admin executor, built once, at first use: ``import edgeq`` does not pay for it."""
        if self._admin_executor is None:
            from edgeq.admin.executor import AdminExecutor

            self._admin_executor = AdminExecutor(self, self._db)
        return self._admin_executor
    # -- sync state, the journal, registered devices -----------------------------------------
    def sync_overview(self) -> SyncOverview:
        """Every remote and home-server queue with its backlog and refusals, and the state
        the sync agent recorded (what ``edgeq sync status`` shows)."""
        return self._transmitter.sync_overview()

    def journal_since(self, after_id: int = 0, limit: int = 10_000) -> list[JournalEntry]:
        """Journal entries with an id above ``after_id``, oldest first (at most ``limit``).

        >>> import tempfile, os
        >>> from edgeq import Message, QueueManager
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "h.db"), name="HOME", journal="server")
        >>> qm.define_queue("Q"); uid = qm.put("Q", Message(b"x"), confirm_id=1); qm.confirm_put("Q", uid)
        >>> [(e.kind, e.uid == str(uid)) for e in qm.journal_since()]
        [('accepted', True)]
        >>> qm.close()
        """
        return self._sink.journal_since(after_id, limit)

    def devices(self) -> list[DeviceRecord]:
        """The devices this queue manager has heard from, by name.

        >>> import tempfile, os
        >>> from edgeq import Message, QueueManager
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "h.db"), name="HOME")
        >>> qm.exchange.record_device("DEV1", clock_offset_ms=-12)
        >>> [(d.name, d.clock_offset_ms) for d in qm.devices()]
        [('DEV1', -12)]
        >>> qm.close()
        """
        return self._devices.devices()

    def register_device(self, name: str, public_key: bytes, *, queues: Sequence[str] | None = None) -> None:
        """Register a device for authenticated sync: its raw 32-byte Ed25519 public key,
        and the queues it may push to (None: any). Registering again re-keys it and
        lifts a revocation.

        >>> import tempfile, os
        >>> from edgeq import Message, QueueManager
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "h.db"), name="HOME")
        >>> qm.register_device("DEV1", bytes(32), queues=["ORDERS"]); qm.device("DEV1").queues
        ('ORDERS',)
        >>> qm.close()
        """
        self._devices.register_device(name, public_key, queues=queues)

    def revoke_device(self, name: str) -> None:
        """Revoke a device: the server refuses its requests from now on."""
        self._devices.revoke_device(name)

    def device(self, name: str) -> DeviceRecord | None:
        """What this queue manager knows of device ``name`` (None: nothing)."""
        return self._devices.device(name)

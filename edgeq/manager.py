"""The queue manager: local, remote and home-server queues in one SQLite file, with
MQe's expiry semantics. :class:`QueueManager` is a facade over the parts that do the
work; read its class docstring for the map."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from types import TracebackType
from typing import Literal, Self

from edgeq.clock import ManualClock, system_clock
from edgeq.consume.waiting import Waker
from edgeq.crypto import CIPHERS, StoreKeys
from edgeq.errors import EdgeqError, InvalidArgument, InvalidType
from edgeq.events.bindings import RuleBook, attach_stored
from edgeq.events.dispatch import Dispatcher, Pending
from edgeq.events.sink import EventSink
from edgeq.exchange.holds import Holds
from edgeq.exchange.transmit import Transmitter
from edgeq.gets import Gets
from edgeq.manager_admin import AdminVerbs
from edgeq.manager_consumers import ConsumerVerbs
from edgeq.manager_deadletter import DeadLetterVerbs
from edgeq.manager_exchange import ExchangeVerbs
from edgeq.manager_queues import QueueVerbs
from edgeq.manager_remote_admin import RemoteAdminVerbs
from edgeq.message import Message
from edgeq.names import check_name
from edgeq.puts import Puts
from edgeq.queues.budget import OverflowTally, check_store_budget
from edgeq.queues.catalog import QueueCatalog
from edgeq.queues.checkpoints import ExpiryPolicy
from edgeq.results import ConfirmResult, PutResult
from edgeq.sealer import Sealer
from edgeq.store.connection import ConnectionFactory
from edgeq.store.damage import damaged
from edgeq.store.devices import DeviceRegistry
from edgeq.store.journal import JournalSide
from edgeq.store.meta import create_store, journal_setting, name_needed, open_identity
from edgeq.store.opening import check_foreign
from edgeq.store.rules import RuleTx
from edgeq.store.schema import SCHEMA_VERSION
from edgeq.types import Clock, Durability, Filter
from edgeq.uid import MessageUID

__all__ = ["QueueManager"]

log = logging.getLogger("edgeq")


class QueueManager(QueueVerbs, ExchangeVerbs, AdminVerbs, RemoteAdminVerbs, ConsumerVerbs, DeadLetterVerbs):
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
    ``edgeq sync`` still reach the server; ``journal="off"`` keeps it off. See :mod:`edgeq.store.journal`. A rule hook that raises on a durable event is retried up to
    ``rule_retry_limit`` times, backing off from ``rule_retry_base_ms``, then parked.
    ``max_store_bytes`` bounds the data plus fields all queues hold (the flash
    budget; None: no bound): a put that would exceed it makes room by its queue's
    ``on_full``, from that queue only, or raises :class:`~edgeq.errors.StoreFull`. It belongs to
    this object, not to the file: give every process that puts the same value
    (docs/storage.md, "Flash budget").

    One instance may be shared by threads; several processes may open the same
    file. Every message is delivered to exactly one getter.

    The queue manager is a facade: it builds its parts once and each method
    delegates to one of them (the store's SQL in :mod:`edgeq.store.tx`; the
    :class:`~edgeq.sealer.Sealer`; the :class:`~edgeq.events.sink.EventSink`, the one
    writer of rule events and journal rows; the :class:`~edgeq.queues.catalog.QueueCatalog`;
    the :class:`~edgeq.queues.checkpoints.ExpiryPolicy`; :class:`~edgeq.puts.Puts` and
    :class:`~edgeq.gets.Gets`; the :class:`~edgeq.exchange.transmit.Transmitter`; the
    :class:`~edgeq.events.bindings.RuleBook`; the :class:`~edgeq.store.devices.DeviceRegistry`).
    Its verbs are grouped by concern: messaging here; queues and their expiry check
    points in :class:`~edgeq.manager_queues.QueueVerbs`; transmission, settling, the
    journal, held puts and devices in :class:`~edgeq.manager_exchange.ExchangeVerbs`;
    rules, keys and damage in :class:`~edgeq.manager_admin.AdminVerbs`; operator keys and
    admin requests (remote administration) in :class:`~edgeq.manager_remote_admin.RemoteAdminVerbs`;
    the dead-letter queue in :class:`~edgeq.manager_deadletter.DeadLetterVerbs`.
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
        for label, value in (("rule_retry_limit", rule_retry_limit), ("rule_retry_base_ms", rule_retry_base_ms)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidArgument(f"{label} must be a positive int, not {value!r}")
        if remember_confirmed_ms is not None and (
            isinstance(remember_confirmed_ms, bool) or not isinstance(remember_confirmed_ms, int)
            or remember_confirmed_ms < 1
        ):
            raise InvalidArgument(f"remember_confirmed_ms must be a positive int or None, not {remember_confirmed_ms!r}")
        if journal not in (None, "server", "device", "off"):
            raise InvalidArgument(f"journal must be 'server', 'device', 'off' or None, not {journal!r}")
        if default_encryption is not None and default_encryption not in CIPHERS:
            raise InvalidArgument(f"default_encryption must be one of {', '.join(CIPHERS)} or None")
        if isinstance(keys, (str, Path)):
            keys = StoreKeys.load(keys)
        elif keys is not None and not isinstance(keys, StoreKeys):
            raise InvalidType("keys must be a StoreKeys ring or the path of a store key file")
        self._max_store_bytes = check_store_budget(max_store_bytes)
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
            self.name, self._origin = open_identity(self._db, self.path, name, self._clock)
            self._sealer = Sealer(self.name, keys, default_encryption)
            self._sealer.check_keys(self._db, self.path)
            rules = Dispatcher(
                self.name, self._db, self._clock, retry_limit=rule_retry_limit, retry_base_ms=rule_retry_base_ms,
                unseal=self._sealer.unseal_for_rules,
            )
            # The parts, each built once; every public method delegates to one of them.
            self._sink = EventSink(self.name, self._db, self._clock, rules, journal_setting(self._db, journal))
            self._expiry = ExpiryPolicy(self.name, self._sink)
            overflowed = OverflowTally()
            self._gets = Gets(self.name, self._sink, self._sealer, self._expiry, overflowed)
            self._transmitter = Transmitter(self.name, self._origin, self._sink, self._expiry, self._gets)
            self._puts = Puts(self.name, self._origin, self._sink, self._sealer, self._expiry, self._transmitter,
                              remember_confirmed_ms, max_store_bytes=self._max_store_bytes, overflowed=overflowed)
            self._catalog = QueueCatalog(self.name, self, self._sink, self._sealer, self._expiry,
                                         max_store_bytes=self._max_store_bytes, overflowed=overflowed)
            self._rulebook = RuleBook(self.name, self, self._sink)
            self._devices = DeviceRegistry(self._db, self._clock)
            self._holds = Holds(self.name, self._sink)
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
        return self._origin

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
        self._sink.dispatch([Pending("closed", queue, now) for queue in self._expiry.active() if rules.wants(queue)])
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
        sender settles it, see :meth:`settle`), ``expired``
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

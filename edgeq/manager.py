"""The queue manager: local, remote and home-server queues in one SQLite file, with
MQe's expiry semantics. :class:`QueueManager` is a facade over the parts that do the
work; read its class docstring for the map."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Self

from edgeq.bindings import BindingInfo, RuleBook, RuleSpec, attach_stored
from edgeq.budget import OverflowTally, check_store_budget
from edgeq.catalog import QueueCatalog
from edgeq.check import StoreCheck
from edgeq.checkpoints import ExpiryPolicy
from edgeq.checkreport import CheckReport
from edgeq.clock import system_clock
from edgeq.connection import ConnectionFactory, check_foreign
from edgeq.crypto import CIPHERS, StoreKeys
from edgeq.damage import damaged
from edgeq.devices import DeviceRecord, DeviceRegistry
from edgeq.dispatch import Dispatcher, Pending
from edgeq.errors import EdgeqError, InvalidArgument, InvalidType
from edgeq.events import EventSink
from edgeq.gets import Gets
from edgeq.holds import HeldGroup, HeldUsage, Holds
from edgeq.journal import JournalEntry, JournalSide, RemoteExpiryResult
from edgeq.message import Message
from edgeq.meta import create_store, journal_setting, name_needed, open_identity
from edgeq.names import check_name
from edgeq.puts import Puts
from edgeq.queues import QueueAttributes, QueueUsage, StoreUsage
from edgeq.results import ConfirmResult, PutResult, QuarantineEntry
from edgeq.rulestore import FailureRow, RuleTx
from edgeq.schema import SCHEMA_VERSION
from edgeq.sealer import Sealer
from edgeq.transmit import Refusal, SyncOverview, Transmitter
from edgeq.types import Clock, Durability, Filter, OnFull, Ordering
from edgeq.uid import MessageUID

if TYPE_CHECKING:
    from edgeq.rules import QueueRule

__all__ = ["QueueManager"]

log = logging.getLogger("edgeq")


class QueueManager:
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
    ``max_store_bytes`` bounds the data plus fields all queues hold (the flash
    budget; None: no bound): a put that would exceed it makes room by its queue's
    ``on_full``, from that queue only, or raises :class:`~edgeq.errors.StoreFull`. It belongs to
    this object, not to the file: give every process that puts the same value
    (docs/storage.md, "Flash budget").

    One instance may be shared by threads; several processes may open the same
    file. Every message is delivered to exactly one getter.

    The queue manager is a facade: it builds its parts once and each method
    delegates to one of them (the store's SQL in :mod:`edgeq.store`; the
    :class:`~edgeq.sealer.Sealer`; the :class:`~edgeq.events.EventSink`, the one
    writer of rule events and journal rows; the :class:`~edgeq.catalog.QueueCatalog`;
    the :class:`~edgeq.checkpoints.ExpiryPolicy`; :class:`~edgeq.puts.Puts` and
    :class:`~edgeq.gets.Gets`; the :class:`~edgeq.transmit.Transmitter`; the
    :class:`~edgeq.bindings.RuleBook`; the :class:`~edgeq.devices.DeviceRegistry`).
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
        # Nothing is written before the file is recognised, and a new store is made
        # whole or not at all: a failed open leaves no file behind (edgeq.meta).
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
            self._gets = Gets(self.name, self._sink, self._sealer, self._expiry)
            self._transmitter = Transmitter(self.name, self._origin, self._sink, self._expiry, self._gets)
            overflowed = OverflowTally()
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
        """``"server"``, ``"device"`` or None: what this store journals (see :mod:`edgeq.journal`)."""
        return self._sink.journal

    def now_ms(self) -> int:
        """The current time by this queue manager's clock (epoch ms): what expiry is judged by."""
        return self._clock()

    def close(self) -> None:
        """Tell rules (``on_closed``), stop the expiry sweeper and close the store. Safe to call twice."""
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
    ) -> None:
        """Define a local queue; raise :class:`QueueExists` if it is defined already.

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

        >>> import tempfile, os
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> qm.define_queue("ALERTS", expiry_ms=30_000, ordering="fifo")
        >>> qm.queue_attributes("ALERTS").ordering
        'fifo'
        >>> qm.close()
        """
        self._catalog.define_queue(
            name, rules, encryption, expiry_ms=expiry_ms, cap_expiry_ms=cap_expiry_ms, max_depth=max_depth,
            max_message_bytes=max_message_bytes, default_priority=default_priority, ordering=ordering,
            depth_threshold=depth_threshold, max_bytes=max_bytes, on_full=on_full,
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
        may refuse a message before it is given up (reason ``"refused"``; None: the
        sync agent's default).

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
            default_priority=default_priority, rules=rules, encryption=encryption, depth_threshold=depth_threshold,
            max_bytes=max_bytes, on_full=on_full, refusal_limit=refusal_limit,
        )

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
        self._catalog.define_home_server_queue(name, server=server, **attributes)

    def alter_queue(self, name: str, **attributes: Any) -> QueueAttributes:
        """Change some of a queue's attributes (same keywords as :meth:`define_queue`).

        A new ``expiry_ms`` applies at once to messages already on the queue that
        have no expiry of their own; a new ``cap_expiry_ms`` only to new puts; a new
        ``ordering`` re-orders the messages there; ``rules=[...]`` replaces the
        persisted rule bindings; a lower ``max_depth`` or ``max_bytes`` takes effect at
        the next put (which makes room by ``on_full``, or is refused); ``refusal_limit``
        (remote queues only) as for :meth:`define_remote_queue`. Returns the new
        attributes.

        >>> import tempfile, os
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
        check point); any other message left raises :class:`QueueNotEmpty`."""
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
        got = self._gets.get_many(queue, 1, confirm_id=confirm_id, filter=filter)
        return got[0] if got else None

    def get_many(
        self, queue: str, count: int, *, confirm_id: int | None = None, filter: Filter | None = None
    ) -> list[Message]:
        """Take up to ``count`` messages in one transaction (see :meth:`get`)."""
        return self._gets.get_many(queue, count, confirm_id=confirm_id, filter=filter)

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

    def undo(self, queue: str, confirm_id: int) -> int:
        """Undo whatever ``confirm_id`` locked: an assured get's messages become visible
        again (``backout_count`` + 1); an assured put's locked copies are removed.
        Returns how many messages it undid."""
        return self._gets.undo(queue, confirm_id)

    def delete_message(self, queue: str, uid: MessageUID | str) -> None:
        """Delete one message by uid, whatever its state (rules see reason ``deleted``;
        an expired one is discarded as expired, ``where="get"``)."""
        self._gets.delete_message(queue, uid)

    def release_locks(self, queue: str) -> int:
        """Undo every assured-get lock on a queue (its getter is gone); return how many.

        Each released message is visible again with ``backout_count`` + 1.
        """
        return self._gets.release_locks(queue)

    # -- transmission and settling -----------------------------------------------------------
    def set_transmitter(self, transmitter: Callable[[str], None] | None) -> None:
        """Register what pushes a sync-mode remote queue inside ``put`` (the sync agent
        does this): ``transmitter(queue_name)`` must deliver the queue now or raise."""
        self._transmitter.set_transmitter(transmitter)

    def next_for_transmission(self, queue: str, limit: int) -> list[Message]:
        """The next ``limit`` messages to transmit from a remote queue, in get order,
        without removing or locking them. Expired ones met first are discarded
        (rules see ``where="get"``): an expired message is never transmitted."""
        return self._transmitter.next_for_transmission(queue, limit)

    def transmitted(self, queue: str, uids: Sequence[MessageUID | str]) -> int:
        """Delete local copies the target has confirmed, in one transaction (rules see
        reason ``transmitted``); uids no longer here are skipped. Returns how many."""
        return self._transmitter.transmitted(queue, uids)

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
        return self._transmitter.settled_below()

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
        return self._transmitter.settle(origin, below)

    def settle_queue(self, queue: str, held: Mapping[str, int]) -> int:
        """The sender of ``queue``'s messages (a home server, for a home-server queue)
        still holds, per origin, nothing below ``held[origin]``, and nothing of an origin
        it does not name (its :meth:`held_low_water`): forget the rest of the confirmed
        uids this queue remembers; those origins are no longer forgotten by age.
        Returns how many were forgotten."""
        return self._transmitter.settle_queue(queue, held)

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
        return self._transmitter.held_low_water(queue)

    def remembered_count(self, origin: str | None = None) -> int:
        """How many confirmed uids this queue manager remembers to recognise late
        duplicates (of ``origin`` only, if given): bounded by what senders still hold."""
        return self._transmitter.remembered_count(origin)

    def refused(self, queue: str, refusals: Sequence[tuple[MessageUID | str, str]]) -> list[Refusal]:
        """The target of remote queue ``queue`` refused these ``(uid, reason)``: count one
        refusal each and give up those refused ``refusal_limit`` times (default
        ``edgeq.transmit.DEFAULT_REFUSAL_LIMIT``), removed with reason ``refused``
        (a bound ``dead-letter`` rule keeps a copy). The sync agent calls it.

        >>> import tempfile, os
        >>> from edgeq import Message, QueueManager
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> qm.define_remote_queue("ORDERS", target_qmgr="HOME")
        >>> uid = qm.put("ORDERS", Message(b"x"))
        >>> [(r.count, r.given_up) for r in qm.refused("ORDERS", [(uid, "no-queue")])]
        [(1, False)]
        >>> qm.close()
        """
        return self._transmitter.refused(queue, refusals)

    def sync_overview(self) -> SyncOverview:
        """Every remote and home-server queue with its backlog and refusals, and the state
        the sync agent recorded (what ``edgeq sync status`` shows)."""
        return self._transmitter.sync_overview()

    def record_sync_state(self, states: Mapping[str, Mapping[str, Any] | None]) -> None:
        """Keep the sync agent's state per queue (``""``: its own) in the store, as JSON."""
        self._transmitter.record_sync_state(states)

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

    def apply_stats(self, queue: str, increments: Mapping[str, int], *, event_id: int | None = None) -> bool:
        """Add to a queue's counters (for rules). With the ``event_id`` of a durable event
        the increment is applied once, however often the event is delivered; returns
        whether it was applied."""
        return self._rulebook.apply_stats(queue, increments, event_id=event_id)

    # -- the journal -------------------------------------------------------------------------
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

    def journal_trim(self, up_to_id: int) -> int:
        """Delete journal entries up to ``up_to_id`` (a device, once the server has them)."""
        return self._sink.journal_trim(up_to_id)

    def journal_remote_expiries(
        self, device: str, entries: Sequence[JournalEntry], *, clock_offset_ms: int = 0
    ) -> int:
        """Record expiries a device reports (from its own journal): side ``device``,
        times rebased to this clock by ``clock_offset_ms`` (device minus server). A
        report received twice is kept once. Returns how many entries were new
        (:meth:`journal_remote_expiries_each` answers each entry, and refuses
        foreign ones)."""
        return self._sink.remote_expiries(device, entries, clock_offset_ms)

    def journal_remote_expiries_each(
        self, device: str, entries: Sequence[JournalEntry], *, clock_offset_ms: int = 0
    ) -> list[RemoteExpiryResult]:
        """Record expiries a device reports, answering each entry (in order) instead of
        counting: ``recorded`` (new), ``already`` (kept before: a report received twice
        is kept once) or ``refused`` with the reason (not an expiry, or **foreign**: not
        the device's own message, nor one it pulled from a queue this server holds for
        it, ``<device>.<queue>``). Refusals never stop the rest. Times are rebased as in
        :meth:`journal_remote_expiries`.

        >>> import tempfile, os
        >>> from edgeq import QueueManager
        >>> from edgeq.journal import JournalEntry
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "h.db"), name="HOME", journal="server")
        >>> own = JournalEntry(0, "expired", "device", 5, "ORDERS", "DEV1.42", "DEV1", check_point="get")
        >>> pulled = JournalEntry(0, "expired", "device", 5, "DEV1.INBOX", "HOME.7", "HOME", check_point="get")
        >>> foreign = JournalEntry(0, "expired", "device", 5, "ORDERS", "DEV2.9", "DEV2", check_point="get")
        >>> [r.status for r in qm.journal_remote_expiries_each("DEV1", [own, pulled, foreign, own])]
        ['recorded', 'recorded', 'refused', 'already']
        >>> qm.close()
        """
        return self._sink.remote_expiries_each(device, entries, clock_offset_ms)

    # -- held puts (a home server's) ---------------------------------------------------------
    def held_puts(self, sender: str | None = None, *, older_than_ms: int | None = None) -> list[HeldGroup]:
        """Assured puts stored locked and not confirmed (of queue manager ``sender``, any
        incarnation; held at least ``older_than_ms``), summed by sender and queue."""
        return self._holds.held(sender, older_than_ms=older_than_ms)

    def held_usage(
        self, sender: str, *, queue: str | None = None, uids: Sequence[MessageUID | str] | None = None
    ) -> HeldUsage:
        """What ``sender`` holds put-locked here (with ``queue`` and ``uids``: only those uids there)."""
        return self._holds.usage(sender, queue=queue, uids=uids)

    def undo_held_puts(self, sender: str | None = None, *, older_than_ms: int = 0) -> int:
        """Undo the held puts (of ``sender``) held ``older_than_ms`` or longer, as
        :meth:`undo` does (rules see reason ``deleted``; a resend is stored afresh)."""
        return self._holds.undo(sender, older_than_ms=older_than_ms)

    # -- devices (a home server's) -----------------------------------------------------------
    def record_device(
        self, name: str, *, clock_offset_ms: int | None = None, agent: str | None = None
    ) -> None:
        """Note that device ``name`` was heard from now (and, at a hello, its clock
        offset: device clock minus ours, and its agent string)."""
        self._devices.record_device(name, clock_offset_ms=clock_offset_ms, agent=agent)

    def devices(self) -> list[DeviceRecord]:
        """The devices this queue manager has heard from, by name.

        >>> import tempfile, os
        >>> from edgeq import Message, QueueManager
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "h.db"), name="HOME")
        >>> qm.record_device("DEV1", clock_offset_ms=-12); [(d.name, d.clock_offset_ms) for d in qm.devices()]
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
        See :mod:`edgeq.check`.

        >>> import tempfile, os
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> qm.define_queue("Q"); _ = qm.put("Q", Message(b"x"))
        >>> report = qm.check()
        >>> report.clean, report.checked
        (True, 1)
        >>> qm.close()
        """
        checker = StoreCheck(self._db)
        return checker.repair(self._sink) if repair else checker.run()

"""The queue manager: local queues in one SQLite file, with MQe's expiry semantics."""

from __future__ import annotations

import base64
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

from edgeq.bindings import BindingInfo, RuleSpec, attach_stored, build_bindings, check_specs
from edgeq.clock import system_clock
from edgeq.codec import decode_fields, encode_fields
from edgeq.connection import ConnectionFactory, check_foreign
from edgeq.crypto import CIPHERS, ENV_KEY_FILE, SEAL_OVERHEAD, IntegrityError, KeyMissing, StoreKeys
from edgeq.devices import DeviceRecord, DeviceTx
from edgeq.dispatch import Binding, Dispatcher, Pending
from edgeq.errors import (
    ConfirmIdNotFound,
    DeviceNotFound,
    DuplicateMessage,
    EdgeqError,
    InvalidArgument,
    InvalidType,
    MessageExpired,
    MessageNotFound,
    MessageTooLarge,
    NameMismatch,
    QueueExists,
    QueueFull,
    QueueNotEmpty,
    QueueNotFound,
    RemoteUnavailable,
    StoreError,
)
from edgeq.expiry import effective_deadline, own_deadline
from edgeq.journal import JournalEntry, JournalSide, JournalTx, entry_row
from edgeq.message import Message, check_fields
from edgeq.names import check_name
from edgeq.queues import QueueAttributes, check_attributes
from edgeq.results import ConfirmResult, PutResult, QuarantineEntry
from edgeq.rows import EXPIRY_KINDS, to_message
from edgeq.rulestore import FailureRow, RuleTx
from edgeq.schema import SCHEMA_VERSION, migrate
from edgeq.store import GET_LOCKED, PUT_LOCKED, READY, MessageRow, NewMessage, QueueRow, Tx
from edgeq.types import Clock, Durability, FieldValue, Filter, Ordering, RemovalReason, Where
from edgeq.uid import MessageUID

if TYPE_CHECKING:
    from apscheduler.schedulers.background import BackgroundScheduler

    from edgeq.rules import QueueRule
    from edgeq.rules.base import EventKind

__all__ = ["QueueManager"]

log = logging.getLogger("edgeq")

_MAX_CONFIRM_ID = 2**63 - 1
_DISCARD_BATCH = 1000  # expired rows per transaction when rules want copies
_PAGE = 256


def _check_confirm_id(confirm_id: object) -> int:
    if isinstance(confirm_id, bool) or not isinstance(confirm_id, int):
        raise InvalidType(f"confirm_id must be a positive int, not {confirm_id!r}")
    if not 0 < confirm_id <= _MAX_CONFIRM_ID:
        raise InvalidArgument(f"confirm_id must be a positive 64-bit int, not {confirm_id}")
    return int(confirm_id)


def _check_count(count: object) -> int:
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise InvalidArgument(f"count must be a positive int, not {count!r}")
    return int(count)


def _check_uid(uid: object) -> MessageUID:
    if isinstance(uid, str):
        return MessageUID.parse(uid)
    if not isinstance(uid, MessageUID):
        raise InvalidType(f"uid must be a MessageUID (or its string form), not {type(uid).__name__}")
    return uid


def _same(a: object, b: object) -> bool:
    # True == 1 in Python; a bool field only matches a bool filter value.
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


def _matches(row: MessageRow, wanted: Mapping[str, FieldValue]) -> bool:
    fields = decode_fields(row.fields)
    return all(name in fields and _same(fields[name], value) for name, value in wanted.items())


def _plain_size(row: MessageRow) -> int:
    """The size of a message's data, sealed or not."""
    return len(row.data) - (SEAL_OVERHEAD if row.key_id is not None else 0)


def _expired(row: MessageRow, now_ms: int) -> bool:
    return row.deadline is not None and row.deadline <= now_ms


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
    Confirmed assured puts are remembered for ``remember_confirmed_ms`` (a day
    by default; None: not at all), so a late duplicate of one is recognised even
    after the message was consumed. ``journal="server"`` keeps an append-only
    history of accepted, expired and delivered messages (``journal="device"``:
    only expiries, to report to the server; ``"off"``: none); the setting is
    stored, so later opens (``journal=None``) keep it. See :mod:`edgeq.journal`. A rule hook that raises on a durable event is retried up to
    ``rule_retry_limit`` times, backing off from ``rule_retry_base_ms``, then parked.

    One instance may be shared by threads; several processes may open the same
    file. Every message is delivered to exactly one getter.
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
    ) -> None:
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
        self._clock: Clock = clock or system_clock
        self._remember_ms = remember_confirmed_ms
        if journal not in (None, "server", "device", "off"):
            raise InvalidArgument(f"journal must be 'server', 'device', 'off' or None, not {journal!r}")
        self._journal: JournalSide | None = None
        self._transmitter: Callable[[str], None] | None = None
        if default_encryption is not None and default_encryption not in CIPHERS:
            raise InvalidArgument(f"default_encryption must be one of {', '.join(CIPHERS)} or None")
        self._default_encryption = default_encryption
        if isinstance(keys, (str, Path)):
            keys = StoreKeys.load(keys)
        elif keys is not None and not isinstance(keys, StoreKeys):
            raise InvalidType("keys must be a StoreKeys ring or the path of a store key file")
        self._keys: StoreKeys | None = keys if keys is not None else StoreKeys.from_env()
        self._active: set[str] = set()
        self._active_lock = threading.Lock()
        self._scheduler: BackgroundScheduler | None = None
        check_foreign(self.path)
        self._db = ConnectionFactory(self.path, durability=durability, timeout=timeout)
        try:
            self.name = self._open_store(name)
            self._journal = self._journal_setting(journal)
            self._check_keys()
            self._rules = Dispatcher(
                self.name, self._db, self._clock, retry_limit=rule_retry_limit, retry_base_ms=rule_retry_base_ms,
                unseal=self._unseal_for_rules,
            )
            # Plugins load here, explicitly, never at import time.
            with self._db.read() as conn:
                stored = RuleTx(conn).bindings()
            for queue, bindings in attach_stored(self, stored).items():
                self._rules.set_persisted(queue, bindings)
            self._rules.recover()
        except BaseException:
            self._db.close()
            raise

    def _open_store(self, name: str | None) -> str:
        conn = self._db.connection()
        (found,) = conn.execute("PRAGMA user_version").fetchone()
        if found > SCHEMA_VERSION:
            raise StoreError(
                f"{self.path} was written by a newer edgeq (schema {found}; this one knows "
                f"{SCHEMA_VERSION}): upgrade edgeq to open it"
            )
        migrate(conn)
        with self._db.write() as tx:
            row = tx.execute("SELECT value FROM edgeq_meta WHERE key = 'name'").fetchone()
            if row is None:
                if name is None:
                    raise InvalidArgument(
                        f"{self.path} is a new store: give the queue manager a name, "
                        f"e.g. QueueManager({str(self.path)!r}, name='DEV1')"
                    )
                tx.execute("INSERT INTO edgeq_meta (key, value) VALUES ('name', ?)", (name,))
                tx.execute(
                    "INSERT INTO edgeq_meta (key, value) VALUES ('created_ms', ?)", (str(self._clock()),)
                )
                return name
        stored = str(row[0])
        if name is not None and name != stored:
            raise NameMismatch(
                f"{self.path} belongs to queue manager {stored!r}, not {name!r}: "
                f"open it with name={stored!r} (or name=None), or use another file"
            )
        return stored

    def _journal_setting(self, journal: str | None) -> JournalSide | None:
        """The journal mode is a property of the store: given once, kept for every later open."""
        with self._db.write() as conn:
            if journal is not None:
                conn.execute("INSERT OR REPLACE INTO edgeq_meta (key, value) VALUES ('journal', ?)", (journal,))
                stored = journal
            else:
                row = conn.execute("SELECT value FROM edgeq_meta WHERE key = 'journal'").fetchone()
                stored = "off" if row is None else str(row[0])
        return "server" if stored == "server" else "device" if stored == "device" else None

    def _check_keys(self) -> None:
        """Refuse a key ring whose keys are not the ones this store was sealed with.

        The store keeps a check value per key id (never the key): a wrong key is
        caught here, not mistaken later for tampered rows.
        """
        if self._keys is None:
            return
        keys = self._keys
        with self._db.write() as conn:
            for key_id in keys.ids:
                row = conn.execute("SELECT value FROM edgeq_meta WHERE key = ?", (f"keycheck.{key_id}",)).fetchone()
                if row is None:
                    value = base64.b64encode(keys.check_value(key_id)).decode()
                    conn.execute("INSERT INTO edgeq_meta (key, value) VALUES (?, ?)", (f"keycheck.{key_id}", value))
                elif not keys.verify(key_id, base64.b64decode(row[0])):
                    raise StoreError(
                        f"{self.path}: store key {key_id!r} is not the key this store was encrypted with: "
                        "use the right key file (nothing was changed)"
                    )

    @property
    def journal_mode(self) -> JournalSide | None:
        """``"server"``, ``"device"`` or None: what this store journals (see :mod:`edgeq.journal`)."""
        return self._journal

    # -- lifecycle ------------------------------------------------------------------

    def close(self) -> None:
        """Tell rules (``on_closed``), stop the expiry sweeper and close the store. Safe to call twice."""
        self.stop_expiry_sweeper()
        if self._db.closed:
            return
        now = self._clock()
        with self._active_lock:
            active = sorted(self._active)
        self._rules.dispatch([Pending("closed", queue, now) for queue in active if self._rules.wants(queue)])
        with self._write():
            pass  # forgets the events delivered since the last write
        self._db.close()

    def __enter__(self) -> QueueManager:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"QueueManager({str(self.path)!r}, name={self.name!r})"

    def now_ms(self) -> int:
        """The current time by this queue manager's clock (epoch ms): what expiry is judged by."""
        return self._clock()

    @contextmanager
    def _write(self) -> Iterator[Tx]:
        with self._db.write() as conn:
            self._rules.flush(conn)
            yield Tx(conn)

    def _readable(self, tx: Tx, name: str) -> QueueRow:
        """The queue, if applications may get and browse it (not a remote queue)."""
        q = self._queue(tx, name)
        if q.kind == "remote":
            raise InvalidArgument(
                f"{name!r} is a remote queue: messages put there are transmitted to queue manager "
                f"{q.target_qmgr}; get them there (MQe: applications cannot get or browse a remote queue)"
            )
        return q

    def _queue(self, tx: Tx, name: str) -> QueueRow:
        row = tx.queue(name)
        if row is None:
            known = [q.name for q in tx.queues()]
            hint = f" (defined: {', '.join(known[:10])})" if known else " (none are defined)"
            raise QueueNotFound(
                f"no queue {name!r} on queue manager {self.name}{hint}: define it with define_queue({name!r})"
            )
        return row

    # -- rules ------------------------------------------------------------------------

    def add_rule(self, queue: str, rule: QueueRule) -> None:
        """Attach a rule instance to a queue, for the life of this queue manager object.

        Persisted rules, re-attached on every open, are bound by name with
        ``define_queue(..., rules=[...])`` instead.

        >>> from edgeq.rules import QueueRule
        >>> import tempfile, os
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> qm.define_queue("Q"); qm.add_rule("Q", QueueRule()); qm.close()
        """
        from edgeq.rules import QueueRule

        check_name(queue, "queue name")
        if not isinstance(rule, QueueRule):
            raise InvalidType(f"rule must be an edgeq.rules.QueueRule instance, not {type(rule).__name__}")
        with self._db.read() as conn:
            self._queue(Tx(conn), queue)
        rule.attach(self, queue)
        self._rules.add(queue, rule)

    def remove_rule(self, queue: str, rule: QueueRule) -> bool:
        """Detach a rule instance added with :meth:`add_rule`; return whether it was attached."""
        return self._rules.remove(queue, rule)

    def queue_bindings(self, queue: str) -> list[BindingInfo]:
        """The rules bound to a queue, in the order they run (persisted ones first).

        >>> import tempfile, os
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> qm.define_queue("Q", rules=["log"]); [b.name for b in qm.queue_bindings("Q")]
        ['log']
        >>> qm.close()
        """
        check_name(queue, "queue name")
        with self._db.read() as conn:
            self._queue(Tx(conn), queue)
        return [BindingInfo(b.name, dict(b.config or {}), b.persisted, b.error) for b in self._rules.of(queue)]

    def _bind(
        self, tx: Tx, queue: QueueRow, specs: list[tuple[str, dict[str, Any]]], rules: list[QueueRule]
    ) -> list[Binding]:
        """Store a queue's bindings (rules already built and validated) in ``tx``."""
        ids = RuleTx(tx.conn).replace_bindings(queue.id, specs)
        return [
            Binding(f"b{i}", name, rule, persisted=True, config=config)
            for i, (name, config), rule in zip(ids, specs, rules, strict=True)
        ]

    def rule_failures(self, *, parked: bool | None = None) -> list[FailureRow]:
        """Deliveries of durable events that raised: waiting for a retry, or parked.

        >>> import tempfile, os
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> qm.rule_failures()
        []
        >>> qm.close()
        """
        with self._db.read() as conn:
            return RuleTx(conn).failures(parked=parked)

    def retry_rule_failures(self, *, parked: bool = False, event_id: int | None = None) -> int:
        """Retry failed deliveries now, without waiting for their backoff; with
        ``parked=True`` parked ones get a fresh round of attempts first; with
        ``event_id`` only that event's. Returns how many deliveries succeeded.
        (Due retries also happen by themselves: on later operations, on the
        expiry sweeper's ticks, and when the store is opened.)"""
        if event_id is not None and (isinstance(event_id, bool) or not isinstance(event_id, int)):
            raise InvalidType(f"event_id must be an int, not {event_id!r}")
        if parked:
            with self._write() as tx:
                RuleTx(tx.conn).rearm(self._clock(), event_id)
        return self._rules.retry(force=True, event_id=event_id)

    def queue_stats(self, queue: str) -> dict[str, int]:
        """A queue's persistent counters (kept by the ``counters`` and ``dead-letter`` rules).

        >>> import tempfile, os
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> qm.define_queue("Q", rules=["counters"]); _ = qm.put("Q", Message(b"x")); qm.queue_stats("Q")
        {'added': 1}
        >>> qm.close()
        """
        check_name(queue, "queue name")
        with self._db.read() as conn:
            self._queue(Tx(conn), queue)
            return RuleTx(conn).stats(queue)

    def apply_stats(self, queue: str, increments: Mapping[str, int], *, event_id: int | None = None) -> bool:
        """Add to a queue's counters (for rules). With the ``event_id`` of a durable event
        the increment is applied once, however often the event is delivered; returns
        whether it was applied."""
        check_name(queue, "queue name")
        for counter, n in increments.items():
            if not isinstance(counter, str) or isinstance(n, bool) or not isinstance(n, int):
                raise InvalidType(f"increments map counter names to ints, not {counter!r}: {n!r}")
        with self._write() as tx:
            return RuleTx(tx.conn).apply_stats(queue, increments, event_id)

    def _events(
        self, queue: str, kind: EventKind, rows: Iterable[MessageRow], now_ms: int,
        *, where: Where | None = None, reason: RemovalReason | None = None,
    ) -> list[Pending]:
        """One event per row; empty (and no copies made) if the queue has no rules."""
        if not self._observed(queue):
            return []
        return [Pending(kind, queue, now_ms, row=row, where=where, reason=reason) for row in rows]

    def _observed(self, queue: str) -> bool:
        """Whether anything (rules, the journal) must see this queue's events."""
        return self._journal is not None or self._rules.wants(queue)

    def _record(self, tx: Tx, events: list[Pending]) -> None:
        """Make the events durable in the caller's transaction: rule events and journal entries."""
        self._rules.record(tx.conn, events)
        if self._journal is None:
            return
        rows = []
        for ev in events:
            row = ev.row
            if row is None:
                continue
            uid = f"{row.origin}.{row.stamp}"
            if ev.kind == "expired":
                rows.append(entry_row(
                    "expired", self._journal, ev.at_ms, ev.queue, uid, row.origin, check_point=ev.where,
                    size=_plain_size(row), created_ms=row.created_ms, arrived_ms=row.arrived_ms,
                ))
            elif ev.kind == "removed" and ev.reason in ("got", "confirmed") and self._journal == "server":
                rows.append(entry_row(
                    "delivered", "server", ev.at_ms, ev.queue, uid, row.origin, size=_plain_size(row),
                    created_ms=row.created_ms, arrived_ms=row.arrived_ms,
                ))
        if rows:
            JournalTx(tx.conn).add(rows)

    # -- queue definition ---------------------------------------------------------------

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

    def _cipher(self, encryption: str | None) -> str | None:
        cipher = encryption if encryption is not None else self._default_encryption
        if cipher is not None and cipher not in CIPHERS:
            raise InvalidArgument(f"encryption must be one of {', '.join(CIPHERS)} (or None), not {cipher!r}")
        if cipher is not None and self._keys is None:
            raise KeyMissing(
                "an encrypted queue needs a store key: make one with `edgeq keys new-store-key --out store.key` "
                f"and open the store with keys='store.key' (or ${ENV_KEY_FILE})"
            )
        return cipher

    def _define(
        self, name: str, attributes: dict[str, Any], rules: Sequence[RuleSpec] | None,
        kind: Mapping[str, str | None] | None = None,
    ) -> None:
        """Define a queue of any kind: validated attributes, bindings stored with it."""
        check_name(name, "queue name")
        attrs = check_attributes(attributes)
        specs = check_specs(rules) if rules is not None else []
        built = build_bindings(self, name, specs)  # validates every config before anything is stored
        with self._write() as tx:
            if tx.queue(name) is not None:
                raise QueueExists(
                    f"queue {name!r} is already defined on {self.name}: use alter_queue to change it"
                )
            tx.insert_queue(name, {**attrs, **(kind or {})}, self._clock())
            bound = self._bind(tx, self._queue(tx, name), specs, built) if specs else []
        if bound:
            self._rules.set_persisted(name, bound)

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

    def activate(self, name: str) -> int:
        """Activate a queue: discard every expired message on it, whatever its state.

        Happens by itself the first time a queue is used after the queue manager
        opens (MQe's "queue activated" check point). Returns how many it discarded.
        """
        check_name(name, "queue name")
        with self._active_lock:
            self._active.add(name)
        try:
            count = self._discard_expired(name, "activate")
        except BaseException:
            with self._active_lock:
                self._active.discard(name)
            raise
        if self._rules.wants(name):
            self._rules.dispatch([Pending("activated", name, self._clock())])
        return count

    def _touch(self, name: str) -> int:
        """Activate the queue on first reference (a set lookup afterwards); return how
        many expired messages activation discarded."""
        check_name(name, "queue name")
        return 0 if name in self._active else self.activate(name)

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
        if not self._observed(name):
            with self._write() as tx:
                return tx.delete_all(self._queue(tx, name).id)
        return self._remove_in_batches(name, lambda tx, q, now: tx.ids(q.id, _DISCARD_BATCH), "removed", reason="purged")

    def _remove_in_batches(
        self, name: str, select: Callable[[Tx, QueueRow, int], list[int]], kind: EventKind,
        *, where: Where | None = None, reason: RemovalReason | None = None,
    ) -> int:
        """Delete the rows ``select`` picks, a batch per transaction, until none are left.
        Each batch's events are recorded in its transaction and delivered after it."""
        now = self._clock()
        total = 0
        while True:
            with self._write() as tx:
                queue = self._queue(tx, name)
                rows = tx.delete(queue.id, select(tx, queue, now))
                events = self._events(name, kind, rows, now, where=where, reason=reason)
                self._record(tx, events)
            total += len(rows)
            self._rules.dispatch(events)
            if len(rows) < _DISCARD_BATCH:
                return total

    # -- expiry ---------------------------------------------------------------------------

    def _discard_expired(self, name: str, where: Where) -> int:
        """Discard every expired message of a queue, any state, at check point ``where``.

        Walks the deadline index only, so unexpired messages are never read.
        Without rules it is one DELETE; with rules it goes in batches, each
        batch's rules firing after its commit.
        """
        if not self._observed(name):
            with self._write() as tx:
                return tx.delete_expired(self._queue(tx, name).id, self._clock())
        return self._remove_in_batches(
            name, lambda tx, q, now: tx.expired_ids(q.id, now, _DISCARD_BATCH), "expired", where=where
        )

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

    def stop_expiry_sweeper(self) -> None:
        """Stop the background sweeper, waiting for a sweep in progress. No-op if none runs."""
        scheduler, self._scheduler = self._scheduler, None
        if scheduler is not None:
            scheduler.shutdown(wait=True)

    def _sweep_job(self) -> None:
        try:
            self.sweep_expired()
            self._rules.retry()  # also retries rule deliveries that are due on an idle queue
        except Exception:
            log.exception("periodic expiry sweep of %s failed", self.path)

    # -- put -----------------------------------------------------------------------------

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
            for offset, message in enumerate(messages):
                seq = first + offset
                uid = message.uid or MessageUID(self.name, seq)
                created = message.created_ms if message.uid is not None and message.created_ms else now
                priority = q.default_priority if message.priority is None else message.priority
                fields = encode_fields(message.fields)
                own = own_deadline(message.expiry, created)
                deadline = effective_deadline(own, now, q.expiry_ms, cap_at)
                row = NewMessage(
                    uid.origin, uid.stamp, READY if confirm_id is None else PUT_LOCKED, confirm_id,
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
                seen.add(uid)
                if deadline is not None and deadline <= now:
                    # MQe's "added" check point: never stored, rules still told.
                    events.extend(self._events(queue, "expired", [self._as_row(row)], now, where="add"))
                    results.append(PutResult(uid, "expired"))
                    continue
                if existing is not None:  # _refusal let it through: a resend over an unconfirmed copy
                    tx.delete(q.id, [existing.id])
                    depth -= 1
                depth += 1
                rows.append(self._seal(q, row))
                results.append(PutResult(uid, "replaced" if existing is not None else "stored"))
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
            if existing is not None and not (message.resend and existing.state == PUT_LOCKED):
                error = self._duplicate(q.name, uid, existing, message.resend)
                if existing.state == PUT_LOCKED:  # held but not confirmed: confirm it, or resend
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
        if existing.state == PUT_LOCKED:
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

    # -- get and browse -----------------------------------------------------------------

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
        self._touch(queue)
        now = self._clock()
        with self._write() as tx:
            q = self._readable(tx, queue)
            # Common case: nothing expired anywhere on the queue, so one page of
            # exactly `count` rows is all a get reads.
            page = count if wanted is None and not tx.has_expired(q.id, now) else max(count, _PAGE)
            chosen, plain, expired, error = self._scan(tx, q, page, count, now, wanted)
            events = self._events(queue, "expired", tx.delete(q.id, expired), now, where="get")
            if confirm_id is None:
                tx.delete(q.id, [row.id for row in chosen])
                events += self._events(queue, "removed", chosen, now, reason="got")
            else:
                tx.lock_for_get([row.id for row in chosen], confirm_id)
            if error is not None:
                events += self._quarantine(tx, q, error[0], now)
            self._record(tx, events)
        self._rules.dispatch(events)
        if error is not None:
            raise error[1]
        return [to_message(row, now) for row in plain]

    def _scan(
        self, tx: Tx, q: QueueRow, page: int, count: int, now: int, wanted: Mapping[str, FieldValue] | None
    ) -> tuple[list[MessageRow], list[MessageRow], list[int], tuple[MessageRow, IntegrityError] | None]:
        """Walk ready messages in get order: the first ``count`` live matches (as
        stored, and unsealed), the ids of the expired matches met before them (to
        discard), and a row that failed its integrity check, if one stopped the walk
        before anything was chosen (to quarantine; a later call meets it otherwise)."""
        chosen: list[MessageRow] = []
        plain: list[MessageRow] = []
        expired: list[int] = []
        for rows in tx.ready(q.id, page):
            for row in rows:
                if wanted is None and _expired(row, now):
                    expired.append(row.id)  # no need to unseal what is discarded unread
                    continue
                try:
                    opened = self._unseal(q.name, row)
                except IntegrityError as exc:
                    return chosen, plain, expired, None if chosen else (row, exc)
                if wanted is not None and not _matches(opened, wanted):
                    continue
                if _expired(row, now):
                    expired.append(row.id)
                    continue
                chosen.append(row)
                plain.append(opened)
                if len(chosen) == count:
                    return chosen, plain, expired, None
        return chosen, plain, expired, None

    def _unseal(self, queue: str, row: MessageRow) -> MessageRow:
        """The row with its data and fields in clear (as stored, if it is not sealed)."""
        if row.key_id is None:
            return row
        if self._keys is None:
            raise KeyMissing(
                f"queue {queue!r} is encrypted: open the store with its key file "
                f"(QueueManager(..., keys='store.key'), or ${ENV_KEY_FILE})"
            )
        uid = f"{row.origin}.{row.stamp}"
        data = self._keys.open(row.key_id, row.data, self.name, queue, uid, "data")
        fields = None if row.fields is None else self._keys.open(row.key_id, row.fields, self.name, queue, uid, "fields")
        return row._replace(data=data, fields=fields, key_id=None)

    def _unseal_for_rules(self, queue: str, row: MessageRow) -> MessageRow:
        """For a rule's copy: unsealed if possible, else the row without its data and fields."""
        try:
            return self._unseal(queue, row)
        except StoreError as exc:
            log.warning("a rule gets message %s.%s of queue %s without its data: %s", row.origin, row.stamp, queue, exc)
            return row._replace(data=b"", fields=None, key_id=None)

    def _seal(self, q: QueueRow, row: NewMessage) -> NewMessage:
        if q.encryption is None:
            return row
        key_id, data, fields = self._seal_parts(q.name, row.origin, row.stamp, row.data, row.fields)
        return row._replace(data=data, fields=fields, key_id=key_id)

    def _seal_parts(
        self, queue: str, origin: str, stamp: int, data: bytes, fields: bytes | None
    ) -> tuple[str, bytes, bytes | None]:
        """(key id, sealed data, sealed fields) under the current store key."""
        if self._keys is None:
            raise KeyMissing(
                f"queue {queue!r} is encrypted: open the store with its key file to put messages on it "
                f"(QueueManager(..., keys='store.key'), or ${ENV_KEY_FILE})"
            )
        uid = f"{origin}.{stamp}"
        key_id, sealed = self._keys.seal(data, self.name, queue, uid, "data")
        sealed_fields = None if fields is None else self._keys.seal(fields, self.name, queue, uid, "fields")[1]
        return key_id, sealed, sealed_fields

    def _quarantine(self, tx: Tx, q: QueueRow, row: MessageRow, now: int) -> list[Pending]:
        """Move a row that failed its integrity check to the quarantine; rules see it removed."""
        tx.quarantine(q.name, q.id, row, "integrity check failed", now)
        log.error("message %s.%s on queue %s failed its integrity check: quarantined", row.origin, row.stamp, q.name)
        return self._events(q.name, "removed", [row._replace(data=b"", fields=None, key_id=None)], now,
                            reason="quarantined")

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

    # -- confirm and undo -----------------------------------------------------------------

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
                elif row.state != PUT_LOCKED or row.id in ready_ids:
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
            if row is None or row.state != GET_LOCKED:
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
                if row is None or row.state != GET_LOCKED or row.id in taken:
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
            tx.back_out([r.id for r in rows if r.state == GET_LOCKED])
            removed = tx.delete(q.id, [r.id for r in rows if r.state == PUT_LOCKED])
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

    # -- remote and home-server queues (the sync layer builds on these) ------------------------

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

    def _queues_of_kind(self, kind: str) -> list[QueueAttributes]:
        with self._db.read() as conn:
            return [QueueAttributes.from_row(q) for q in Tx(conn).queues() if q.kind == kind]

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
        limit = _check_count(limit)
        self._touch(queue)
        now = self._clock()
        with self._write() as tx:
            q = self._queue(tx, queue)
            if q.kind != "remote":
                raise InvalidArgument(f"{queue!r} is not a remote queue: nothing to transmit")
            _, plain, expired, error = self._scan(tx, q, max(limit, _PAGE), limit, now, None)
            events = self._events(queue, "expired", tx.delete(q.id, expired), now, where="get")
            if error is not None:
                events += self._quarantine(tx, q, error[0], now)
            self._record(tx, events)
        self._rules.dispatch(events)
        if error is not None:
            raise error[1]
        return [to_message(row, now) for row in plain]

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

    # -- the journal --------------------------------------------------------------------------

    def journal_since(self, after_id: int = 0, limit: int = 10_000) -> list[JournalEntry]:
        """Journal entries with an id above ``after_id``, oldest first (at most ``limit``).

        >>> import tempfile, os
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "h.db"), name="HOME", journal="server")
        >>> qm.define_queue("Q"); uid = qm.put("Q", Message(b"x"), confirm_id=1); qm.confirm_put("Q", uid)
        >>> [(e.kind, e.uid == str(uid)) for e in qm.journal_since()]
        [('accepted', True)]
        >>> qm.close()
        """
        if isinstance(after_id, bool) or not isinstance(after_id, int) or after_id < 0:
            raise InvalidArgument(f"after_id must be a non-negative int, not {after_id!r}")
        limit = _check_count(limit)
        with self._db.read() as conn:
            return JournalTx(conn).since(after_id, limit)

    def journal_trim(self, up_to_id: int) -> int:
        """Delete journal entries up to ``up_to_id`` (a device, once the server has them)."""
        if isinstance(up_to_id, bool) or not isinstance(up_to_id, int):
            raise InvalidType(f"up_to_id must be an int, not {up_to_id!r}")
        with self._write() as tx:
            return JournalTx(tx.conn).trim(up_to_id)

    def journal_remote_expiries(
        self, device: str, entries: Sequence[JournalEntry], *, clock_offset_ms: int = 0
    ) -> int:
        """Record expiries a device reports (from its own journal): side ``device``,
        times rebased to this clock by ``clock_offset_ms`` (device minus server). A
        report received twice is kept once. Returns how many entries were new."""
        check_name(device, "device name")
        if self._journal != "server":
            raise InvalidArgument("journal_remote_expiries needs QueueManager(..., journal='server')")
        rows = [
            entry_row(
                "expired", "device", e.at_ms - clock_offset_ms, e.queue, e.uid, e.origin,
                check_point=e.check_point, size=e.size, created_ms=e.created_ms,
                arrived_ms=None if e.arrived_ms is None else e.arrived_ms - clock_offset_ms,
                clock_offset_ms=clock_offset_ms, device=device,
            )
            for e in entries if e.kind == "expired"
        ]
        with self._write() as tx:
            before = tx.conn.total_changes
            JournalTx(tx.conn).add(rows)
            return tx.conn.total_changes - before

    # -- devices (a home server's view of them) ------------------------------------------------

    def record_device(
        self, name: str, *, clock_offset_ms: int | None = None, agent: str | None = None
    ) -> None:
        """Note that device ``name`` was heard from now (and, at a hello, its clock
        offset: device clock minus ours, and its agent string)."""
        check_name(name, "device name")
        if clock_offset_ms is not None and (isinstance(clock_offset_ms, bool) or not isinstance(clock_offset_ms, int)):
            raise InvalidType(f"clock_offset_ms must be an int, not {clock_offset_ms!r}")
        with self._write() as tx:
            DeviceTx(tx.conn).seen(name, self._clock(), clock_offset_ms, agent)

    def devices(self) -> list[DeviceRecord]:
        """The devices this queue manager has heard from, by name.

        >>> import tempfile, os
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "h.db"), name="HOME")
        >>> qm.record_device("DEV1", clock_offset_ms=-12); [(d.name, d.clock_offset_ms) for d in qm.devices()]
        [('DEV1', -12)]
        >>> qm.close()
        """
        with self._db.read() as conn:
            return DeviceTx(conn).all()

    def register_device(self, name: str, public_key: bytes, *, queues: Sequence[str] | None = None) -> None:
        """Register a device for authenticated sync: its raw 32-byte Ed25519 public key,
        and the queues it may push to (None: any). Registering again re-keys it and
        lifts a revocation.

        >>> import tempfile, os
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "h.db"), name="HOME")
        >>> qm.register_device("DEV1", bytes(32), queues=["ORDERS"]); qm.device("DEV1").queues
        ('ORDERS',)
        >>> qm.close()
        """
        check_name(name, "device name")
        if "." in name:
            raise InvalidArgument(
                f"device name {name!r} must not contain '.': the home server holds a device's messages on "
                "queues named <device>.<queue>, so a dot would let one device read another's"
            )
        if not isinstance(public_key, bytes) or len(public_key) != 32:
            raise InvalidArgument(
                "public_key must be the 32 raw bytes of an Ed25519 public key "
                "(make a pair with `edgeq keys new`)"
            )
        if queues is not None:
            if isinstance(queues, str) or not isinstance(queues, Sequence):
                raise InvalidType("queues must be a list of queue names, or None for any")
            queues = [check_name(q, "queue name") for q in queues]
        with self._write() as tx:
            DeviceTx(tx.conn).register(name, public_key, queues, self._clock())

    def revoke_device(self, name: str) -> None:
        """Revoke a device: the server refuses its requests from now on."""
        check_name(name, "device name")
        with self._write() as tx:
            devices = DeviceTx(tx.conn)
            if devices.get(name) is None:
                raise DeviceNotFound(f"no device {name!r} is known here: see `edgeq server devices list`")
            devices.revoke(name, self._clock())

    def device(self, name: str) -> DeviceRecord | None:
        """What this queue manager knows of device ``name`` (None: nothing)."""
        check_name(name, "device name")
        with self._db.read() as conn:
            return DeviceTx(conn).get(name)

    # -- encryption at rest ---------------------------------------------------------------------

    def rotate_keys(self, queue: str | None = None, *, batch: int = 500) -> int:
        """Re-seal, under the current store key, every row of the encrypted queues (or
        of ``queue``) sealed with another key; return how many rows were re-sealed.

        Works in batches of ``batch`` rows, each its own transaction, so the queues
        stay in use throughout; a crash leaves each row sealed under one key or the
        other (the row says which), and running it again finishes the job. A row
        that fails its integrity check is quarantined.
        """
        batch = _check_count(batch)
        if self._keys is None:
            raise KeyMissing(f"rotating needs the store key ring: open the store with keys=... (or ${ENV_KEY_FILE})")
        keys = self._keys
        names = [queue] if queue is not None else [q.name for q in self._encrypted_queues()]
        total = 0
        for name in names:
            while True:
                now = self._clock()
                with self._write() as tx:
                    q = self._queue(tx, name)
                    rows = tx.stale_sealed(q.id, keys.current, batch) if q.encryption else []
                    resealed, events = [], []
                    for row in rows:
                        try:
                            opened = self._unseal(name, row)
                        except IntegrityError:
                            events += self._quarantine(tx, q, row, now)
                            continue
                        key_id, data, fields = self._seal_parts(name, row.origin, row.stamp, opened.data, opened.fields)
                        resealed.append((fields, data, key_id, row.id))
                    tx.reseal(resealed)
                    self._record(tx, events)
                self._rules.dispatch(events)
                total += len(resealed)
                if len(rows) < batch:
                    break
        return total

    def _encrypted_queues(self) -> list[QueueRow]:
        with self._db.read() as conn:
            return [q for q in Tx(conn).queues() if q.encryption]

    def quarantined(self) -> list[QuarantineEntry]:
        """Rows moved to the quarantine because they failed their integrity check."""
        with self._db.read() as conn:
            return [QuarantineEntry(*row) for row in Tx(conn).quarantined()]

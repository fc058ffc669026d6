"""What every part of the queue manager shares: opening the store, transactions,
events owed to rules and the journal, sealing and unsealing, expiry discards.

:class:`edgeq.QueueManager` is assembled from this base and the mixins in
``edgeq.qm_rules``, ``edgeq.qm_remote`` and ``edgeq.qm_admin``; use it, not these.
"""

from __future__ import annotations

import base64
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Self, cast

from edgeq.bindings import RuleSpec, attach_stored, build_bindings, check_specs
from edgeq.clock import system_clock
from edgeq.codec import decode_fields
from edgeq.connection import ConnectionFactory, check_foreign
from edgeq.crypto import CIPHERS, ENV_KEY_FILE, SEAL_OVERHEAD, IntegrityError, KeyMissing, StoreKeys
from edgeq.dispatch import Binding, Dispatcher, Pending
from edgeq.errors import (
    InvalidArgument,
    InvalidType,
    NameMismatch,
    QueueExists,
    QueueNotFound,
    StoreError,
)
from edgeq.journal import JournalSide, JournalTx, entry_row
from edgeq.message import Message
from edgeq.names import INCARNATION_SEPARATOR, check_name, check_origin
from edgeq.queues import QueueAttributes, check_attributes
from edgeq.rows import to_message
from edgeq.rulestore import RuleTx
from edgeq.schema import SCHEMA_VERSION, migrate
from edgeq.store import MessageRow, NewMessage, QueueRow, Tx
from edgeq.types import MAX_CONFIRM_ID, Clock, Durability, EventKind, FieldValue, RemovalReason, Where
from edgeq.uid import MessageUID, new_incarnation

if TYPE_CHECKING:
    from apscheduler.schedulers.background import BackgroundScheduler

    from edgeq.manager import QueueManager
    from edgeq.rules import QueueRule

__all__ = ["QueueManagerBase"]

log = logging.getLogger("edgeq")

_DISCARD_BATCH = 1000  # expired rows per transaction when rules want copies
_PAGE = 256


def _check_confirm_id(confirm_id: object) -> int:
    if isinstance(confirm_id, bool) or not isinstance(confirm_id, int):
        raise InvalidType(f"confirm_id must be a positive int, not {confirm_id!r}")
    if not 0 < confirm_id <= MAX_CONFIRM_ID:
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


class QueueManagerBase:
    """The state and internals the queue manager's parts share (not used on its own)."""

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
            for queue, bindings in attach_stored(cast("QueueManager", self), stored).items():
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
            meta = dict(tx.execute("SELECT key, value FROM edgeq_meta WHERE key IN ('name', 'incarnation')"))
            stored = meta.get("name")
            if stored is None:
                if name is None:
                    raise InvalidArgument(
                        f"{self.path} is a new store: give the queue manager a name, "
                        f"e.g. QueueManager({str(self.path)!r}, name='DEV1')"
                    )
                tx.execute("INSERT INTO edgeq_meta (key, value) VALUES ('name', ?)", (name,))
                tx.execute(
                    "INSERT INTO edgeq_meta (key, value) VALUES ('created_ms', ?)", (str(self._clock()),)
                )
                stored = name
            if "incarnation" not in meta:
                # Drawn once per store file (a store made by an older edgeq gets one on
                # first open): every uid it issues from now on carries it.
                meta["incarnation"] = new_incarnation()
                tx.execute("INSERT INTO edgeq_meta (key, value) VALUES ('incarnation', ?)", (meta["incarnation"],))
        if name is not None and name != stored:
            raise NameMismatch(
                f"{self.path} belongs to queue manager {stored!r}, not {name!r}: "
                f"open it with name={stored!r} (or name=None), or use another file"
            )
        self._origin = check_origin(f"{stored}{INCARNATION_SEPARATOR}{meta['incarnation']}", f"{self.path}: origin")
        return str(stored)

    def _journal_setting(self, journal: str | None) -> JournalSide | None:
        """The journal mode is a property of the store: given once, kept for every later open.

        A store never given one journals its device-side expiries (``"device"``) as
        soon as it has a remote or home-server queue: they are reported at the next
        sync, whoever opened the store first (see :meth:`_sync_queue_defined`).
        """
        with self._db.write() as conn:
            if journal is not None:
                conn.execute("INSERT OR REPLACE INTO edgeq_meta (key, value) VALUES ('journal', ?)", (journal,))
                stored = journal
            else:
                row = conn.execute("SELECT value FROM edgeq_meta WHERE key = 'journal'").fetchone()
                if row is not None:
                    stored = str(row[0])
                else:
                    synced = conn.execute("SELECT 1 FROM queues WHERE kind IN ('remote', 'home') LIMIT 1").fetchone()
                    stored = "off" if synced is None else "device"
        return "server" if stored == "server" else "device" if stored == "device" else None

    def _sync_queue_defined(self) -> None:
        """A remote or home-server queue was just defined: a store never given a journal
        setting journals its device-side expiries from now on, in this process too."""
        if self._journal is not None:
            return
        with self._db.read() as conn:
            explicit = conn.execute("SELECT 1 FROM edgeq_meta WHERE key = 'journal'").fetchone()
        if explicit is None:
            self._journal = "device"

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

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"QueueManager({str(self.path)!r}, name={self.name!r})"

    @property
    def origin(self) -> str:
        """The origin of the uids this store issues: its name and incarnation, e.g.
        ``'DEV1:k3x9qam2pa'`` (see :mod:`edgeq.uid`)."""
        return self._origin

    def now_ms(self) -> int:
        """The current time by this queue manager's clock (epoch ms): what expiry is judged by."""
        return self._clock()

    @contextmanager
    def _write(self, *, durable: bool = True) -> Iterator[Tx]:
        with self._db.write(durable=durable) as conn:
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

    def _bind(
        self, tx: Tx, queue: QueueRow, specs: list[tuple[str, dict[str, Any]]], rules: list[QueueRule]
    ) -> list[Binding]:
        """Store a queue's bindings (rules already built and validated) in ``tx``."""
        ids = RuleTx(tx.conn).replace_bindings(queue.id, specs)
        return [
            Binding(f"b{i}", name, rule, persisted=True, config=config)
            for i, (name, config), rule in zip(ids, specs, rules, strict=True)
        ]

    def _events(
        self, queue: str, kind: EventKind, rows: Iterable[MessageRow], now_ms: int,
        *, where: Where | None = None, reason: RemovalReason | None = None,
    ) -> list[Pending]:
        """One event per row; empty (and no copies made) if nothing wants them."""
        if not self._observed(queue, kind):
            return []
        return [Pending(kind, queue, now_ms, row=row, where=where, reason=reason) for row in rows]

    def _observed(self, queue: str, kind: EventKind) -> bool:
        """Whether anything must see this queue's ``kind`` events: its rules, or the
        journal (a server's journals expiries and deliveries, a device's only expiries,
        so a syncing device pays nothing extra on its puts and transmissions)."""
        if self._rules.wants(queue):
            return True
        if self._journal == "server":
            return kind in ("expired", "removed")
        return self._journal == "device" and kind == "expired"

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
        built = build_bindings(cast("QueueManager", self), name, specs)  # validates every config before anything is stored
        with self._write() as tx:
            if tx.queue(name) is not None:
                raise QueueExists(
                    f"queue {name!r} is already defined on {self.name}: use alter_queue to change it"
                )
            tx.insert_queue(name, {**attrs, **(kind or {})}, self._clock())
            bound = self._bind(tx, self._queue(tx, name), specs, built) if specs else []
        if bound:
            self._rules.set_persisted(name, bound)

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

    def _discard_expired(self, name: str, where: Where) -> int:
        """Discard every expired message of a queue, any state, at check point ``where``.

        Walks the deadline index only, so unexpired messages are never read.
        Without rules it is one DELETE; with rules it goes in batches, each
        batch's rules firing after its commit.
        """
        if not self._observed(name, "expired"):
            with self._write() as tx:
                return tx.delete_expired(self._queue(tx, name).id, self._clock())
        return self._remove_in_batches(
            name, lambda tx, q, now: tx.expired_ids(q.id, now, _DISCARD_BATCH), "expired", where=where
        )

    def stop_expiry_sweeper(self) -> None:
        """Stop the background sweeper, waiting for a sweep in progress. No-op if none runs."""
        scheduler, self._scheduler = self._scheduler, None
        if scheduler is not None:
            scheduler.shutdown(wait=True)

    def _take(
        self, queue: str, count: int, *, wanted: Mapping[str, FieldValue] | None, remove: bool,
        confirm_id: int | None,
    ) -> list[Message]:
        """The next ``count`` messages in get order, with the expired ones met first
        discarded (``where="get"``). ``remove``: taken from a local queue (deleted, or
        locked under ``confirm_id``); otherwise only read, from a remote queue (for
        transmission). A row failing its integrity check is quarantined and raised.
        """
        self._touch(queue)
        now = self._clock()
        # Only a plain get's delete must wait for the disk: an assured get's lock,
        # lost in a power cut, leaves the message visible exactly as an undo would
        # (its getter died too), and discarding an expired message twice is harmless.
        with self._write(durable=remove and confirm_id is None) as tx:
            q = self._readable(tx, queue) if remove else self._queue(tx, queue)
            if not remove and q.kind != "remote":
                raise InvalidArgument(f"{queue!r} is not a remote queue: nothing to transmit")
            # Common case: nothing expired anywhere on the queue, so one page of
            # exactly `count` rows is all a get reads.
            page = count if wanted is None and not tx.has_expired(q.id, now) else max(count, _PAGE)
            chosen, plain, expired, error = self._scan(tx, q, page, count, now, wanted)
            events = self._events(queue, "expired", tx.delete(q.id, expired), now, where="get")
            if remove and confirm_id is None:
                tx.delete(q.id, [row.id for row in chosen])
                events += self._events(queue, "removed", chosen, now, reason="got")
            elif remove and confirm_id is not None:
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

    def _queues_of_kind(self, kind: str) -> list[QueueAttributes]:
        with self._db.read() as conn:
            return [QueueAttributes.from_row(q) for q in Tx(conn).queues() if q.kind == kind]

    def _encrypted_queues(self) -> list[QueueRow]:
        with self._db.read() as conn:
            return [q for q in Tx(conn).queues() if q.encryption]

"""``edgeq check``: find damage in a store and repair what can be, never deleting a sound row
(docs/storage.md, "Checking and repairing a store")."""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from edgeq.check.records import (
    Identity,
    QueueInfo,
    chunks,
    damaged_records,
    identity_problems,
    queue_infos,
    set_aside,
    sqlite_said,
)
from edgeq.check.report import CheckReport, DamagedMessage, DamagedRecord, Repairs
from edgeq.check.scan import MessageScan, SqliteCheck, still_damaged, verdict_sql
from edgeq.errors import StoreError
from edgeq.events.dispatch import Pending
from edgeq.events.sink import EventSink
from edgeq.store.connection import ConnectionFactory
from edgeq.store.damage import damaged
from edgeq.store.opening import check_foreign
from edgeq.store.records import MessageRow, QueueRow
from edgeq.store.schema import SCHEMA_VERSION
from edgeq.store.tx import Tx
from edgeq.uid import new_incarnation

__all__ = ["NotAStore", "StoreCheck", "preflight"]

_INDEX_NAMED = re.compile(r"\bindex ([A-Za-z0-9_]+)")
_TREE = re.compile(r"\bTree (\d+) page")
_DAMAGED = str(damaged("", path="")).split(":")[0]  # how every "the store is damaged" error begins


class NotAStore(StoreError):
    """``edgeq check`` was given a path that is not an edgeq store it can check (missing, empty,
    foreign, another schema version); the file was not touched."""


def preflight(path: Path) -> CheckReport | None:
    """Reading only: None if ``path`` is a store ``edgeq check`` can open, a report saying it is
    unreadable if SQLite cannot read it at all; raises NotAStore if it is no edgeq store.

    >>> import tempfile
    >>> try:
    ...     preflight(Path(tempfile.mkdtemp(), "none.db"))
    ... except NotAStore as exc:
    ...     print(str(exc).split(": ", 1)[1])
    give the path of an edgeq store
    """
    if not path.exists():
        raise NotAStore(f"{path} does not exist: give the path of an edgeq store")
    try:
        fresh = check_foreign(path)
    except StoreError as exc:
        # a SQLite header, then nothing
        if isinstance(exc.__cause__, (sqlite3.DatabaseError, UnicodeDecodeError)):
            return CheckReport(str(path), unreadable=(
                f"SQLite cannot read the file at all ({exc.__cause__}): it is damaged beyond what "
                "edgeq check can repair; restore it from a backup",
            ))
        if str(exc).startswith(_DAMAGED):  # an edgeq store's header, damaged
            return CheckReport(str(path), unreadable=(str(exc).split("; run `edgeq check")[0],))
        raise NotAStore(str(exc)) from exc
    if fresh:
        raise NotAStore(f"{path} is empty: it holds no edgeq store")
    return None


class StoreCheck:
    """Checks (and repairs) the store on ``db``.

    >>> import os, tempfile
    >>> from edgeq import QueueManager, Message
    >>> path = os.path.join(tempfile.mkdtemp(), "d.db")
    >>> with QueueManager(path, name="DEV1") as qm:
    ...     qm.define_queue("Q"); _ = qm.put("Q", Message(b"x"))
    >>> db = ConnectionFactory(path)
    >>> report = StoreCheck(db).run()
    >>> report.clean, report.checked
    (True, 1)
    >>> db.close()
    """

    def __init__(self, db: ConnectionFactory) -> None:
        self.db = db

    # -- finding ---------------------------------------------------------------------------

    def run(self) -> CheckReport:
        """Check everything; change nothing."""
        return self._run()[0]

    def _run(self) -> tuple[CheckReport, bool]:
        started = time.perf_counter()
        sqlite = SqliteCheck(self.db.path, self.db.timeout)
        sqlite.start()
        try:
            found = self._scan()
        finally:
            sqlite.join()
        # Nothing readable at all: one line says so (the integrity check failed the same way).
        lost = (
            found.unreadable if found.unreadable and not found.checked
            else sqlite.unreadable + found.unreadable
        )
        report = replace(
            found, sqlite=sqlite.lines, unreadable=lost, seconds=time.perf_counter() - started
        )
        return report, not sqlite.unreadable

    def _scan(self) -> CheckReport:
        try:
            with self.db.read() as conn:
                _check_version(conn, self.db.path)
                queues, queue_records = queue_infos(conn)
                scan = MessageScan(conn, queues)
                messages, more = scan.damaged()
                records = (*queue_records, *more, *damaged_records(conn, queues))
                identity = tuple(text for _, text in identity_problems(conn))
        except NotAStore:
            raise
        except StoreError as exc:  # SQLite could not read a table the scan needs
            return CheckReport(
                self.db.path, unreadable=(f"SQLite cannot read the store ({sqlite_said(exc)})",)
            )
        return CheckReport(
            self.db.path, checked=scan.checked, unreadable=scan.unreadable, messages=messages,
            counters=scan.drift(), records=records, identity=identity,
        )

    # -- repairing -------------------------------------------------------------------------

    def repair(self, sink: EventSink) -> CheckReport:
        """Check, then repair what was found in one write transaction (the report's ``repairs``)."""
        found, verdict = self._run()
        if found.clean:
            return found
        now = sink.clock()
        events: list[Pending] = []
        with sink.write() as tx:
            fix = _Fixer(tx.conn, now)
            with fix.rebuilding(found, verdict=verdict):
                fix.records(found.records)
                events = fix.messages(tx, sink, found.messages)
            fix.recount({*(c.queue for c in found.counters)})
            fix.identity(renew=False)
            sink.record(tx, events)
        sink.dispatch(events)
        return replace(found, repairs=fix.done(found))

    def unblock(self, now_ms: int) -> CheckReport:
        """Check and repair only what stops a queue manager from opening the store (rule bindings
        and events, the identity, key check values); no message is touched."""
        started = time.perf_counter()
        with self.db.read() as conn:
            _check_version(conn, self.db.path)
            queues, _ = queue_infos(conn)
            records = tuple(r for r in damaged_records(conn, queues) if r.table in _BLOCKING)
            identity = tuple(text for _, text in identity_problems(conn))
        found = CheckReport(self.db.path, records=records, identity=identity)
        if found.clean:
            return replace(found, seconds=time.perf_counter() - started)
        with self.db.write() as conn:
            fix = _Fixer(conn, now_ms)
            with fix.rebuilding(found, verdict=False):
                fix.records(records)
            fix.identity(renew=True)
        return replace(found, repairs=fix.done(found), seconds=time.perf_counter() - started)


#: The tables a queue manager reads as it opens.
_BLOCKING = frozenset({"rule_bindings", "rule_events", "edgeq_meta"})


def _check_version(conn: sqlite3.Connection, path: str) -> None:
    (version,) = conn.execute("PRAGMA user_version").fetchone()
    if version != SCHEMA_VERSION:
        advice = ("upgrade edgeq to check it" if version > SCHEMA_VERSION
                  else "open it once with this edgeq (any command upgrades it), then check it")
        raise NotAStore(
            f"{path} has schema version {version}; this edgeq checks version {SCHEMA_VERSION}: {advice}"
        )


class _Fixer:
    """The repairs, in one write transaction on ``conn``, noting what it did."""

    def __init__(self, conn: sqlite3.Connection, now_ms: int) -> None:
        self.conn = conn
        self.now = now_ms
        self.quarantined: list[str] = []
        self.reranked: list[str] = []
        self.rebuilt: list[str] = []
        self.recounted: list[str] = []
        self.renewed: list[str] = []
        self.left: list[str] = []
        self.touched: set[int] = set()  # queues that lost rows outside the Tx verbs

    @contextmanager
    def rebuilding(self, found: CheckReport, *, verdict: bool) -> Iterator[None]:
        """Drop the indexes SQLite's check named (without its ``verdict``: every index of the tables
        deleted from), let the block delete, then build them again from their own SQL."""
        deleting = {r.table for r in found.records} | ({"messages"} if found.messages else set())
        tables = set() if verdict else deleting
        objects = self.conn.execute(
            "SELECT type, name, tbl_name, sql, rootpage FROM sqlite_master"
        ).fetchall()
        named = self._named(found.sqlite, objects)
        indexes = [(name, table, sql) for kind, name, table, sql, _ in objects if kind == "index"]
        dropped = [
            (name, sql) for name, table, sql in indexes
            if sql is not None and (table in tables or name in named)
        ]
        for name, _ in dropped:
            self.conn.execute(f"DROP INDEX {_quoted(name)}")
        yield
        for _, sql in dropped:
            self.conn.execute(sql)
        built = [name for name, _ in dropped]
        for name, _, sql in indexes:
            if sql is None and name in named:  # a constraint's own index: rebuilt in place
                self.conn.execute(f"REINDEX {_quoted(name)}")
                built.append(name)
        self.rebuilt += built

    def _named(
        self, lines: Sequence[str], objects: Sequence[tuple[str, str, str, str | None, int]]
    ) -> set[str]:
        """The indexes SQLite's complaints name; a complaint no rebuild can answer is left."""
        by_root = {root: (kind, name) for kind, name, _, _, root in objects}
        named = set()
        for line in lines:
            index = _INDEX_NAMED.search(line)
            tree = _TREE.search(line)
            kind, name = by_root.get(int(tree.group(1)), ("", "")) if tree else ("", "")
            if index is not None:
                named.add(index.group(1))
            elif kind == "index":
                named.add(name)
            else:
                self.left.append(
                    f"SQLite: {line.strip()} (damage to the file's structure"
                    f"{f' in table {name}' if name else ''}, "
                    "which rebuilding indexes cannot repair: restore the store from a backup)"
                )
        return named

    def records(self, found: Sequence[DamagedRecord]) -> None:
        """Set aside the records still damaged (read again in this transaction)."""
        if not found:
            return
        queues, _ = queue_infos(self.conn)
        now_damaged = {(r.table, r.id): r for r in damaged_records(self.conn, queues)}
        for r in found:
            current = now_damaged.get((r.table, r.id))
            if r.table == "queues":
                self.left.append(f"queue {r.queue or r.id}: {r.what}")
            elif current is not None and set_aside(
                self.conn, r.table, r.id, r.queue, f"{r.table}.{r.id}", current.what, self.now
            ):
                self.quarantined.append(
                    f"{r.table} row {r.id}{f' (queue {r.queue})' if r.queue else ''}: {r.what}"
                )

    def messages(self, tx: Tx, sink: EventSink, found: Sequence[DamagedMessage]) -> list[Pending]:
        """Quarantine (or re-rank) the messages still damaged; return the rules' events."""
        wanted = {m.id: m for m in found if m.fix != "leave"}
        self.left += [f"message {m.uid} on {m.queue}: {m.what}" for m in found if m.fix == "leave"]
        if not wanted:
            return []
        queues, _ = queue_infos(self.conn)
        still = still_damaged(self.conn, verdict_sql(queues), list(wanted))
        rerank = [i for i, code in still.items() if code == "rank"]
        self._rerank(rerank, queues, wanted)
        events: list[Pending] = []
        rows = _rows(tx, [i for i, code in still.items() if code != "rank"])
        for msg_id, code in still.items():
            if code == "rank":
                continue
            m = wanted[msg_id]
            q = queues.get(rows[msg_id][1]) if msg_id in rows else None
            row = rows.get(msg_id, (None, None))[0]
            stored = _queue_row(tx, q)
            if row is not None and stored is not None and _countable(row):
                # Read from the table by rowid already: no index to suspect.
                events += sink.quarantine(tx, stored, row, self.now, through_index=False)
                told = ""
            else:
                set_aside(self.conn, "messages", msg_id, m.queue, m.uid, m.what, self.now)
                self.touched.add(q.id if q is not None else -1)
                told = " (its rules were not told: the row cannot be read as a message)"
            self.quarantined.append(f"message {m.uid} on {m.queue or 'no queue'}: {m.what}{told}")
        return events

    def _rerank(
        self, ids: Sequence[int], queues: Mapping[int, QueueInfo], wanted: Mapping[int, DamagedMessage]
    ) -> None:
        fifo = ", ".join(str(i) for i, q in queues.items() if q.ordering == "fifo")
        for chunk in chunks(ids):
            marks = ", ".join("?" for _ in chunk)
            self.conn.execute(
                f"UPDATE messages SET rank = CASE WHEN queue_id IN ({fifo}) THEN 0 ELSE priority END "
                f"WHERE id IN ({marks})", chunk,
            )
        self.reranked += [f"message {wanted[i].uid} on {wanted[i].queue}" for i in ids]

    def recount(self, drifted: set[str]) -> None:
        """Recount the queues whose counters were off, or that lost rows outside the Tx verbs."""
        queues, _ = queue_infos(self.conn)
        ids = [q.id for q in queues.values() if q.label in drifted or q.id in self.touched]
        for chunk in chunks(ids):
            marks = ", ".join("?" for _ in chunk)
            self.conn.execute(
                "UPDATE queues SET depth = (SELECT count(*) FROM messages WHERE queue_id = queues.id), "
                "bytes = (SELECT ifnull(sum(length(data) + ifnull(length(fields), 0)), 0) FROM messages "
                f"WHERE queue_id = queues.id) WHERE id IN ({marks})", chunk,
            )
        after, _ = queue_infos(self.conn)
        for i in ids:
            was, now = queues[i], after[i]
            if (was.depth, was.bytes) != (now.depth, now.bytes):
                self.recounted.append(
                    f"{now.label}: depth {was.depth} -> {now.depth}, bytes {was.bytes} -> {now.bytes}"
                )

    def identity(self, *, renew: bool) -> None:
        """Repair the identity where safe: the stamp clock, and a new incarnation only if ``renew``
        (before a queue manager opened the store: an open one uses the old)."""
        for kind, text in identity_problems(self.conn):
            if kind == Identity.INCARNATION and renew:
                token = new_incarnation()
                self.conn.execute(
                    "UPDATE edgeq_meta SET value = ? WHERE key = 'incarnation'", (token,)
                )
                self.renewed.append(
                    f"{text}: drew a new one, {token} (uids issued from now on carry it)"
                )
            elif kind == Identity.CLOCK:
                (held,) = self.conn.execute(
                    "SELECT max(ifnull((SELECT max(stamp) FROM messages), 0), "
                    "ifnull((SELECT max(stamp) FROM confirmed_uids), 0), ?)", (self.now * 1000,),
                ).fetchone()
                self.conn.execute(
                    "INSERT OR REPLACE INTO edgeq_clock (id, stamp) VALUES (1, ?)", (held,)
                )
                self.renewed.append(f"{text}: set to {held}, above every stamp held")
            elif kind == Identity.INCARNATION:
                self.left.append(f"{text}: close every queue manager on the store and run "
                                 "`edgeq check --repair` to draw a new one")
            else:
                self.left.append(text)

    def done(self, found: CheckReport) -> Repairs:
        left = [*self.left, *(
            f"{line}: restore the store from a backup (what could be read was repaired)"
            for line in found.unreadable
        )]
        return Repairs(tuple(self.quarantined), tuple(self.reranked), tuple(self.rebuilt),
                       tuple(self.recounted), tuple(self.renewed), tuple(left))


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _queue_row(tx: Tx, q: QueueInfo | None) -> QueueRow | None:
    """The queue's row for the verbs, or None if itself damaged (its messages are set aside raw)."""
    if q is None or q.name is None:
        return None
    try:
        stored = tx.queue(q.name)
    except StoreError:
        return None
    return stored if stored is not None and stored.id == q.id else None


def _rows(tx: Tx, ids: Sequence[int]) -> dict[int, tuple[MessageRow | None, int]]:
    """(the row as a MessageRow, or None if its text does not decode; its queue id) by id."""
    out: dict[int, tuple[MessageRow | None, int]] = {}
    for chunk in chunks(ids):
        marks = ", ".join("?" for _ in chunk)
        for msg_id, queue_id in tx.conn.execute(
            f"SELECT id, queue_id FROM messages WHERE id IN ({marks})", chunk
        ):
            out[msg_id] = (None, queue_id)
        try:
            readable = tx.rows(chunk)
        except (sqlite3.OperationalError, UnicodeDecodeError):  # text that is not UTF-8: one by one
            readable = []
            for msg_id in chunk:
                try:
                    readable += tx.rows([msg_id])
                except (sqlite3.OperationalError, UnicodeDecodeError):
                    continue
        for row in readable:
            out[row.id] = (row, out[row.id][1])
    return out


def _countable(row: MessageRow) -> bool:
    """Whether the row can leave through the counting verbs (its data and fields have a size)."""
    return isinstance(row.data, (bytes, str)) and isinstance(row.fields, (bytes, str, type(None)))

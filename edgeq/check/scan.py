"""Finding damaged message rows: the one streaming pass over ``messages`` (SQLite's integrity
check beside it, in a thread), and what each damaged row's trouble is."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from edgeq.check.records import QueueInfo, chunks, raw_text, shown, sqlite_said
from edgeq.check.report import CounterDrift, DamagedMessage, DamagedRecord
from edgeq.errors import StoreError
from edgeq.store.connection import ConnectionFactory
from edgeq.store.integrity import CRC_SQL

__all__ = ["MessageScan", "SqliteCheck", "still_damaged", "verdict_sql"]

# a text value that is not UTF-8 reached edgeq_crc
_UDF_FAILED = "user-defined function raised exception"
_FIRST = -(2**63)
#: The columns the checksum covers and the types they may hold: to say *what* is wrong.
_COVERED: dict[str, tuple[str, ...]] = {
    "origin": ("text",), "stamp": ("integer",), "priority": ("integer",), "created_ms": ("integer",),
    "arrived_ms": ("integer",), "expiry_kind": ("integer",), "expiry_value": ("integer", "null"),
    "cap_at": ("integer", "null"), "deadline": ("integer", "null"), "correlation_id": ("blob", "null"),
    "reply_to": ("text", "null"), "report": ("text", "null"), "key_id": ("text", "null"),
    "fields": ("blob", "null"), "data": ("blob",),
}
_UNCOVERED = {"seq": ("integer",), "rank": ("integer",), "backout_count": ("integer",),
              "confirm_id": ("integer", "null"), "not_before": ("integer", "null")}
_DETAIL_COLS = (
    "id", "queue_id", "origin", "stamp", "state", "confirm_id", "rank", "priority", "backout_count", "crc",
)


class SqliteCheck(threading.Thread):
    """``PRAGMA integrity_check`` on a connection of its own, in a thread."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__(name="edgeq-check", daemon=True)
        self.path, self.timeout = path, timeout
        self.lines: tuple[str, ...] = ()
        self.unreadable: tuple[str, ...] = ()

    def run(self) -> None:
        """Run the check; keep its complaints (none if it said "ok")."""
        db = ConnectionFactory(self.path, timeout=self.timeout)
        try:
            with db.read() as conn:
                lines = [str(row[0]) for row in conn.execute("PRAGMA integrity_check")]
            self.lines = () if lines == ["ok"] else tuple(lines)
        except StoreError as exc:
            self.unreadable = (f"SQLite's integrity check could not run ({sqlite_said(exc)})",)
        finally:
            db.close()


class MessageScan:
    """The one streaming pass over ``messages``."""

    def __init__(self, conn: sqlite3.Connection, queues: Mapping[int, QueueInfo]) -> None:
        self.conn = conn
        self.queues = queues
        self.unreadable: tuple[str, ...] = ()
        self.counts: dict[int, list[int]] = {}  # queue id -> [rows, bytes]

    def damaged(self) -> tuple[tuple[DamagedMessage, ...], tuple[DamagedRecord, ...]]:
        """The damaged rows, each saying what is wrong; and the queues whose every message failed
        its checksum (their name is the likelier damage)."""
        flagged = self._stream()
        described = _describe(self.conn, flagged, self.queues)
        return _suspect_queues(described, self.queues, self.counts)

    def _stream(self) -> dict[int, str]:
        verdict = verdict_sql(self.queues)
        flagged: dict[int, str] = {}
        counts = self.counts
        after = _FIRST
        while True:
            try:
                for msg_id, queue_id, size, code in self.conn.execute(
                    "SELECT id, queue_id, ifnull(length(data), 0) + ifnull(length(fields), 0), "
                    f"{verdict} FROM messages NOT INDEXED WHERE id > ? ORDER BY id", (after,),
                ):
                    # The hot loop (once per message): the tally inline, no call.
                    tally = counts.get(queue_id)
                    if tally is None:
                        tally = counts[queue_id] = [0, 0]
                    tally[0] += 1
                    tally[1] += size
                    if code is not None:
                        flagged[msg_id] = code
                    after = msg_id
                return flagged
            except sqlite3.OperationalError as exc:
                if _UDF_FAILED not in str(exc):
                    return self._stopped(flagged, after, exc)
                # A row just ahead holds text that is not UTF-8 (the cursor reads a row
                # ahead of the one it returns): walk to it row by row, then stream on after it.
                found = self._step_to_text(verdict, after, flagged)
                if found is None:
                    return self._stopped(flagged, after, exc)
                after = found
            except sqlite3.DatabaseError as exc:
                return self._stopped(flagged, after, exc)

    def _step_to_text(self, verdict: str, after: int, flagged: dict[int, str]) -> int | None:
        """Check the rows after ``after`` one by one up to the first whose text does not decode;
        return its id (None: there is none)."""
        while True:
            row = self.conn.execute(
                "SELECT id, queue_id, ifnull(length(data), 0) + ifnull(length(fields), 0) FROM messages "
                "WHERE id > ? ORDER BY id LIMIT 1", (after,),
            ).fetchone()
            if row is None:
                return None
            after = row[0]
            self._tally(row[1], row[2])
            try:
                (code,) = self.conn.execute(
                    f"SELECT {verdict} FROM messages WHERE id = ?", (after,)
                ).fetchone()
            except sqlite3.OperationalError as exc:
                if _UDF_FAILED not in str(exc):
                    raise
                flagged[after] = "text"
                return after
            if code is not None:
                flagged[after] = code

    @property
    def checked(self) -> int:
        """The message rows read."""
        return sum(rows for rows, _ in self.counts.values())

    def _tally(self, queue_id: int, size: int) -> None:
        tally = self.counts.get(queue_id)
        if tally is None:
            tally = self.counts[queue_id] = [0, 0]
        tally[0] += 1
        tally[1] += size

    def _stopped(self, flagged: dict[int, str], after: int, exc: sqlite3.Error) -> dict[int, str]:
        where = "from its first row" if after == _FIRST else f"past row id {after}"
        self.unreadable = (f"SQLite cannot read the messages table {where} ({sqlite_said(exc)})",)
        return flagged

    def drift(self) -> tuple[CounterDrift, ...]:
        """The queues whose counters disagree with the rows counted (none if the scan stopped)."""
        if self.unreadable:
            return ()
        out = []
        for q in self.queues.values():
            rows, size = self.counts.get(q.id, (0, 0))
            if (q.depth, q.bytes) != (rows, size):
                out.append(CounterDrift(q.label, q.depth, rows, q.bytes, size))
        return tuple(out)


def verdict_sql(queues: Mapping[int, QueueInfo]) -> str:
    """The SQL that classifies one ``messages`` row: NULL if sound, else a short code (the queue
    ids inlined: read in the same transaction)."""
    known = ", ".join(str(i) for i in queues)
    unchecked = ", ".join(str(i) for i, q in queues.items() if q.name is None)
    fifo = ", ".join(str(i) for i, q in queues.items() if q.ordering == "fifo")
    odd = ", ".join(str(i) for i, q in queues.items() if q.ordering not in ("fifo", "priority"))
    return f"""CASE
        WHEN queue_id NOT IN ({known}) THEN 'orphan'
        WHEN queue_id IN ({unchecked}) THEN 'unchecked'
        WHEN state NOT IN (0, 1, 2) THEN 'state'
        WHEN (state = 0) != (confirm_id IS NULL) THEN 'lock'
        WHEN typeof(seq) != 'integer' OR typeof(rank) != 'integer' OR typeof(backout_count) != 'integer'
             OR typeof(confirm_id) NOT IN ('integer', 'null') OR typeof(not_before) NOT IN ('integer', 'null')
             OR backout_count < 0 THEN 'value'
        WHEN crc IS NULL OR crc IS NOT {CRC_SQL} THEN 'crc'
        WHEN queue_id NOT IN ({odd}) AND rank != CASE WHEN queue_id IN ({fifo}) THEN 0 ELSE priority END
             THEN 'rank'
    END"""


def _describe(
    conn: sqlite3.Connection, flagged: Mapping[int, str], queues: Mapping[int, QueueInfo]
) -> list[DamagedMessage]:
    """What is wrong with each flagged row, read with its text as bytes (it may not decode)."""
    typeofs = ", ".join(f"typeof({col})" for col in (*_COVERED, *_UNCOVERED))
    texts = ", ".join(("origin", "reply_to", "report", "key_id"))
    out: list[DamagedMessage] = []
    ids = [i for i, code in flagged.items() if code != "unchecked"]
    with raw_text(conn):
        for chunk in chunks(ids):
            marks = ", ".join("?" for _ in chunk)
            for row in conn.execute(
                f"SELECT {', '.join(_DETAIL_COLS)}, {typeofs}, {texts} FROM messages "
                f"WHERE id IN ({marks}) ORDER BY id",
                chunk,
            ):
                out.append(_described(row, flagged[row[0]], queues))
    return out


def _described(
    row: tuple[Any, ...], code: str, queues: Mapping[int, QueueInfo]
) -> DamagedMessage:
    msg_id: int
    msg_id, queue_id, origin, stamp, state, confirm_id, rank, priority, backout, crc = (
        row[: len(_DETAIL_COLS)]
    )
    types = {
        col: shown(kind)
        for col, kind in zip((*_COVERED, *_UNCOVERED), row[len(_DETAIL_COLS):-4], strict=True)
    }
    texts = dict(zip(("origin", "reply_to", "report", "key_id"), row[-4:], strict=True))
    q = queues.get(queue_id) if isinstance(queue_id, int) else None
    uid = f"{shown(origin)}.{shown(stamp)}"
    queue = q.label if q is not None else None
    if code == "orphan":
        return DamagedMessage(msg_id, None, uid, f"belongs to no queue (queue id {shown(queue_id)})")
    if code == "state":
        return DamagedMessage(msg_id, queue, uid, f"impossible state {shown(state)}")
    if code == "lock":
        what = (f"ready, yet locked under confirm id {shown(confirm_id)}" if state == 0
                else f"{'put' if state == 1 else 'get'}-locked without a confirm id")
        return DamagedMessage(msg_id, queue, uid, what)
    if code == "value":
        wrong = [f"{col} is {types[col]}" for col, ok in _UNCOVERED.items() if types[col] not in ok]
        what = ", ".join(wrong) if wrong else f"negative backout count {shown(backout)}"
        return DamagedMessage(msg_id, queue, uid, what)
    if code == "text":
        bad = [col for col, value in texts.items() if isinstance(value, bytes) and _undecodable(value)]
        return DamagedMessage(
            msg_id, queue, uid, f"{', '.join(bad) or 'a text value'} is not valid UTF-8 text"
        )
    if code == "rank":
        expected = 0 if q is not None and q.ordering == "fifo" else priority
        return DamagedMessage(
            msg_id, queue, uid, f"its order key (rank {shown(rank)}) should be {shown(expected)}",
            "rerank",
        )
    wrong = [f"{col} is {types[col]}" for col, ok in _COVERED.items() if types[col] not in ok]
    if wrong:
        what = f"{', '.join(wrong)}: its checksum cannot match"
    elif crc is None:
        what = "it has no checksum"
    else:
        what = "its checksum does not match: its data or header changed after it was written"
    return DamagedMessage(msg_id, queue, uid, what)


def _undecodable(value: bytes) -> bool:
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def _suspect_queues(
    described: list[DamagedMessage], queues: Mapping[int, QueueInfo], counts: Mapping[int, Sequence[int]]
) -> tuple[tuple[DamagedMessage, ...], tuple[DamagedRecord, ...]]:
    """Every message of a queue failing its checksum means the queue's name (which every checksum
    covers) is the likelier damage: those messages are left alone."""
    by_queue: dict[str, int] = {}
    for m in described:
        if m.queue is not None and m.what.startswith("its checksum"):
            by_queue[m.queue] = by_queue.get(m.queue, 0) + 1
    records = []
    suspect = set()
    for q in queues.values():
        rows = counts.get(q.id, (0, 0))[0]
        if rows >= 2 and by_queue.get(q.label) == rows:
            suspect.add(q.label)
            records.append(DamagedRecord("queues", q.id, q.label, (
                f"every one of its {rows} messages fails its checksum: the queue's own name (which "
                "every checksum covers) is the likelier damage, so repair leaves them; restore the "
                "store from a backup"
            )))
    messages = tuple(
        replace(m, fix="leave") if m.queue in suspect and m.what.startswith("its checksum") else m
        for m in described
    )
    return messages, tuple(records)


def still_damaged(conn: sqlite3.Connection, verdict: str, ids: Sequence[int]) -> dict[int, str]:
    """Which of ``ids`` are damaged now, and how (a chunk whose text does not decode is asked row
    by row)."""
    out: dict[int, str] = {}
    for chunk in chunks(ids):
        marks = ", ".join("?" for _ in chunk)
        try:
            rows = conn.execute(
                f"SELECT id, {verdict} FROM messages WHERE id IN ({marks})", chunk
            ).fetchall()
        except sqlite3.OperationalError as exc:
            if _UDF_FAILED not in str(exc):
                raise
            rows = []
            for msg_id in chunk:
                try:
                    rows += conn.execute(
                        f"SELECT id, {verdict} FROM messages WHERE id = ?", (msg_id,)
                    ).fetchall()
                except sqlite3.OperationalError:
                    rows.append((msg_id, "text"))
        out.update((msg_id, code) for msg_id, code in rows if code is not None and code != "unchecked")
    return out

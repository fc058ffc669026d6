"""What ``edgeq check`` reads beside the messages: queues, rule bindings and events, the journal,
the identity. Text is read as bytes (:func:`raw_text`): the sqlite3 module refuses to return
text that a flipped bit left not UTF-8.
"""

from __future__ import annotations

import base64
import binascii
import json
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, get_args

import cbor2

from edgeq.check.report import DamagedRecord
from edgeq.errors import EdgeqError
from edgeq.names import INCARNATION_SEPARATOR, check_name, check_origin
from edgeq.store.journal import JournalKind
from edgeq.store.records import MessageRow
from edgeq.types import EVENT_KINDS

__all__ = [
    "Identity",
    "QueueInfo",
    "chunks",
    "damaged_records",
    "identity_problems",
    "queue_infos",
    "raw_text",
    "set_aside",
    "shown",
    "sqlite_said",
]

_CHUNK = 500  # ids per IN (...) list, well under SQLite's variable limit
_ORDERINGS = (b"priority", b"fifo")
_KINDS = (b"local", b"remote", b"home")


class Identity(StrEnum):
    """The parts of a store's identity the check reads: its name, incarnation and clock."""

    NAME = "name"
    INCARNATION = "incarnation"
    CLOCK = "clock"


@dataclass(frozen=True, slots=True)
class QueueInfo:
    """A queue row as the check reads it, its values as stored (damage included)."""

    id: int
    name: str | None  #: None: the stored name is not readable text (its messages cannot be checked)
    ordering: str | None
    depth: int  #: -1 if the counter is not an integer
    bytes: int

    @property
    def label(self) -> str:
        return self.name if self.name is not None else f"#{self.id}"


def chunks(ids: Sequence[int]) -> Iterator[Sequence[int]]:
    """``ids`` in slices small enough for one query each."""
    for start in range(0, len(ids), _CHUNK):
        yield ids[start : start + _CHUNK]


@contextmanager
def raw_text(conn: sqlite3.Connection) -> Iterator[None]:
    """Read TEXT columns as bytes while inside, so damaged text is seen, not decoded."""
    before = conn.text_factory
    conn.text_factory = bytes
    try:
        yield
    finally:
        conn.text_factory = before


def shown(value: object) -> str:
    """A stored value as text for a report: bytes decoded, damage replaced.

    >>> shown(b"DEV1\\xc4"), shown(5), shown(None)
    ('DEV1\ufffd', '5', 'None')
    """
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def sqlite_said(exc: BaseException) -> str:
    """What SQLite (or the sqlite3 module) said, under edgeq's wrapping of it.

    >>> sqlite_said(ValueError("database disk image is malformed"))
    'database disk image is malformed'
    """
    cause = exc.__cause__ if isinstance(exc.__cause__, (sqlite3.Error, UnicodeDecodeError)) else exc
    return str(cause)


def _text(value: object, kind: object = "text") -> str | None:
    if shown(kind) != "text" or not isinstance(value, bytes):
        return None
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else -1


def queue_infos(
    conn: sqlite3.Connection,
) -> tuple[dict[int, QueueInfo], tuple[DamagedRecord, ...]]:
    """Every queue, by id; and the queue rows that are damaged (name, ordering, kind)."""
    with raw_text(conn):
        rows = conn.execute(
            "SELECT id, name, typeof(name), ordering, kind, depth, bytes FROM queues"
        ).fetchall()
    out: dict[int, QueueInfo] = {}
    damaged: list[DamagedRecord] = []
    for queue_id, raw_name, name_type, ordering, kind, depth, size in rows:
        name = _text(raw_name, name_type)
        info = QueueInfo(queue_id, name, _text(ordering), _int(depth), _int(size))
        out[queue_id] = info
        problems = []
        if name is None:
            problems.append(
                f"its name {shown(raw_name)!r} is not readable text, so its messages cannot be checked"
            )
        elif not _valid_name(name):
            problems.append(f"its name {name!r} is not a valid queue name")
        if ordering not in _ORDERINGS:
            problems.append(f"its ordering {shown(ordering)!r} is neither priority nor fifo")
        if kind not in _KINDS:
            problems.append(f"its kind {shown(kind)!r} is not local, remote or home")
        if problems:
            damaged.append(DamagedRecord("queues", queue_id, info.label, "; ".join(problems)
                                         + ": restore the store from a backup"))
    return out, tuple(damaged)


def _valid_name(name: str) -> bool:
    try:
        check_name(name, "queue name")
    except EdgeqError:
        return False
    return True


def damaged_records(
    conn: sqlite3.Connection, queues: Mapping[int, QueueInfo]
) -> tuple[DamagedRecord, ...]:
    """The rule bindings, rule events, journal rows and key check values that cannot be read."""
    return (*_bindings(conn, queues), *_events(conn), *_journal(conn), *_key_checks(conn))


def _bindings(
    conn: sqlite3.Connection, queues: Mapping[int, QueueInfo]
) -> Iterator[DamagedRecord]:
    with raw_text(conn):
        rows = conn.execute(
            "SELECT id, queue_id, typeof(position), name, typeof(name), config, typeof(config) "
            "FROM rule_bindings"
        ).fetchall()
    for binding_id, queue_id, position_type, name, name_type, config, config_type in rows:
        q = queues.get(queue_id)
        what = None
        if q is None:
            what = f"it binds a rule to no queue (queue id {shown(queue_id)})"
        elif shown(position_type) != "integer":
            what = f"its position is {shown(position_type)}, not an integer"
        elif not _text(name, name_type):
            what = f"its rule name {shown(name)!r} is damaged"
        elif not isinstance(_json(_text(config, config_type)), dict):
            what = f"its config {shown(config)[:60]!r} cannot be read as a JSON object"
        if what is not None:
            yield DamagedRecord("rule_bindings", binding_id, q.label if q else None, what)


def _json(text: str | None) -> object:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def _events(conn: sqlite3.Connection) -> Iterator[DamagedRecord]:
    with raw_text(conn):
        rows = conn.execute(
            "SELECT id, queue, typeof(queue), kind, typeof(at_ms), message, typeof(message) FROM rule_events"
        ).fetchall()
    for event_id, queue, queue_type, kind, at_type, message, message_type in rows:
        name = _text(queue, queue_type)
        what = None
        if name is None:
            what = f"its queue name {shown(queue)!r} is damaged"
        elif _text(kind) not in EVENT_KINDS:
            what = f"its kind {shown(kind)!r} is not an event kind"
        elif shown(at_type) != "integer":
            what = f"its time is {shown(at_type)}, not an integer"
        elif shown(message_type) != "blob" or not _message_copy(message):
            what = "its copy of the message cannot be decoded"
        if what is not None:
            yield DamagedRecord("rule_events", event_id, name, what)


def _message_copy(blob: bytes) -> bool:
    """Whether a rule event's message copy decodes to a message row with a uid and data."""
    try:
        values: Any = cbor2.loads(blob)
        row = MessageRow(*values)
    except Exception:
        return False
    return isinstance(row.origin, str) and isinstance(row.stamp, int) and isinstance(row.data, bytes)


_JOURNAL_KINDS = get_args(JournalKind)
_JOURNAL_WHAT = {
    "kind": f"its kind is not {', '.join(_JOURNAL_KINDS[:-1])} or {_JOURNAL_KINDS[-1]}",
    "side": "its side is neither server nor device",
    "name": "a queue, uid, origin, check point or device in it is not a plain name",
    "number": "a time, size or clock offset in it is not an integer",
}


def _journal(conn: sqlite3.Connection) -> Iterator[DamagedRecord]:
    # One filtering SELECT: a server's journal may hold millions of rows.
    ints = " OR ".join(
        f"typeof({col}) NOT IN ('integer', 'null')"
        for col in ("size", "created_ms", "arrived_ms", "confirmed_ms", "clock_offset_ms")
    )
    with raw_text(conn):
        rows = conn.execute(
            f"""SELECT id, queue, what FROM (SELECT id, queue, CASE
                    WHEN kind NOT IN ({', '.join(repr(k) for k in _JOURNAL_KINDS)}) THEN 'kind'
                    WHEN side NOT IN ('server', 'device') THEN 'side'
                    WHEN typeof(queue) != 'text' OR typeof(uid) != 'text' OR typeof(origin) != 'text'
                         OR typeof(check_point) NOT IN ('text', 'null')
                         OR typeof(device) NOT IN ('text', 'null')
                         OR (queue || uid || origin || ifnull(check_point, '') || ifnull(device, ''))
                            GLOB '*[^ -~]*' THEN 'name'
                    WHEN typeof(at_ms) != 'integer' OR {ints} THEN 'number'
                END AS what FROM journal) WHERE what IS NOT NULL"""
        ).fetchall()
    for entry_id, queue, what in rows:
        yield DamagedRecord("journal", entry_id, _text(queue), _JOURNAL_WHAT[shown(what)])


def _key_checks(conn: sqlite3.Connection) -> Iterator[DamagedRecord]:
    with raw_text(conn):
        rows = conn.execute("SELECT rowid, key, value FROM edgeq_meta").fetchall()
    for rowid, key, value in rows:
        name = _text(key)
        if name is None or not name.startswith("keycheck."):
            continue
        try:
            sound = isinstance(value, bytes) and bool(base64.b64decode(value, validate=True))
        except (binascii.Error, ValueError):
            sound = False
        if not sound:
            yield DamagedRecord("edgeq_meta", rowid, None, (
                f"the check value of store key {name.removeprefix('keycheck.')!r} is damaged (it is made "
                "again from the key file the next time the store is opened with its keys)"
            ))


def identity_problems(conn: sqlite3.Connection) -> list[tuple[Identity, str]]:
    """What is damaged in the store's identity: the name, the incarnation, the stamp clock."""
    with raw_text(conn):
        meta = {
            _text(key): (value, kind)
            for key, value, kind in conn.execute(
                "SELECT key, value, typeof(value) FROM edgeq_meta WHERE key IN ('name', 'incarnation')"
            )
        }
        clock = conn.execute("SELECT stamp, typeof(stamp) FROM edgeq_clock WHERE id = 1").fetchone()
    out: list[tuple[Identity, str]] = []
    if "name" not in meta:
        out.append((Identity.NAME, "the queue manager's name is missing: open the store once with its name "
                                   "(edgeq --db PATH --name NAME queue list) to store it again"))
    else:
        name = _text(*meta["name"])
        if name is None or not _valid_name(name):
            out.append((Identity.NAME, f"the queue manager's name {shown(meta['name'][0])!r} is damaged: "
                                       "restore the store from a backup"))
    if "incarnation" in meta:
        token = _text(*meta["incarnation"])
        try:
            check_origin(f"X{INCARNATION_SEPARATOR}{token}")
        except EdgeqError:
            out.append((
                Identity.INCARNATION,
                f"the store's incarnation {shown(meta['incarnation'][0])!r} is damaged",
            ))
    if clock is None or shown(clock[1]) != "integer" or clock[0] < 0:
        out.append((Identity.CLOCK, "the stamp clock (the last uid stamp issued) is "
                                    + ("missing" if clock is None else f"damaged ({shown(clock[0])!r})")))
    return out


def set_aside(
    conn: sqlite3.Connection, table: str, rowid: int, queue: str | None, uid: str, reason: str,
    now_ms: int,
) -> bool:
    """Move one row of ``table`` (one of ours) to the quarantine whole, text as bytes; return
    whether it was there."""
    with raw_text(conn):
        row = conn.execute(f"SELECT * FROM {table} WHERE rowid = ?", (rowid,)).fetchone()
    if row is None:
        return False
    conn.execute(
        "INSERT INTO quarantine (queue, uid, at_ms, reason, row) VALUES (?, ?, ?, ?, ?)",
        (queue or "", uid, now_ms, reason, cbor2.dumps(list(row))),
    )
    conn.execute(f"DELETE FROM {table} WHERE rowid = ?", (rowid,))
    return True

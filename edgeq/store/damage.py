"""Telling a damaged store from a caller's mistake: every "the store is damaged" error is worded
here, and queue rows (no checksum) are checked where they are read."""

from __future__ import annotations

import re
import sqlite3
from typing import Protocol, TypeVar

from edgeq.crypto import CIPHERS
from edgeq.encoding.compression import CODECS
from edgeq.errors import StoreError
from edgeq.types import ON_FULL

__all__ = [
    "REPAIR", "advance", "checked_queue", "damaged", "index_damaged", "missing_queue", "queue_problem",
    "store_path",
]

#: What the operator does about damage edgeq found while working.
REPAIR = (
    "run `edgeq check --db {path}` to see what else is damaged (`--repair` rebuilds damaged indexes "
    "and moves damaged rows to the quarantine), or restore the store from a backup"
)

_NAME = re.compile(r"[A-Za-z0-9._-]{1,48}")
_KINDS = frozenset({"local", "remote", "home"})
_ORDERINGS = frozenset({"priority", "fifo"})
_MODES = frozenset({None, "async", "sync"})
_CIPHERS = frozenset({None, *CIPHERS})
_ON_FULL = frozenset(ON_FULL)
_COMPRESSIONS = frozenset({None, *CODECS})
_PRIORITIES = frozenset(range(10))


def store_path(conn: sqlite3.Connection | None) -> str:
    """The file ``conn`` is open on (``PATH`` if unknown): for the repair hint."""
    if conn is None:
        return "PATH"
    try:
        row = conn.execute("PRAGMA database_list").fetchone()
    except sqlite3.Error:
        return "PATH"
    return str(row[2]) if row is not None and row[2] else "PATH"


def damaged(
    what: str, conn: sqlite3.Connection | None = None, *, path: str | None = None
) -> StoreError:
    """The error for damage found in the store: ``what`` says what is damaged.

    >>> str(damaged("queue row 3 has ordering 'prixrity'", path="d.db"))[:60]
    "the store is damaged: queue row 3 has ordering 'prixrity'; r"
    """
    where = path if path is not None else store_path(conn)
    return StoreError(f"the store is damaged: {what}; {REPAIR.format(path=where)}")


def index_damaged(what: str, conn: sqlite3.Connection | None = None) -> StoreError:
    """The error for an index that disagrees with its table (the rows are intact)."""
    return StoreError(
        f"the store is damaged: {what}: an index disagrees with the rows it indexes (the rows are "
        f"intact, nothing was changed); run `edgeq check --db {store_path(conn)} --repair` to rebuild "
        "the indexes"
    )


def _name_ok(value: object) -> bool:
    return isinstance(value, str) and _NAME.fullmatch(value) is not None


def _delays_ok(delays: tuple[object, object]) -> bool:
    first, most = delays
    return type(first) is int and type(most) is int and first >= 0 and most >= 0


def _limit_ok(value: object) -> bool:
    return value is None or (type(value) is int and value > 0)


def queue_problem(
    id: object, name: object, ordering: object, kind: object, default_priority: object, depth: object,
    size: object, mode: object, encryption: object, on_full: object, created_ms: object,
    limits: tuple[object, ...], names: tuple[object, ...], *, compression: object = None,
    delays: tuple[object, object] = (0, 0),
) -> str | None:
    """What is out of range in a queue row read back (None: nothing); ``limits`` are positive or
    None, ``names`` optional names. Cheap: it runs whenever a queue row is read.

    >>> queue_problem(1, "Q", "fifo", "local", 4, 0, 0, None, None, "reject", 5, (None, 10), (None,))
    >>> queue_problem(1, "Q", "fifo", "local", 68, 0, 0, None, None, "reject", 5, (), ())
    'default_priority 68 is out of range'
    """
    # The common case first, with no call but the one regex match (it runs on every
    # put and get): plain comparisons and loops.
    sound = (
        type(id) is int and id > 0 and type(name) is str and _NAME.fullmatch(name) is not None
        and ordering in _ORDERINGS and kind in _KINDS and default_priority in _PRIORITIES
        and type(default_priority) is int and type(depth) is int and depth >= 0 and type(size) is int
        and mode in _MODES and encryption in _CIPHERS and on_full in _ON_FULL
        and type(created_ms) is int
        and compression in _COMPRESSIONS and type(delays[0]) is int and type(delays[1]) is int
        and delays[0] >= 0 and delays[1] >= 0
    )
    for v in limits:
        if v is not None and (type(v) is not int or v <= 0):
            sound = False
    for v in names:
        if v is not None:
            sound = sound and _name_ok(v)
    if sound:
        return None
    checks = {
        "id": type(id) is int and id > 0,
        "name": _name_ok(name),
        "ordering": ordering in _ORDERINGS,
        "kind": kind in _KINDS,
        "default_priority": type(default_priority) is int and default_priority in _PRIORITIES,
        "depth": type(depth) is int and depth >= 0,
        # bytes may drift below zero once a damaged (resized) row is quarantined: a count
        # `edgeq check` corrects, not a reason to refuse the queue
        "bytes": type(size) is int,
        "mode": mode in _MODES,
        "encryption": encryption in _CIPHERS,
        "on_full": on_full in _ON_FULL,
        "created_ms": type(created_ms) is int,
        "a limit": all(map(_limit_ok, limits)),
        "a target or server name": all(v is None or _name_ok(v) for v in names),
        "compression": compression in _COMPRESSIONS,
        "a redelivery delay": _delays_ok(delays),
    }
    values = {
        "id": id, "name": name, "ordering": ordering, "kind": kind,
        "default_priority": default_priority,
        "depth": depth, "bytes": size, "mode": mode, "encryption": encryption, "on_full": on_full,
        "created_ms": created_ms, "a limit": limits, "a target or server name": names,
        "compression": compression, "a redelivery delay": delays,
    }
    label = next((label for label, ok in checks.items() if not ok), "a value")
    return f"{label} {values.get(label)!r} is out of range"


class StoredQueue(Protocol):
    """The columns of a queue row :func:`checked_queue` checks (``edgeq.store.tx.QueueRow``)."""

    @property
    def id(self) -> int: ...
    @property
    def name(self) -> str: ...
    @property
    def ordering(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def default_priority(self) -> int: ...
    @property
    def depth(self) -> int: ...
    @property
    def bytes(self) -> int: ...
    @property
    def mode(self) -> str | None: ...
    @property
    def encryption(self) -> str | None: ...
    @property
    def on_full(self) -> str: ...
    @property
    def created_ms(self) -> int: ...
    @property
    def expiry_ms(self) -> int | None: ...
    @property
    def cap_expiry_ms(self) -> int | None: ...
    @property
    def max_depth(self) -> int | None: ...
    @property
    def max_message_bytes(self) -> int | None: ...
    @property
    def depth_threshold(self) -> int | None: ...
    @property
    def max_bytes(self) -> int | None: ...
    @property
    def refusal_limit(self) -> int | None: ...
    @property
    def target_qmgr(self) -> str | None: ...
    @property
    def target_queue(self) -> str | None: ...
    @property
    def server(self) -> str | None: ...
    @property
    def backout_threshold(self) -> int | None: ...
    @property
    def backout_queue(self) -> str | None: ...
    @property
    def compression(self) -> str | None: ...
    @property
    def redelivery_delay_ms(self) -> int: ...
    @property
    def max_redelivery_delay_ms(self) -> int: ...


Q = TypeVar("Q", bound=StoredQueue)


def checked_queue(q: Q, conn: sqlite3.Connection) -> Q:
    """``q`` as read back, or the damaged-store error if a value in it is out of range."""
    problem = queue_problem(
        q.id, q.name, q.ordering, q.kind, q.default_priority, q.depth, q.bytes, q.mode, q.encryption,
        q.on_full, q.created_ms,
        (q.expiry_ms, q.cap_expiry_ms, q.max_depth, q.max_message_bytes, q.depth_threshold, q.max_bytes,
         q.refusal_limit, q.backout_threshold),
        (q.target_qmgr, q.target_queue, q.server, q.backout_queue), compression=q.compression,
        delays=(q.redelivery_delay_ms, q.max_redelivery_delay_ms),
    )
    if problem is not None:
        raise damaged(f"the row of queue {q.name!r} holds a value no edgeq writes: {problem}", conn)
    return q


def missing_queue(conn: sqlite3.Connection, name: str, found: object) -> None:
    """The queues' name index gave no row for ``name`` (``found`` None) or another queue's: None
    if there is no such queue, else the index-damaged error (the small table read whole)."""
    if found is not None or conn.execute(
        "SELECT 1 FROM queues NOT INDEXED WHERE name = ?", (name,)
    ).fetchone():
        raise index_damaged(
            f"the name index of the queues table does not lead to queue {name!r}", conn
        )
    return None


def advance(
    conn: sqlite3.Connection, queue_id: int, after: tuple[int, int] | None, last: tuple[int, int]
) -> tuple[int, int]:
    """The next key of a walk of the ready index: ``last`` (rank, seq), which must come after
    ``after`` in get order, or the index is damaged (a walk going back could loop forever).

    >>> advance(None, 1, (5, 10), (5, 11)), advance(None, 1, (5, 10), (4, 1))
    ((5, 11), (4, 1))
    """
    if after is not None:
        (rank0, seq0), (rank1, seq1) = after, last
        ints = type(rank0) is int and type(seq0) is int and type(rank1) is int and type(seq1) is int
        if not (ints and (rank1 < rank0 or (rank1 == rank0 and seq1 > seq0))):
            raise index_damaged(f"the ready index of queue id {queue_id} is out of order", conn)
    return last

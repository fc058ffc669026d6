"""What the operator console shows, read from the home server's store.

Every figure comes from the store (a read-only connection per page), never from a serving
process's memory: the console runs in a process of its own (``edgeq serve --console``).

>>> import tempfile, os
>>> from edgeq import Message, QueueManager
>>> path = os.path.join(tempfile.mkdtemp(), "home.db")
>>> qm = QueueManager(path, name="HOME"); qm.define_queue("ORDERS")
>>> _ = qm.put("ORDERS", Message(b"x")); qm.close()
>>> view = read_console(path, now_ms=10**13)
>>> [(q.name, q.depth) for q in view.queues]
[('ORDERS', 1)]
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from edgeq.store.opening import connect
from edgeq.sync.bridges.views import BridgeView, bridge_views
from edgeq.sync.server.admin.records import recent
from edgeq.sync.server.backlog import QueueBacklog, journal_counts, queue_backlogs, reported_backlogs
from edgeq.types import MessageState

__all__ = ["ConsoleView", "DeviceRow", "QueueRow", "device_rows", "queue_rows", "read_console",
           "table_names"]

HOUR_MS = 3_600_000
#: the charts' span and resolution: the last hour, by minute
BUCKET_MS, BUCKETS = 60_000, 60
RECENT = 20


@dataclass(frozen=True)
class DeviceRow:
    """One device of the fleet, as the console lists it."""

    name: str
    last_seen_ms: int | None
    clock_offset_ms: int | None
    bounds: tuple[int, int] | None
    pushes: int
    refusals: int
    held: int
    revoked_ms: int | None
    registered: bool
    backlog: tuple[int, int] | None = None  # what it last reported waiting to be pushed, and when


@dataclass(frozen=True)
class QueueRow:
    """One queue: its kind, backlog figures (depth as ``QueueManager.depth`` counts it, the expired
    messages it still holds, bytes, oldest message's age, drain estimate) and the last hour's expiries by
    check point."""

    kind: str
    backlog: QueueBacklog
    expiries_hour: dict[str, int]

    @property
    def name(self) -> str:
        return self.backlog.name

    @property
    def depth(self) -> int:
        return self.backlog.depth

    @property
    def bytes(self) -> int:
        return self.backlog.bytes

    @property
    def oldest_age_ms(self) -> int | None:
        return self.backlog.oldest_age_ms

    @property
    def expired(self) -> int:
        return self.backlog.expired


@dataclass(frozen=True)
class ConsoleView:
    """Everything one console page shows."""

    now_ms: int
    devices: list[DeviceRow]
    queues: list[QueueRow]
    expiries: list[tuple[int, str, str, str | None, str | None]]  # at, queue, uid, check point, device
    #: last at, queue, device (or this store's origin), times, reason, whether this server refused it
    refusals: list[tuple[int, str, str, int, str, bool]]
    parked: list[tuple[int, str, str, str, int, str]]  # event, queue, binding, rule, attempts, error
    #: id, device, action, target, sent at, how it stands (the words ``edgeq admin`` uses)
    admin: list[tuple[str, str, str, str | None, int, str]]
    throughput: list[int] = field(default_factory=list)  # accepted per minute, oldest first
    expired: list[int] = field(default_factory=list)  # expired per minute, oldest first
    bridges: list[BridgeView] = field(default_factory=list)  # the store's bridges (docs/bridges.md)
    #: journal counts by reason: moved to a dead-letter queue, dropped for good (docs/console.md, "Backlog")
    dead_lettered: dict[str, int] = field(default_factory=dict)
    given_up: dict[str, int] = field(default_factory=dict)


def read_console(path: str | Path, *, now_ms: int) -> ConsoleView:
    """Read the console's page from the store at ``path`` (read-only) as of ``now_ms``."""
    conn = connect(path, read_only=True)
    try:
        tables = table_names(conn)
        out, dead_lettered, given_up = journal_counts(conn, now_ms)
        queues = queue_rows(conn, now_ms, out=out)
        return ConsoleView(
            now_ms=now_ms,
            devices=device_rows(conn, tables),
            queues=queues,
            expiries=conn.execute(
                "SELECT at_ms, queue, uid, check_point, device FROM journal WHERE kind = 'expired' "
                "ORDER BY id DESC LIMIT ?", (RECENT,)).fetchall(),
            refusals=_refusals(conn, tables),
            parked=conn.execute(
                "SELECT event_id, queue, binding, rule, attempts, ifnull(last_error, '') FROM rule_failures "
                "WHERE parked = 1 ORDER BY last_ms DESC LIMIT ?", (RECENT,)).fetchall(),
            admin=[(r.request_id, r.device, r.action, r.target, r.created_ms, r.describe(now_ms))
                   for r in recent(conn, RECENT)] if "admin_requests" in tables else [],
            throughput=_per_minute(conn, "accepted", now_ms),
            expired=_per_minute(conn, "expired", now_ms),
            bridges=bridge_views(path, {q.name: q.depth for q in queues}),
            dead_lettered=dead_lettered,
            given_up=given_up,
        )
    finally:
        conn.close()


def table_names(conn: sqlite3.Connection) -> set[str]:
    """The store's tables (an older store may lack some the console reads)."""
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _refusals(conn: sqlite3.Connection, tables: set[str]) -> list[tuple[int, str, str, int, str, bool]]:
    """The latest refusals: what this server refused of its devices (``device_refusals``), and
    what targets refused of this store's own remote queues (``refusals``, by message)."""
    here = ("SELECT last_ms, queue, device, count, last_detail, 1 FROM device_refusals UNION ALL "
            if "device_refusals" in tables else "")
    rows = conn.execute(
        f"{here}SELECT r.last_ms, q.name, r.origin, r.count, r.last_reason, 0 FROM refusals r "
        "JOIN queues q ON q.id = r.queue_id ORDER BY 1 DESC LIMIT ?", (RECENT,))
    return [(at, queue, who, count, reason, bool(mine)) for at, queue, who, count, reason, mine in rows]


def device_rows(conn: sqlite3.Connection, tables: set[str], name: str | None = None) -> list[DeviceRow]:
    """The fleet's rows (only device ``name``'s, if given)."""
    # One query per table, grouped by device: a page costs the same for 5 devices or 500.
    # The bounds: the hello's offset (devices) and the latest accepted put's (its journal row).
    pushes = {device: (n, offset) for device, n, _, offset in conn.execute(
        "SELECT device, count(*), max(id), clock_offset_ms FROM journal WHERE kind = 'accepted' "
        "AND device IS NOT NULL GROUP BY device")}
    refusals = dict(conn.execute("SELECT device, sum(count) FROM device_refusals GROUP BY device")
                    if "device_refusals" in tables else ())
    reported = reported_backlogs(conn) if "device_backlogs" in tables else {}
    held = _by_device(conn,
                      f"SELECT origin, count(*) FROM messages WHERE state = {MessageState.PUT_LOCKED:d} "
                      "GROUP BY origin")
    rows = conn.execute("SELECT name, last_seen_ms, clock_offset_ms, revoked_ms, public_key IS NOT NULL "
                        "FROM devices WHERE ? IS NULL OR name = ? ORDER BY name", (name, name)).fetchall()
    out = []
    for device, seen, offset, revoked, registered in rows:
        count, put_offset = pushes.get(device, (0, None))
        known = [x for x in (offset, put_offset) if x is not None]
        out.append(DeviceRow(device, seen, offset, (min(known), max(known)) if known else None, count,
                             refusals.get(device, 0), held.get(device, 0), revoked, bool(registered),
                             reported.get(device)))
    return out


def _by_device(conn: sqlite3.Connection, sql: str) -> dict[str, int]:
    """Sum per device of rows keyed by origin (``DEVICE:incarnation``)."""
    out: dict[str, int] = {}
    for origin, n in conn.execute(sql):
        device = str(origin).partition(":")[0]
        out[device] = out.get(device, 0) + int(n)
    return out


def queue_rows(conn: sqlite3.Connection, now_ms: int, name: str | None = None, *,
               out: Mapping[str, int] | None = None) -> list[QueueRow]:
    """Each queue (only ``name``, if given) with its backlog figures (:func:`queue_backlogs`, ``out``: its
    deliveries if read already) and the last hour's expiries by check point (the console discards nothing)."""
    kinds = dict(conn.execute("SELECT name, kind FROM queues WHERE ? IS NULL OR name = ?", (name, name)))
    expiries: dict[str, dict[str, int]] = {}
    for queue, point, n in conn.execute(
            "SELECT queue, ifnull(check_point, '?'), count(*) FROM journal "
            "WHERE kind = 'expired' AND at_ms >= ? GROUP BY queue, check_point", (now_ms - HOUR_MS,)):
        expiries.setdefault(queue, {})[point] = n
    return [QueueRow(kinds[b.name], b, expiries.get(b.name, {}))
            for b in queue_backlogs(conn, now_ms, name, out=out)]


def _per_minute(conn: sqlite3.Connection, kind: str, now_ms: int) -> list[int]:
    start = now_ms - BUCKETS * BUCKET_MS
    counts = dict(conn.execute(
        "SELECT (at_ms - ?) / ?, count(*) FROM journal WHERE kind = ? AND at_ms >= ? AND at_ms < ? "
        "GROUP BY 1", (start, BUCKET_MS, kind, start, now_ms + 1)))
    return [counts.get(i, 0) for i in range(BUCKETS)]

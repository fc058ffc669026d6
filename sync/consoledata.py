"""What the operator console shows, read from the home server's store.

Every figure comes from the store (a read-only connection per page), never from one
process's memory, so each of ``edgeq serve --workers N``'s processes shows the same
fleet. The one exception is the clock bounds measured in the serving process's
device sessions, passed in as ``bounds`` (shown where that process has them).

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

from edgeq.types import MessageState

__all__ = ["ConsoleView", "DeviceRow", "QueueRow", "read_console"]

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


@dataclass(frozen=True)
class QueueRow:
    """One queue: its depth, bytes, oldest message's age and the last hour's expiries by check point."""

    name: str
    kind: str
    depth: int
    bytes: int
    oldest_age_ms: int | None
    expiries_hour: dict[str, int]


@dataclass(frozen=True)
class ConsoleView:
    """Everything one console page shows."""

    now_ms: int
    devices: list[DeviceRow]
    queues: list[QueueRow]
    expiries: list[tuple[int, str, str, str | None, str | None]]  # at, queue, uid, check point, device
    refusals: list[tuple[int, str, str, int, str]]  # last at, queue, origin, count, reason
    parked: list[tuple[int, str, str, str, int, str]]  # event, queue, binding, rule, attempts, error
    admin: list[tuple[str, str, str, str | None, int, int | None, str | None]]  # id, device, action, target, ...
    throughput: list[int] = field(default_factory=list)  # accepted per minute, oldest first
    expired: list[int] = field(default_factory=list)  # expired per minute, oldest first


def read_console(path: str | Path, *, now_ms: int,
                 bounds: Mapping[str, tuple[int, int]] | None = None) -> ConsoleView:
    """Read the console's page from the store at ``path`` (read-only) as of ``now_ms``;
    ``bounds`` are the device clock-offset bounds this process measured."""
    conn = sqlite3.connect(f"file:{Path(path).resolve()}?mode=ro", uri=True, timeout=10)
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        return ConsoleView(
            now_ms=now_ms,
            devices=_devices(conn, bounds or {}),
            queues=_queues(conn, now_ms),
            expiries=conn.execute(
                "SELECT at_ms, queue, uid, check_point, device FROM journal WHERE kind = 'expired' "
                "ORDER BY id DESC LIMIT ?", (RECENT,)).fetchall(),
            refusals=conn.execute(
                "SELECT r.last_ms, q.name, r.origin, r.count, r.last_reason FROM refusals r "
                "JOIN queues q ON q.id = r.queue_id ORDER BY r.last_ms DESC LIMIT ?", (RECENT,)).fetchall(),
            parked=conn.execute(
                "SELECT event_id, queue, binding, rule, attempts, ifnull(last_error, '') FROM rule_failures "
                "WHERE parked = 1 ORDER BY last_ms DESC LIMIT ?", (RECENT,)).fetchall(),
            admin=conn.execute(
                "SELECT request_id, device, action, target, created_ms, replied_ms, rc FROM admin_requests "
                "ORDER BY replied_ms IS NOT NULL, created_ms DESC LIMIT ?", (RECENT,)).fetchall()
            if "admin_requests" in tables else [],
            throughput=_per_minute(conn, "accepted", now_ms),
            expired=_per_minute(conn, "expired", now_ms),
        )
    finally:
        conn.close()


def _devices(conn: sqlite3.Connection, bounds: Mapping[str, tuple[int, int]]) -> list[DeviceRow]:
    # One query per table, grouped by device: a page costs the same for 5 devices or 500.
    pushes = dict(conn.execute(
        "SELECT device, count(*) FROM journal WHERE kind = 'accepted' AND device IS NOT NULL GROUP BY device"))
    refusals = _by_device(conn, "SELECT origin, sum(count) FROM refusals GROUP BY origin")
    held = _by_device(conn, f"SELECT origin, count(*) FROM messages WHERE state = {MessageState.PUT_LOCKED:d} "
                            "GROUP BY origin")
    rows = conn.execute("SELECT name, last_seen_ms, clock_offset_ms, revoked_ms, public_key IS NOT NULL "
                        "FROM devices ORDER BY name").fetchall()
    return [DeviceRow(name, seen, offset, bounds.get(name), pushes.get(name, 0), refusals.get(name, 0),
                      held.get(name, 0), revoked, bool(registered))
            for name, seen, offset, revoked, registered in rows]


def _by_device(conn: sqlite3.Connection, sql: str) -> dict[str, int]:
    """Sum per device of rows keyed by origin (``DEVICE:incarnation``)."""
    out: dict[str, int] = {}
    for origin, n in conn.execute(sql):
        device = str(origin).partition(":")[0]
        out[device] = out.get(device, 0) + int(n)
    return out


def _queues(conn: sqlite3.Connection, now_ms: int) -> list[QueueRow]:
    oldest = dict(conn.execute("SELECT queue_id, min(arrived_ms) FROM messages GROUP BY queue_id"))
    expiries: dict[str, dict[str, int]] = {}
    for queue, point, n in conn.execute(
            "SELECT queue, ifnull(check_point, '?'), count(*) FROM journal WHERE kind = 'expired' AND at_ms >= ? "
            "GROUP BY queue, check_point", (now_ms - HOUR_MS,)):
        expiries.setdefault(queue, {})[point] = n
    return [QueueRow(name, kind, depth, size, None if qid not in oldest else max(0, now_ms - oldest[qid]),
                     expiries.get(name, {}))
            for qid, name, kind, depth, size in conn.execute(
                "SELECT id, name, kind, depth, bytes FROM queues ORDER BY name")]


def _per_minute(conn: sqlite3.Connection, kind: str, now_ms: int) -> list[int]:
    start = now_ms - BUCKETS * BUCKET_MS
    counts = dict(conn.execute(
        "SELECT (at_ms - ?) / ?, count(*) FROM journal WHERE kind = ? AND at_ms >= ? AND at_ms < ? "
        "GROUP BY 1", (start, BUCKET_MS, kind, start, now_ms + 1)))
    return [counts.get(i, 0) for i in range(BUCKETS)]

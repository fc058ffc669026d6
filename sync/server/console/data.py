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
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

from edgeq.store.opening import connect
from edgeq.sync.bridges.views import BridgeView, bridge_views
from edgeq.sync.server.admin.records import recent
from edgeq.sync.server.backlog import QueueBacklog, journal_counts, queue_backlogs, reported_backlogs
from edgeq.sync.server.console.lists import LISTS, PAGE, Ask, paged
from edgeq.types import MessageState

__all__ = ["ConsoleView", "DeviceRow", "QueueRow", "console_view", "device_rows", "queue_rows",
           "read_console", "table_names"]

HOUR_MS = 3_600_000
#: the charts' span and resolution: the last hour, by minute
BUCKET_MS, BUCKETS = 60_000, 60
RECENT = PAGE  # the admin requests the fleet page shows (the rest: /console/admin)


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
    messages it still holds, bytes, oldest message's age, drain estimate) and its expiries by check point
    over the span read (the fleet page's: the last hour)."""

    kind: str
    backlog: QueueBacklog
    expiries: dict[str, int]

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
    """Everything one console page shows: each list a page (:mod:`.lists`), ``next`` the next's cursor."""

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
    next: dict[str, str | None] = field(default_factory=dict)
    #: the devices and the queues the filters match, all pages
    matching: dict[str, int] = field(default_factory=dict)


def read_console(path: str | Path, *, now_ms: int, asks: Mapping[str, Ask] | None = None) -> ConsoleView:
    """Read the console's page from the store at ``path`` (read-only) as of ``now_ms``, each list as ``asks``
    says (all: the first page, unfiltered): a constant number of queries for any fleet."""
    with closing(connect(path, read_only=True)) as conn:
        return console_view(conn, path, now_ms, asks or {})


def console_view(conn: sqlite3.Connection, path: str | Path, now_ms: int,
                 asks: Mapping[str, Ask]) -> ConsoleView:
    """:func:`read_console` over ``conn`` (the store at ``path``)."""
    ask = {name: Ask() for name in LISTS}
    ask.update(asks)
    tables = table_names(conn)
    out, dead_lettered, given_up = journal_counts(conn, now_ms)
    devices, next_devices = paged(device_rows(conn, tables, ask=ask["devices"]), lambda d: (d.name,))
    queues, next_queues = paged(queue_rows(conn, now_ms, out=out, ask=ask["queues"]), lambda q: (q.name,))
    expiries, next_expiries = paged(_expiries(conn, ask["expiries"]), lambda r: r[:1])
    refusals, next_refusals = paged(_refusals(conn, tables, ask["refusals"]),
                                    lambda r: (r[0], r[5], r[1], r[2], r[6]))
    parked, next_parked = paged(_parked(conn, ask["parked"]), lambda r: (r[6], r[0], r[2]))
    bridges, next_bridges = paged(_bridges(conn, path, now_ms, out, ask["bridges"]), lambda b: (b.name,))
    matching = dict(zip(("devices", "queues"), conn.execute(
        "SELECT (SELECT count(*) FROM devices WHERE instr(name, ?) > 0), "
        "(SELECT count(*) FROM queues WHERE instr(name, ?) > 0)",
        (ask["devices"].text, ask["queues"].text)).fetchone(), strict=True))
    return ConsoleView(
        now_ms=now_ms,
        devices=devices,
        queues=queues,
        expiries=[r[1:] for r in expiries],
        refusals=[(at, queue, who, count, reason, bool(mine)) for at, queue, who, count, reason, mine, _
                  in refusals],
        parked=[r[:6] for r in parked],
        admin=[(r.request_id, r.device, r.action, r.target, r.created_ms, r.describe(now_ms))
               for r in recent(conn, RECENT)] if "admin_requests" in tables else [],
        throughput=_per_minute(conn, "accepted", now_ms),
        expired=_per_minute(conn, "expired", now_ms),
        bridges=bridges,
        dead_lettered=dead_lettered,
        given_up=given_up,
        next={"devices": next_devices, "queues": next_queues, "expiries": next_expiries,
              "refusals": next_refusals, "parked": next_parked, "bridges": next_bridges},
        matching=matching,
    )


def table_names(conn: sqlite3.Connection) -> set[str]:
    """The store's tables (an older store may lack some the console reads)."""
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _after(ask: Ask, columns: str) -> tuple[str, tuple[int | str, ...]]:
    """The SQL condition (and its arguments) of rows sorted by ``columns`` (descending) past the cursor."""
    return ("", ()) if ask.after is None else (f"AND ({columns}) < ({', '.join('?' * len(ask.after))})",
                                                ask.after)


def _expiries(conn: sqlite3.Connection, ask: Ask) -> list[tuple[int, int, str, str, str | None, str | None]]:
    """The latest expiries (id, at, queue, uid, check point, device) whose queue or device has the filter."""
    after, args = _after(ask, "id")
    return conn.execute(
        "SELECT id, at_ms, queue, uid, check_point, device FROM journal WHERE kind = 'expired' "
        f"AND (instr(queue, ?) > 0 OR instr(ifnull(device, ''), ?) > 0) {after} ORDER BY id DESC LIMIT ?",
        (ask.text, ask.text, *args, PAGE + 1)).fetchall()


def _refusals(conn: sqlite3.Connection, tables: set[str],
              ask: Ask) -> list[tuple[int, str, str, int, str, int, int | str]]:
    """The latest refusals whose queue or device holds the filter: what this server refused of its devices
    (``device_refusals``), and what targets refused of this store's own remote queues (``refusals``, by
    message); each row's last part completes its sort key."""
    here = ("SELECT last_ms AS at, queue AS q, device AS who, count, last_detail, 1 AS mine, reason AS k "
            "FROM device_refusals UNION ALL " if "device_refusals" in tables else "")
    after, args = _after(ask, "at, mine, q, who, k")
    return conn.execute(
        f"SELECT * FROM ({here}SELECT r.last_ms AS at, q.name AS q, r.origin AS who, r.count, r.last_reason, "
        "0 AS mine, r.stamp AS k FROM refusals r JOIN queues q ON q.id = r.queue_id) "
        f"WHERE (instr(q, ?) > 0 OR instr(who, ?) > 0) {after} "
        "ORDER BY at DESC, mine DESC, q DESC, who DESC, k DESC LIMIT ?",
        (ask.text, ask.text, *args, PAGE + 1)).fetchall()


def _parked(conn: sqlite3.Connection, ask: Ask) -> list[tuple[int, str, str, str, int, str, int]]:
    """The parked rule events (event, queue, binding, rule, attempts, error, last at) whose queue holds the
    filter, latest first."""
    after, args = _after(ask, "last_ms, event_id, binding")
    return conn.execute(
        "SELECT event_id, queue, binding, rule, attempts, ifnull(last_error, ''), last_ms FROM rule_failures "
        f"WHERE parked = 1 AND instr(queue, ?) > 0 {after} "
        "ORDER BY last_ms DESC, event_id DESC, binding DESC LIMIT ?", (ask.text, *args, PAGE + 1)).fetchall()


def _bridges(conn: sqlite3.Connection, path: str | Path, now_ms: int, out: Mapping[str, int],
             ask: Ask) -> list[BridgeView]:
    """The bridges whose name holds the filter, by name (read whole: a store defines a few), from ``after``;
    an out-bridge's backlog is its queue's depth as the Queues table counts it."""
    views = bridge_views(path, {q.name: q.depth for q in queue_backlogs(conn, now_ms, out=out)})
    first = "" if ask.after is None else str(ask.after[0])
    found = sorted((b for b in views if ask.text in b.name and b.name > first), key=lambda b: b.name)
    return found[:PAGE + 1]


def device_rows(conn: sqlite3.Connection, tables: set[str], name: str | None = None, *,
                ask: Ask | None = None) -> list[DeviceRow]:
    """The fleet's rows (only device ``name``'s, if given; a page of those ``ask`` filters, if given)."""
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
    text, first, limit = _by_name(ask)
    rows = conn.execute("SELECT name, last_seen_ms, clock_offset_ms, revoked_ms, public_key IS NOT NULL "
                        "FROM devices WHERE (? IS NULL OR name = ?) AND instr(name, ?) > 0 AND name > ? "
                        "ORDER BY name LIMIT ?", (name, name, text, first, limit)).fetchall()
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
               out: Mapping[str, int] | None = None, ask: Ask | None = None,
               span_ms: int = HOUR_MS) -> list[QueueRow]:
    """Each queue (only ``name``, if given; a page of those ``ask`` filters, if given) with its backlog
    figures (:func:`queue_backlogs`, ``out``: its deliveries if read already) and its expiries by check
    point over the last ``span_ms`` (the console discards nothing)."""
    kinds = dict(conn.execute("SELECT name, kind FROM queues WHERE ? IS NULL OR name = ?", (name, name)))
    expiries: dict[str, dict[str, int]] = {}
    for queue, point, n in conn.execute(
            "SELECT queue, ifnull(check_point, '?'), count(*) FROM journal WHERE kind = 'expired' "
            "AND at_ms >= ? AND (? IS NULL OR queue = ?) GROUP BY queue, check_point",
            (now_ms - span_ms, name, name)):
        expiries.setdefault(queue, {})[point] = n
    text, first, limit = _by_name(ask)
    return [QueueRow(kinds[b.name], b, expiries.get(b.name, {}))
            for b in queue_backlogs(conn, now_ms, name, out=out, contains=text, after=first, limit=limit)]


def _by_name(ask: Ask | None) -> tuple[str, str, int]:
    """A list by name: the filter, the name after which its page starts, the rows to read (-1: all)."""
    return ("", "", -1) if ask is None else (ask.text, str((ask.after or ("",))[0]), PAGE + 1)


def _per_minute(conn: sqlite3.Connection, kind: str, now_ms: int) -> list[int]:
    start = now_ms - BUCKETS * BUCKET_MS
    counts = dict(conn.execute(
        "SELECT (at_ms - ?) / ?, count(*) FROM journal WHERE kind = ? AND at_ms >= ? AND at_ms < ? "
        "GROUP BY 1", (start, BUCKET_MS, kind, start, now_ms + 1)))
    return [counts.get(i, 0) for i in range(BUCKETS)]

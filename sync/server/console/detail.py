"""What the console's drill-down pages show: one device, one queue (and its messages), the admin requests;
read from the home server's store (read-only), with the management API's readers (:mod:`..api.browse`)."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from edgeq.store.devices import DeviceTx
from edgeq.store.opening import connect
from edgeq.store.tx import Tx
from edgeq.sync.server.admin.records import AdminRecord, page, page_cursor
from edgeq.sync.server.api.browse import message_page, one_message
from edgeq.sync.server.console.data import DeviceRow, QueueRow, device_rows, queue_rows, table_names
from edgeq.sync.server.console.lists import PAGE
from edgeq.sync.server.series import RANGES, buckets, journal_series
from edgeq.types import CHECK_POINTS, MessageState
from edgeq.uid import MessageUID

__all__ = ["CHARTED", "KINDS", "PAGE", "POINTS", "AdminPage", "DeviceHealth", "DevicePage",
           "DeviceQueue", "QueuePage", "read_admin", "read_device", "read_message", "read_queue"]

#: the journal kinds a queue's chart draws, by its series' names
CHARTED: Final[Mapping[str, str]] = {"in": "accepted", "out": "delivered", "expired": "expired"}
#: what a queue page counts of the journal (docs/console.md): in, out, and what expired or was dropped
KINDS: Final[Mapping[str, str]] = {
    "accepted": "in (pushes accepted)", "delivered": "out (got or confirmed)", "expired": "expired",
    "dead-lettered": "dead-lettered", "discarded": "discarded"}
#: the check points as a queue page heads them (MQe's words beside edgeq's: types.CHECK_POINTS)
POINTS: Final[Mapping[str, str]] = {
    p: {"add": "add (put)", "get": "remove (get)", "depth": "size inquiry (depth)"}.get(p, p)
    for p in CHECK_POINTS}


@dataclass(frozen=True)
class AdminPage:
    """A page of admin requests, newest first, and the cursor of the next (None: this is the last)."""

    records: list[AdminRecord]
    next: str | None


@dataclass(frozen=True)
class DeviceQueue:
    """A queue as one device uses it: pushed (journal ``accepted``), held unconfirmed, refused; whether
    the server defines it and whether the device may push to it."""

    name: str
    pushed: int
    held: int
    refused: int
    defined: bool
    allowed: bool


@dataclass(frozen=True)
class DevicePage:
    """One device: its fleet row, registry entry, queues and admin history."""

    row: DeviceRow
    added_ms: int
    agent: str | None
    allowed: tuple[str, ...] | None  # the queues it may push to (None: any)
    queues: list[DeviceQueue]
    admin: AdminPage
    health: DeviceHealth | None = None


@dataclass(frozen=True)
class DeviceHealth:
    """A device over ``range``, per :data:`STEPS` ``[range]`` from ``start_ms`` (the journal's ``accepted``
    rows): the messages accepted from it, and its mean clock offset (None: it pushed nothing then)."""

    range: str
    start_ms: int
    accepted: list[int]
    offset_ms: list[float | None]


@dataclass(frozen=True)
class QueuePage:
    """One queue: its console row (its expiries by check point over ``range``), encryption, journal counts by
    kind over ``range`` and per
    :data:`STEPS` ``[range]`` from ``start_ms`` (:data:`CHARTED`), a page of messages."""

    row: QueueRow
    encryption: str | None
    range: str
    counts: dict[str, int]
    messages: list[dict[str, Any]]
    next: int | None
    start_ms: int = 0
    series: dict[str, list[int]] = field(default_factory=dict)


def _admin(conn: sqlite3.Connection, device: str | None, replied: bool | None,
           before: tuple[int, str] | None) -> AdminPage:
    found = page(conn, device=device, replied=replied, before=before, limit=PAGE)
    return AdminPage(found, page_cursor(found, PAGE))


def read_admin(path: str | Path, *, device: str | None, replied: bool | None,
               before: tuple[int, str] | None) -> AdminPage:
    """A page of the admin requests (only ``device``'s, only replied or unreplied ones, if given)."""
    with closing(connect(path, read_only=True)) as conn:
        return _admin(conn, device, replied, before)


def read_device(path: str | Path, name: str, *, before: tuple[int, str] | None, now_ms: int = 0,
                span: str = "1h") -> DevicePage | None:
    """Device ``name``'s page (None: the server has never heard of it); ``before`` pages its admin history;
    its health over :data:`RANGES` ``[span]`` up to ``now_ms``."""
    with closing(connect(path, read_only=True)) as conn:
        record = DeviceTx(conn).get(name)
        if record is None:
            return None
        tables = table_names(conn)
        (row,) = device_rows(conn, tables, name)
        pushed = dict(conn.execute(
            "SELECT queue, count(*) FROM journal WHERE kind = 'accepted' AND device = ? GROUP BY queue",
            (name,)))
        held = dict(conn.execute(  # its origins: "NAME:incarnation", the range from "NAME:" to "NAME;"
            f"SELECT q.name, count(*) FROM messages m JOIN queues q ON q.id = m.queue_id "
            f"WHERE m.state = {MessageState.PUT_LOCKED:d} AND m.origin >= ? AND m.origin < ? GROUP BY q.name",
            (name + ":", name + ";")))
        refused = dict(conn.execute(
            "SELECT queue, sum(count) FROM device_refusals WHERE device = ? GROUP BY queue", (name,),
        ) if "device_refusals" in tables else ())
        defined = {q for (q,) in conn.execute("SELECT name FROM queues")}
        names = sorted({*pushed, *held, *refused, *(record.queues or ())})
        queues = [DeviceQueue(q, pushed.get(q, 0), held.get(q, 0), refused.get(q, 0), q in defined,
                              record.queues is None or q in record.queues) for q in names]
        admin = _admin(conn, name, None, before) if "admin_requests" in tables else AdminPage([], None)
        health = _health(conn, name, now_ms, span)
    return DevicePage(row, record.added_ms, record.agent, record.queues, queues, admin, health)


def _health(conn: sqlite3.Connection, name: str, now_ms: int, span: str) -> DeviceHealth:
    b = buckets(now_ms, span)
    found = {i: (n, offset) for i, n, offset in conn.execute(
        "SELECT (at_ms - ?) / ?, count(*), avg(clock_offset_ms) FROM journal WHERE kind = 'accepted' "
        "AND device = ? AND at_ms >= ? AND at_ms < ? GROUP BY 1", (b.start_ms, b.step_ms, name, b.start_ms,
                                                                  b.end_ms))}
    return DeviceHealth(span, b.start_ms, [found.get(i, (0, None))[0] for i in range(b.count)],
                        [found.get(i, (0, None))[1] for i in range(b.count)])


def read_queue(path: str | Path, name: str, *, now_ms: int, span: str,
               after: int | None) -> QueuePage | None:
    """Queue ``name``'s page (None: no such queue): journal counts over :data:`RANGES` ``[span]``, and
    :data:`PAGE` messages after the cursor ``after``."""
    with closing(connect(path, read_only=True)) as conn:
        queue = Tx(conn).queue(name)
        if queue is None:
            return None
        (row,) = queue_rows(conn, now_ms, name, span_ms=RANGES[span])
        counts = dict(conn.execute(
            "SELECT kind, count(*) FROM journal WHERE queue = ? AND at_ms >= ? GROUP BY kind",
            (name, now_ms - RANGES[span])))
        found = message_page(conn, name, after=after, size=PAGE, now_ms=now_ms)
        series = journal_series(conn, now_ms, span, queue=name)
    charted = {label: series.counts[kind] for label, kind in CHARTED.items()}
    return QueuePage(row, queue.encryption, span, counts, found["messages"], found["next"],
                     series.buckets.start_ms, charted)


def read_message(path: str | Path, queue: str, uid: MessageUID, *, now_ms: int) -> dict[str, Any] | None:
    """``queue``'s message ``uid``, whole, as the API shows it (None: not there; no such queue raises)."""
    with closing(connect(path, read_only=True)) as conn:
        return one_message(conn, queue, uid, now_ms=now_ms)

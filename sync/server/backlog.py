"""The backlog figures the console, the management API and ``/metrics`` show (docs/console.md, "Backlog"):
per queue, per device, and what was dead-lettered or given up; a constant number of queries for any fleet.

>>> import tempfile, os
>>> from edgeq import Message, QueueManager
>>> path = os.path.join(tempfile.mkdtemp(), "home.db")
>>> qm = QueueManager(path, name="HOME", clock=lambda: 1_000); qm.define_queue("ORDERS", expiry_ms=60_000)
>>> _ = qm.put("ORDERS", Message(b"x")); qm.close()
>>> [(q.name, q.depth, q.oldest_age_ms, q.drain_ms) for q in read_backlog(path, now_ms=31_000).queues]
[('ORDERS', 1, 30000, None)]
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from edgeq.store.opening import connect

__all__ = ["RATE_WINDOW_MS", "Backlog", "DeviceBacklog", "QueueBacklog", "journal_counts", "queue_backlogs",
           "read_backlog", "reported_backlogs"]

#: the recent window a queue's out-rate is read over (journal ``delivered`` rows)
RATE_WINDOW_MS: Final = 15 * 60_000


@dataclass(frozen=True, slots=True)
class QueueBacklog:
    """One queue's backlog: depth as ``QueueManager.depth`` counts it (expired messages apart), bytes as
    stored, its oldest unexpired message's age from creation, the out-rate over :data:`RATE_WINDOW_MS`,
    the time to drain at that rate (None: nothing went out, so no estimate) and its ``expiry_ms``."""

    name: str
    depth: int
    expired: int
    bytes: int
    oldest_age_ms: int | None
    out_per_s: float
    drain_ms: int | None
    expiry_ms: int | None


@dataclass(frozen=True, slots=True)
class DeviceBacklog:
    """A device: the backlog it last reported pushing (None: it never did) and when, and its last contact."""

    name: str
    backlog: int | None
    reported_ms: int | None
    last_seen_ms: int | None


@dataclass(frozen=True, slots=True)
class Backlog:
    """Every figure, as of ``now_ms``; ``dead_lettered`` and ``given_up``: journal counts by reason."""

    now_ms: int
    queues: list[QueueBacklog]
    devices: list[DeviceBacklog]
    dead_lettered: dict[str, int]
    given_up: dict[str, int]


def queue_backlogs(conn: sqlite3.Connection, now_ms: int, name: str | None = None, *,
                   out: Mapping[str, int] | None = None, contains: str = "", after: str = "",
                   limit: int = -1) -> list[QueueBacklog]:
    """Each queue's figures (only ``name``'s, if given; a page: names holding ``contains``, after ``after``,
    at most ``limit``), by name: three queries for any number of queues (two when ``out``, the deliveries
    of :func:`journal_counts`, is given)."""
    oldest = dict(conn.execute("SELECT queue_id, min(created_ms) FROM messages WHERE deadline IS NULL "
                               "OR deadline > ? GROUP BY queue_id", (now_ms,)))
    if out is None:
        out = dict(conn.execute("SELECT queue, count(*) FROM journal WHERE kind = 'delivered' AND at_ms > ? "
                                "AND at_ms <= ? GROUP BY queue", (now_ms - RATE_WINDOW_MS, now_ms)))
    found = []
    for qid, queue, depth, size, expiry, expired in conn.execute(
            "SELECT id, name, depth, bytes, expiry_ms, "
            "(SELECT count(*) FROM messages m WHERE m.queue_id = q.id AND m.deadline IS NOT NULL "
            "AND m.deadline <= ?) FROM queues q WHERE (? IS NULL OR name = ?) AND instr(name, ?) > 0 "
            "AND name > ? ORDER BY name LIMIT ?", (now_ms, name, name, contains, after, limit)):
        rate = out.get(queue, 0) * 1000 / RATE_WINDOW_MS
        held = depth - expired
        found.append(QueueBacklog(
            queue, held, expired, size, None if qid not in oldest else max(0, now_ms - oldest[qid]), rate,
            round(held / rate * 1000) if rate else None, expiry))
    return found


def journal_counts(conn: sqlite3.Connection, now_ms: int) -> tuple[dict[str, int], dict[str, int],
                                                                     dict[str, int]]:
    """In one pass over the journal: deliveries per queue over :data:`RATE_WINDOW_MS`, and every
    ``dead-lettered`` and ``discarded`` (given up) row by reason."""
    found: dict[str, dict[str, int]] = {"delivered": {}, "dead-lettered": {}, "discarded": {}}
    for kind, key, n in conn.execute(
            "SELECT kind, CASE kind WHEN 'delivered' THEN queue ELSE ifnull(check_point, '?') END, count(*) "
            "FROM journal WHERE (kind = 'delivered' AND at_ms > ? AND at_ms <= ?) "
            "OR kind IN ('dead-lettered', 'discarded') GROUP BY 1, 2 ORDER BY 1, 2",
            (now_ms - RATE_WINDOW_MS, now_ms)):
        found[kind][key] = n
    return found["delivered"], found["dead-lettered"], found["discarded"]


def reported_backlogs(conn: sqlite3.Connection) -> dict[str, tuple[int, int]]:
    """Each device's reported backlog (its queues' latest reports summed) and when it last reported."""
    return {device: (n, at) for device, n, at in conn.execute(
        "SELECT device, sum(messages), max(reported_ms) FROM device_backlogs GROUP BY device")}


def _devices(conn: sqlite3.Connection) -> list[DeviceBacklog]:
    reported = reported_backlogs(conn)
    rows = conn.execute("SELECT name, last_seen_ms FROM devices ORDER BY name").fetchall()
    return [DeviceBacklog(name, reported[name][0] if name in reported else None,
                          reported[name][1] if name in reported else None, seen) for name, seen in rows]


def read_backlog(path: str | Path, *, now_ms: int) -> Backlog:
    """Every figure of the store at ``path`` (read-only) as of ``now_ms``: one pass over the journal."""
    with closing(connect(path, read_only=True)) as conn:
        out, dead, given = journal_counts(conn, now_ms)
        return Backlog(now_ms, queue_backlogs(conn, now_ms, out=out), _devices(conn), dead, given)

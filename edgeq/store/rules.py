"""The storage contract for rules: bindings, durable events, failures and counters, each verb
in the caller's transaction (policy: ``edgeq.events.dispatch``)."""

from __future__ import annotations

import json
import logging
import sqlite3
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, get_args

import cbor2

from edgeq.store.damage import damaged
from edgeq.store.records import MessageRow, is_intact
from edgeq.store.verify import stripped
from edgeq.types import CHECK_POINTS, RemovalReason

__all__ = ["BindingRow", "EventRow", "FailureRow", "RuleTx"]

log = logging.getLogger("edgeq.rules")

#: What a recorded event's ``detail`` may be, by its kind.
_DETAILS: dict[object, frozenset[object]] = {
    "expired": frozenset(CHECK_POINTS), "removed": frozenset(get_args(RemovalReason)),
}


@dataclass(frozen=True, slots=True)
class BindingRow:
    """A persisted rule binding: rule ``name`` with its ``config``, at ``position`` on ``queue``."""
    id: int
    queue: str
    position: int
    name: str
    config: dict[str, Any]


@dataclass(frozen=True, slots=True)
class EventRow:
    """A durable rule event and a copy of its message row (None: quarantined, uid unreadable)."""
    id: int
    queue: str
    kind: str
    detail: str | None
    at_ms: int
    row: MessageRow | None


@dataclass(frozen=True, slots=True)
class FailureRow:
    """A delivery of a durable event to one rule binding that raised."""

    event_id: int
    binding: str
    rule: str
    queue: str
    attempts: int
    last_error: str
    last_ms: int
    next_ms: int
    parked: bool


_FAILURE_COLS = "event_id, binding, rule, queue, attempts, last_error, last_ms, next_ms, parked"


class RuleTx:
    """The SQL of rules: bindings, durable events, failures and counters."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    # -- bindings ----------------------------------------------------------------------

    def bindings(self, queue: str | None = None) -> list[BindingRow]:
        """The persisted bindings of one queue (or of all), by queue then position."""
        where, args = ("WHERE q.name = ?", (queue,)) if queue is not None else ("", ())
        rows = self.conn.execute(
            "SELECT b.id, q.name, b.position, b.name, b.config FROM rule_bindings b "
            f"JOIN queues q ON q.id = b.queue_id {where} ORDER BY q.name, b.position",
            args,
        ).fetchall()
        return [BindingRow(r[0], r[1], r[2], r[3], self._config(r)) for r in rows]

    def _config(self, r: tuple[Any, ...]) -> dict[str, Any]:
        try:
            config = json.loads(r[4])
        except (TypeError, ValueError) as exc:
            config = exc
        if not isinstance(config, dict):
            raise damaged(
                f"the config of rule binding {r[0]} ({r[3]!r} on queue {r[1]!r}) is unreadable "
                f"({config}); `edgeq check --repair` sets the binding aside: bind the rule again "
                "with alter_queue(..., rules=[...])",
                self.conn,
            )
        return config

    def replace_bindings(
        self, queue_id: int, specs: Sequence[tuple[str, Mapping[str, Any]]]
    ) -> list[int]:
        """Replace a queue's bindings with ``specs`` (in order); return the new binding ids."""
        self.conn.execute("DELETE FROM rule_bindings WHERE queue_id = ?", (queue_id,))
        ids = []
        for position, (name, config) in enumerate(specs):
            (new_id,) = self.conn.execute(
                "INSERT INTO rule_bindings (queue_id, position, name, config) VALUES (?, ?, ?, ?) "
                "RETURNING id",
                (queue_id, position, name, json.dumps(dict(config), sort_keys=True)),
            ).fetchone()
            ids.append(int(new_id))
        return ids

    # -- durable events ------------------------------------------------------------------

    def record(self, queue: str, kind: str, detail: str | None, at_ms: int, row: MessageRow) -> int:
        """Record a durable event with a copy of its message row; return the event id."""
        (event_id,) = self.conn.execute(
            "INSERT INTO rule_events (queue, kind, detail, at_ms, message) VALUES (?, ?, ?, ?, ?) "
            "RETURNING id",
            (queue, kind, detail, at_ms, cbor2.dumps(list(row))),
        ).fetchone()
        return int(event_id)

    def _event(self, r: tuple[Any, ...]) -> EventRow:
        """A recorded event as its rules see it; a damaged one as a quarantined message's removal."""
        event_id, queue, kind, detail, at_ms, blob = r
        row: MessageRow | None = None
        why = (
            None if isinstance(queue, str) and detail in _DETAILS.get(kind, ()) and type(at_ms) is int
            else "its queue, kind, reason or time is unreadable"
        )
        try:
            # Rows recorded by an older schema have fewer trailing columns: their defaults apply.
            row = MessageRow(*cbor2.loads(blob))
        except Exception as exc:  # whatever a damaged blob decodes to (or fails with)
            why = f"its message copy is unreadable ({type(exc).__name__})"
        if why is None and row is not None and detail == "quarantined":
            # never more than a uid
            return EventRow(event_id, queue, kind, detail, at_ms, stripped(row))
        if why is None and row is not None and is_intact(queue, row):
            return EventRow(event_id, queue, kind, detail, at_ms, row)
        log.error("rule event %s on queue %s is damaged in the store (%s): its rules are told the "
                  "message was quarantined; run `edgeq check` to look for more damage", event_id, queue,
                  why or "its message copy fails its checksum")
        return EventRow(
            event_id, str(queue), "removed", "quarantined", at_ms if type(at_ms) is int else 0,
            stripped(row) if row is not None else None,
        )

    def pending(self) -> list[EventRow]:
        """Events recorded but not yet delivered (a crash came between), oldest first."""
        rows = self.conn.execute(
            "SELECT id, queue, kind, detail, at_ms, message FROM rule_events WHERE delivered = 0 "
            "ORDER BY id"
        ).fetchall()
        return [self._event(r) for r in rows]

    def event(self, event_id: int) -> EventRow | None:
        r = self.conn.execute(
            "SELECT id, queue, kind, detail, at_ms, message FROM rule_events WHERE id = ?", (event_id,)
        ).fetchone()
        return None if r is None else self._event(r)

    def finish(self, event_ids: Sequence[int]) -> None:
        """Forget delivered events, except those a failed delivery still needs for its retry."""
        for start in range(0, len(event_ids), 500):
            chunk = event_ids[start : start + 500]
            marks = ", ".join("?" for _ in chunk)
            self.conn.execute(
                f"DELETE FROM rule_events WHERE id IN ({marks}) "
                "AND id NOT IN (SELECT event_id FROM rule_failures)",
                chunk,
            )
            self.conn.execute(f"UPDATE rule_events SET delivered = 1 WHERE id IN ({marks})", chunk)

    # -- failures ----------------------------------------------------------------------

    def fail(
        self, event_id: int, binding: str, rule: str, queue: str, error: str, now_ms: int, limit: int,
        base_ms: int,
    ) -> FailureRow:
        """Count one more failed delivery; park it once ``limit`` attempts have failed."""
        row = self.conn.execute(
            "SELECT attempts FROM rule_failures WHERE event_id = ? AND binding = ?", (event_id, binding)
        ).fetchone()
        attempts = 1 + (row[0] if row else 0)
        next_ms = now_ms + min(base_ms * 2 ** (attempts - 1), 3_600_000)
        parked = attempts >= limit
        self.conn.execute(
            f"INSERT OR REPLACE INTO rule_failures ({_FAILURE_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (event_id, binding, rule, queue, attempts, error, now_ms, next_ms, int(parked)),
        )
        return FailureRow(event_id, binding, rule, queue, attempts, error, now_ms, next_ms, parked)

    def succeed(self, event_id: int, binding: str) -> None:
        """A retry worked: drop the failure, and the event once nothing else needs it."""
        self.conn.execute(
            "DELETE FROM rule_failures WHERE event_id = ? AND binding = ?", (event_id, binding)
        )
        self.conn.execute(
            "DELETE FROM rule_events WHERE id = ? AND delivered = 1 "
            "AND id NOT IN (SELECT event_id FROM rule_failures)",
            (event_id,),
        )

    def failures(self, *, parked: bool | None = None, due_ms: int | None = None,
                 after: tuple[int, str] | None = None, limit: int = -1) -> list[FailureRow]:
        """Failed deliveries by event: all, parked (or unparked) ones, or those due by ``due_ms``;
        a page: those after ``after`` (a row's event id and binding), at most ``limit`` (-1: all)."""
        clauses: list[str] = []
        args: list[object] = []
        if parked is not None:
            clauses.append("parked = ?")
            args.append(int(parked))
        if due_ms is not None:
            clauses.append("next_ms <= ?")
            args.append(due_ms)
        if after is not None:
            clauses.append("(event_id, binding) > (?, ?)")
            args += after
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        rows = self.conn.execute(
            f"SELECT {_FAILURE_COLS} FROM rule_failures {where} ORDER BY event_id, binding LIMIT ?",
            (*args, limit),
        ).fetchall()
        return [FailureRow(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], bool(r[8])) for r in rows]

    def drop(self, event_id: int) -> list[FailureRow]:
        """Give up ``event_id``'s parked deliveries: forget them, and the event once nothing else needs it."""
        rows = self.conn.execute(
            f"SELECT {_FAILURE_COLS} FROM rule_failures WHERE event_id = ? AND parked = 1 ORDER BY binding",
            (event_id,)).fetchall()
        self.conn.execute("DELETE FROM rule_failures WHERE event_id = ? AND parked = 1", (event_id,))
        self.conn.execute("DELETE FROM rule_events WHERE id = ? AND delivered = 1 "
                          "AND id NOT IN (SELECT event_id FROM rule_failures)", (event_id,))
        return [FailureRow(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], bool(r[8])) for r in rows]

    def next_retry_ms(self) -> int | None:
        """When the earliest unparked failed delivery is due for a retry, or None."""
        (value,) = self.conn.execute(
            "SELECT min(next_ms) FROM rule_failures WHERE parked = 0"
        ).fetchone()
        return None if value is None else int(value)

    def rearm(self, now_ms: int, event_id: int | None = None) -> int:
        """Give parked deliveries (all, or one event's) a fresh round of attempts."""
        where, args = ("AND event_id = ?", (event_id,)) if event_id is not None else ("", ())
        cur = self.conn.execute(
            f"UPDATE rule_failures SET parked = 0, attempts = 0, next_ms = ? WHERE parked = 1 {where}",
            (now_ms, *args),
        )
        return cur.rowcount

    # -- counters ----------------------------------------------------------------------

    def apply_stats(
        self, queue: str, batch: Sequence[tuple[Mapping[str, int], int | None]]
    ) -> list[bool]:
        """Add each ``(increments, event_id)`` to a queue's counters once per event id; return
        whether each was applied (a constant number of statements)."""
        ids = [event_id for _, event_id in batch if event_id is not None]
        fresh: set[int] = set()
        if ids:
            fresh = {r[0] for r in self.conn.execute(
                "INSERT OR IGNORE INTO stats_applied (event_id) SELECT value FROM json_each(?) "
                "RETURNING event_id",
                (json.dumps(ids),),
            )}
            # Ids below the oldest event still held can never be delivered again.
            self.conn.execute(
                "DELETE FROM stats_applied "
                "WHERE event_id < coalesce((SELECT min(id) FROM rule_events), ?)",
                (min(ids),),
            )
        applied, totals = [], Counter[str]()
        for increments, event_id in batch:
            # An id already counted (a redelivery after a crash), or twice in this batch, counts once.
            ok = event_id is None or event_id in fresh
            if ok and event_id is not None:
                fresh.remove(event_id)
            applied.append(ok)
            if ok:
                totals.update(increments)
        if totals:
            self.conn.executemany(
                "INSERT INTO queue_stats (queue, counter, value) VALUES (?, ?, ?) "
                "ON CONFLICT (queue, counter) DO UPDATE SET value = value + excluded.value",
                [(queue, name, int(n)) for name, n in totals.items()],
            )
        return applied

    def stats(self, queue: str) -> dict[str, int]:
        rows = self.conn.execute(
            "SELECT counter, value FROM queue_stats WHERE queue = ? ORDER BY counter", (queue,)
        ).fetchall()
        return {name: int(value) for name, value in rows}

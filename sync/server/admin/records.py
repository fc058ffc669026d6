"""A home server's record of the admin requests it sent and the replies it received
(table ``admin_requests``). What each status means: docs/admin.md, "What the operator is told".
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeAlias

from edgeq.admin.wire import ADMIN_QUEUE, AdminReply, AdminRequest
from edgeq.errors import AdminError, InvalidArgument
from edgeq.store.connection import ConnectionFactory
from edgeq.store.damage import damaged
from edgeq.types import MessageState

__all__ = ["AdminRecord", "AdminRecords", "RequestStatus", "page", "page_cursor", "plain_json", "read_cursor",
           "recent", "unauthenticated"]

#: ``expired``: never handed to the device, so never run; ``unknown``: handed over, it may have run.
RequestStatus: TypeAlias = Literal["pending", "replied", "expired", "unknown"]
#: How each status without a reply reads, wherever the operator looks.
_SAID: Final[Mapping[str, str]] = {
    "pending": "pending", "expired": "expired before delivery: never executed",
    "unknown": "outcome unknown until the device answers",
}

_COLS = "request_id, device, action, target, request, created_ms, expires_ms, replied_ms, rc, reply"
#: Whether a pull holds the request's message locked right now (handing it over), read once per
#: query as a set of the admin queues' locked messages (the confirm-id index).
_IN_FLIGHT = (
    "a.replied_ms IS NULL AND a.delivered_ms IS NULL "
    f"AND (a.device || '.{ADMIN_QUEUE}', a.request_id) "
    "IN (SELECT q.name, lower(hex(m.correlation_id)) FROM queues q CROSS JOIN messages m "
    f"ON m.queue_id = q.id WHERE q.name LIKE '%.{ADMIN_QUEUE}' AND m.confirm_id IS NOT NULL "
    f"AND m.state = {MessageState.GET_LOCKED:d})"
)
_SELECT = f"SELECT {_COLS}, delivered_ms, {_IN_FLIGHT} FROM admin_requests a"
#: a page's cursor: the last request's ``created_ms`` and ``request_id``
_CURSOR = re.compile(r"(\d{1,18})-([0-9A-Za-z._-]{1,64})")


@dataclass(frozen=True, slots=True)
class AdminRecord:
    """One admin request as the home server recorded it, with its reply once received."""

    request_id: str
    device: str
    action: str
    target: str | None
    created_ms: int
    expires_ms: int | None
    replied_ms: int | None
    rc: str | None
    reply: AdminReply | None
    #: the signed request exactly as sent (to send it again)
    request: bytes
    #: when a pull of the server first handed it to the device (None: never)
    delivered_ms: int | None = None
    #: a pull holds its message right now (being handed over: as good as delivered)
    in_flight: bool = False

    @property
    def delivered(self) -> bool:
        """Whether the device may have it: a pull handed it over, or is handing it over."""
        return self.delivered_ms is not None or self.in_flight

    def status(self, now_ms: int) -> RequestStatus:
        """How it stands at ``now_ms``.

        >>> from dataclasses import replace
        >>> r = AdminRecord("ab", "DEV1", "inquire-all", None, 1_000, 2_000, None, None, None, b"")
        >>> r.status(1_999), r.status(2_000), replace(r, delivered_ms=1_500).status(2_000)
        ('pending', 'expired', 'unknown')
        """
        if self.replied_ms is not None:
            return "replied"
        if self.expires_ms is None or now_ms < self.expires_ms:
            return "pending"
        return "unknown" if self.delivered else "expired"

    def describe(self, now_ms: int) -> str:
        """The status in words, the same wherever the operator reads it."""
        status = self.status(now_ms)
        return f"replied: {self.rc}" if status == "replied" else _SAID[status]

    def as_dict(self, now_ms: int) -> dict[str, Any]:
        reply = self.reply
        return {
            "request_id": self.request_id, "device": self.device, "action": self.action,
            "target": self.target, "created_ms": self.created_ms, "expires_ms": self.expires_ms,
            "status": self.status(now_ms),
            "described": self.describe(now_ms), "delivered_ms": self.delivered_ms,
            "replied_ms": self.replied_ms, "rc": self.rc,
            "reply": None if reply is None else {
                "rc": reply.rc, "message": reply.message, "executed_ms": reply.executed_ms,
                "results": [plain_json(item) for item in reply.results],
            },
        }


def plain_json(value: object) -> Any:
    """A reply value as JSON takes it: maps and lists as such, bytes as hex.

    >>> from types import MappingProxyType
    >>> plain_json(MappingProxyType({"a": (1, b"\\x01")}))
    {'a': [1, '01']}
    """
    if isinstance(value, Mapping):
        return {str(k): plain_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_json(v) for v in value]
    if isinstance(value, bytes):
        return value.hex()
    return value


def _record(row: tuple[Any, ...], conn: sqlite3.Connection) -> AdminRecord:
    reply = None
    if row[9] is not None:
        try:
            reply = AdminReply.from_bytes(bytes(row[9]))
        except AdminError as exc:
            raise damaged(f"the reply recorded for admin request {row[0]!r} is unreadable ({exc})",
                          conn) from exc
    return AdminRecord(row[0], row[1], row[2], row[3], row[5], row[6], row[7], row[8], reply,
                       bytes(row[4]), row[10], bool(row[11]))


def recent(conn: sqlite3.Connection, limit: int) -> list[AdminRecord]:
    """The latest ``limit`` requests on ``conn`` (read-only is fine): unreplied first, newest first."""
    rows = conn.execute(
        f"{_SELECT} ORDER BY a.replied_ms IS NOT NULL, a.created_ms DESC, a.request_id LIMIT ?", (limit,))
    return [_record(row, conn) for row in rows]


def page(conn: sqlite3.Connection, *, device: str | None, replied: bool | None,
         before: tuple[int, str] | None, limit: int) -> list[AdminRecord]:
    """Up to ``limit`` requests, newest first: only ``device``'s, only replied (or unreplied) ones,
    if given; only those older than ``before`` (``created_ms``, ``request_id``: a page's last)."""
    where: list[str] = ["1"]
    args: list[object] = []
    if device is not None:
        where.append("a.device = ?")
        args.append(device)
    if replied is not None:
        where.append(f"a.replied_ms IS {'NOT ' if replied else ''}NULL")
    if before is not None:
        where.append("(a.created_ms, a.request_id) < (?, ?)")
        args += before
    rows = conn.execute(f"{_SELECT} WHERE {' AND '.join(where)} "
                        "ORDER BY a.created_ms DESC, a.request_id DESC LIMIT ?", (*args, limit))
    return [_record(row, conn) for row in rows]


def page_cursor(found: list[AdminRecord], limit: int) -> str | None:
    """The cursor of the page after ``found`` (a full page of ``limit``), or None: it was the last."""
    last = found[-1] if len(found) == limit and found else None
    return None if last is None else f"{last.created_ms}-{last.request_id}"


def read_cursor(text: str | None) -> tuple[int, str] | None:
    """The ``before`` of :func:`page` a :func:`page_cursor` names (None: the first page); a
    :class:`InvalidArgument` if ``text`` is not one."""
    if not text:
        return None
    match = _CURSOR.fullmatch(text)
    if match is None:
        raise InvalidArgument(f"after must be the 'next' of the page before, not {text[:40]!r}")
    return int(match[1]), match[2]


def unauthenticated(reply: AdminReply) -> bool:
    """Whether ``reply`` refuses a request the device could not authenticate (anyone may cause one)."""
    return any(item.get("authenticated") is False for item in reply.results)


def _stored(data: bytes, reply: AdminReply, conn: sqlite3.Connection) -> AdminReply:
    try:
        return AdminReply.from_bytes(bytes(data))
    except AdminError as exc:
        raise damaged(
            f"the reply recorded for admin request {reply.request_id!r} is unreadable ({exc})", conn,
        ) from exc


class AdminRecords:
    """The ``admin_requests`` table of the home store at ``path``, on its own connections (open the
    store with a QueueManager first: that brings its schema up to date)."""

    def __init__(self, path: str, *, timeout: float = 30.0) -> None:
        self._db = ConnectionFactory(path, timeout=timeout)

    def close(self) -> None:
        self._db.close()

    def add(self, request: AdminRequest, data: bytes) -> None:
        with self._db.write() as conn:
            conn.execute(
                f"INSERT INTO admin_requests ({_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, NULL, NULL, NULL)",
                (request.request_id, request.device, request.action, request.target, data,
                 request.created_ms, request.expires_ms),
            )

    def get(self, request_id: str) -> AdminRecord | None:
        with self._db.read() as conn:
            row = conn.execute(f"{_SELECT} WHERE a.request_id = ?", (request_id,)).fetchone()
            return None if row is None else _record(row, conn)

    def handed_over(self, device: str, request_ids: Iterable[str], now_ms: int) -> int:
        """Mark the requests a pull of ``device`` hands over as delivered (after the get, before the
        answer leaves); return how many were new."""
        ids = list(request_ids)
        if not ids:
            return 0
        with self._db.write() as conn:
            return conn.execute(
                f"UPDATE admin_requests SET delivered_ms = ? WHERE device = ? AND delivered_ms IS NULL "
                f"AND request_id IN ({', '.join('?' * len(ids))})", (now_ms, device, *ids)).rowcount

    def reply(self, reply: AdminReply, data: bytes,
              now_ms: int) -> Literal["recorded", "already", "unknown"]:
        """Record ``reply`` for its request, if it went to ``reply.device``; the first answer stands,
        but an :func:`unauthenticated` refusal gives way to a genuine answer."""
        with self._db.write() as conn:
            row = conn.execute(
                "SELECT replied_ms, reply FROM admin_requests WHERE request_id = ? AND device = ?",
                (reply.request_id, reply.device)).fetchone()
            if row is None:
                return "unknown"
            if row[0] is not None and (
                    unauthenticated(reply) or not unauthenticated(_stored(row[1], reply, conn))):
                return "already"
            conn.execute(
                "UPDATE admin_requests SET replied_ms = ?, rc = ?, reply = ? WHERE request_id = ?",
                (now_ms, reply.rc, data, reply.request_id))
            return "recorded"

    def pending(self, device: str | None = None) -> list[AdminRecord]:
        """The requests with no reply yet (expired and unknown ones too), oldest first."""
        sql = f"{_SELECT} WHERE a.replied_ms IS NULL"
        return self._select(sql, device, "a.created_ms")

    def replied(self, device: str | None = None, *, limit: int = 100) -> list[AdminRecord]:
        sql = f"{_SELECT} WHERE a.replied_ms IS NOT NULL"
        return self._select(sql, device, "a.replied_ms DESC", limit)

    def _select(self, sql: str, device: str | None, order: str,
                limit: int | None = None) -> list[AdminRecord]:
        args: list[object] = []
        if device is not None:
            sql += " AND a.device = ?"
            args.append(device)
        sql += f" ORDER BY {order}, a.request_id"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(limit)
        with self._db.read() as conn:
            return [_record(row, conn) for row in conn.execute(sql, args)]

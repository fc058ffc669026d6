"""The SQL of remote administration on a device: trusted operator keys (``admin_keys``), the
replies remembered (``admin_replies``: exactly once), and the ``process_admin`` lease."""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import cbor2

from edgeq.store.damage import damaged

__all__ = ["REFUSED_PREFIX", "AdminKey", "AdminRecord", "AdminTx"]

#: The key under which a refusal of an unauthenticated request is kept (never under the id it
#: claims, so a forged copy cannot stand in for the genuine request): this prefix and a digest.
REFUSED_PREFIX: Final = "refused."
_LEASE_KEY: Final = "admin.lease"


@dataclass(frozen=True, slots=True)
class AdminKey:
    """An operator key a device trusts: its id, the 32 raw bytes of its Ed25519 public key,
    the actions its requests may run (``("*",)``: every one) and when it was trusted."""

    key_id: str
    public_key: bytes
    actions: tuple[str, ...]
    added_ms: int

    def allows(self, action: str) -> bool:
        """Whether requests signed with this key may run ``action``."""
        return "*" in self.actions or action in self.actions


@dataclass(frozen=True, slots=True)
class AdminRecord:
    """A remembered reply: under the request's id (or ``refused.<digest>``), its bytes, its
    message's uid stamp, and ``final`` (False: the marker written before the action ran)."""

    key: str
    executed_ms: int
    reply: bytes
    stamp: int
    final: bool


class AdminTx:
    """The SQL of remote administration on a device: trusted keys, remembered replies, the lease."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    # -- keys --------------------------------------------------------------------------------

    def trust(self, key: AdminKey) -> None:
        """Trust ``key`` (replacing a key of the same id, and its actions)."""
        self.conn.execute(
            "INSERT INTO admin_keys (key_id, public_key, actions, added_ms) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (key_id) DO UPDATE SET public_key = excluded.public_key, "
            "actions = excluded.actions, added_ms = excluded.added_ms",
            (key.key_id, key.public_key, _actions_text(key.actions), key.added_ms),
        )

    def untrust(self, key_id: str) -> bool:
        """Stop trusting ``key_id``; whether it was trusted."""
        return self.conn.execute("DELETE FROM admin_keys WHERE key_id = ?", (key_id,)).rowcount > 0

    def key(self, key_id: str) -> AdminKey | None:
        row = self.conn.execute(
            "SELECT key_id, public_key, actions, added_ms FROM admin_keys WHERE key_id = ?", (key_id,)
        ).fetchone()
        return None if row is None else self._key(row)

    def keys(self) -> list[AdminKey]:
        rows = self.conn.execute(
            "SELECT key_id, public_key, actions, added_ms FROM admin_keys ORDER BY key_id"
        )
        return [self._key(row) for row in rows]

    def _key(self, row: tuple[object, ...]) -> AdminKey:
        key_id, public_key, actions, added_ms = row
        try:
            parsed = ("*",) if actions == "*" else tuple(json.loads(str(actions)))
        except ValueError:
            parsed = ()
        if not (isinstance(key_id, str) and isinstance(public_key, bytes) and len(public_key) == 32
                and type(added_ms) is int and parsed and all(isinstance(a, str) for a in parsed)):
            raise damaged(f"admin key {key_id!r} holds a value no edgeq writes", self.conn)
        return AdminKey(key_id, public_key, parsed, added_ms)

    # -- remembered replies -------------------------------------------------------------------

    def remembered(self, key: str) -> AdminRecord | None:
        """The reply remembered under ``key`` (a request id), or None."""
        row = self.conn.execute(
            "SELECT request_id, executed_ms, reply FROM admin_replies WHERE request_id = ?", (key,)
        ).fetchone()
        return None if row is None else self._record(row)

    def remember(self, key: str, executed_ms: int, reply: bytes, stamp: int, *, final: bool) -> bool:
        """Remember a reply under ``key`` unless one is remembered already; whether it was new."""
        blob = cbor2.dumps({"reply": reply, "stamp": stamp, "final": final})
        return self.conn.execute(
            "INSERT INTO admin_replies (request_id, executed_ms, reply) VALUES (?, ?, ?) "
            "ON CONFLICT (request_id) DO NOTHING",
            (key, executed_ms, blob),
        ).rowcount > 0

    def finish(self, key: str, executed_ms: int, reply: bytes, stamp: int) -> None:
        """Replace the marker remembered under ``key`` by the final reply."""
        blob = cbor2.dumps({"reply": reply, "stamp": stamp, "final": True})
        self.conn.execute(
            "UPDATE admin_replies SET executed_ms = ?, reply = ? WHERE request_id = ?",
            (executed_ms, blob, key),
        )

    def restamp(self, key: str, stamp: int) -> None:
        """The reply remembered under ``key`` went out as the message of stamp ``stamp``."""
        row = self.conn.execute("SELECT reply FROM admin_replies WHERE request_id = ?", (key,)).fetchone()
        if row is not None:
            blob = cbor2.loads(row[0])
            self.conn.execute("UPDATE admin_replies SET reply = ? WHERE request_id = ?",
                              (cbor2.dumps({**blob, "stamp": stamp}), key))

    def prune(self, before_ms: int) -> int:
        """Forget the replies recorded before ``before_ms`` (the ``executed_ms`` index); how many."""
        return self.conn.execute("DELETE FROM admin_replies WHERE executed_ms < ?", (before_ms,)).rowcount

    def prune_refused(self, keep: int) -> int:
        """Forget all but the ``keep`` most recent refusals of unauthenticated requests; how many
        were forgotten."""
        low, high = REFUSED_PREFIX, REFUSED_PREFIX[:-1] + chr(ord(REFUSED_PREFIX[-1]) + 1)
        return self.conn.execute(
            "DELETE FROM admin_replies WHERE request_id >= ? AND request_id < ? AND request_id NOT IN "
            "(SELECT request_id FROM admin_replies WHERE request_id >= ? AND request_id < ? "
            "ORDER BY executed_ms DESC, request_id DESC LIMIT ?)", (low, high, low, high, keep)
        ).rowcount

    def history(self, limit: int) -> list[AdminRecord]:
        """The ``limit`` most recently recorded replies, newest first."""
        rows = self.conn.execute(
            "SELECT request_id, executed_ms, reply FROM admin_replies ORDER BY executed_ms DESC LIMIT ?",
            (limit,),
        )
        return [self._record(row) for row in rows]

    def _record(self, row: tuple[object, ...]) -> AdminRecord:
        key, executed_ms, blob = row
        try:
            body = cbor2.loads(blob) if isinstance(blob, bytes) else None
        except Exception:  # any decoding failure of our own bytes is damage
            body = None
        if not (isinstance(key, str) and type(executed_ms) is int and isinstance(body, dict)
                and isinstance(body.get("reply"), bytes) and type(body.get("stamp")) is int
                and isinstance(body.get("final"), bool)):
            raise damaged(f"the remembered admin reply {key!r} holds a value no edgeq writes", self.conn)
        return AdminRecord(key, executed_ms, body["reply"], body["stamp"], body["final"])

    # -- the lease ---------------------------------------------------------------------------

    def take_lease(self, token: str, now_ms: int, until_ms: int) -> bool:
        """Take (or renew) the admin lease for ``token`` until ``until_ms``; False while another
        holder's lease runs (its time not up and its process alive)."""
        row = self.conn.execute("SELECT value FROM edgeq_meta WHERE key = ?", (_LEASE_KEY,)).fetchone()
        if row is not None:
            holder = _lease(str(row[0]))
            if (holder is not None and holder[0] != token and holder[2] > now_ms
                    and _alive(holder[1], holder[3])):
                return False
        pid = os.getpid()
        value = json.dumps({"token": token, "pid": pid, "started": _started(pid), "until_ms": until_ms},
                           separators=(",", ":"))
        self.conn.execute(
            "INSERT INTO edgeq_meta (key, value) VALUES (?, ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (_LEASE_KEY, value),
        )
        return True

    def release_lease(self, token: str) -> None:
        row = self.conn.execute("SELECT value FROM edgeq_meta WHERE key = ?", (_LEASE_KEY,)).fetchone()
        holder = None if row is None else _lease(str(row[0]))
        if holder is not None and holder[0] == token:
            self.conn.execute("DELETE FROM edgeq_meta WHERE key = ?", (_LEASE_KEY,))


def _actions_text(actions: Sequence[str]) -> str:
    return "*" if "*" in actions else json.dumps(list(actions), separators=(",", ":"))


def _lease(value: str) -> tuple[str, int, int, int | None] | None:
    """(token, pid, until_ms, its process's start time or None) of a stored lease; None if
    unreadable (then it is taken over)."""
    try:
        body = json.loads(value)
        token, pid, until, started = body["token"], body["pid"], body["until_ms"], body.get("started")
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    if not (isinstance(token, str) and type(pid) is int and type(until) is int
            and (started is None or type(started) is int)):
        return None
    return token, pid, until, started


def _started(pid: int) -> int | None:
    """When process ``pid`` started (Linux's ``/proc``), telling a lease's holder from a later
    process given its pid; None where it cannot be read."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
        return int(stat.rpartition(")")[2].split()[19])  # field 22, counted after the name's ")"
    except (OSError, ValueError, IndexError):
        return None


def _alive(pid: int, started: int | None) -> bool:
    """Whether process ``pid`` (started at ``started``, if known) runs on this host (True where
    that cannot be told: the lease's time decides)."""
    if os.name != "posix" or pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # it exists, owned by another user
        pass
    now = None if started is None else _started(pid)
    return now is None or now == started

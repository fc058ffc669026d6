"""What a home server durably knows of its devices: last contact, clock offset, key, queues,
revocation (``devices``), and what it refused of their puts (``device_refusals``)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from edgeq.args import check_int, check_non_negative, check_positive
from edgeq.errors import DeviceExists, DeviceNotFound, InvalidArgument, InvalidType, KeyInUse
from edgeq.names import check_name
from edgeq.store.connection import ConnectionFactory
from edgeq.store.damage import damaged
from edgeq.types import Clock

__all__ = ["DeviceRecord", "DeviceRefusal", "DeviceRegistry", "DeviceTx"]

_COLS = "name, added_ms, last_seen_ms, clock_offset_ms, agent, public_key, queues, revoked_ms"


@dataclass(frozen=True, slots=True)
class DeviceRecord:
    """A device as the home server knows it: ``clock_offset_ms`` is its clock minus the server's at
    its last hello; ``public_key`` raw Ed25519; ``queues`` it may push to (None: any)."""

    name: str
    added_ms: int
    last_seen_ms: int | None
    clock_offset_ms: int | None
    agent: str | None
    public_key: bytes | None = None
    queues: tuple[str, ...] | None = None
    revoked_ms: int | None = None

    @property
    def registered(self) -> bool:
        return self.public_key is not None and self.revoked_ms is None

    @property
    def revoked_at(self) -> str | None:
        """When the device was revoked, as ISO-8601 UTC (None: it is not).

        >>> DeviceRecord("DEV1", 0, None, None, None, revoked_ms=1_763_715_600_250).revoked_at
        '2025-11-21T09:00:00.250Z'
        """
        if self.revoked_ms is None:
            return None
        when = datetime.fromtimestamp(self.revoked_ms / 1000, tz=UTC)
        return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class DeviceRefusal:
    """What a home server refused of one device's puts to one queue, for one reason (``no-queue``,
    ``queue-full``, ``too-large`` or ``refused``); times in ms on the server's clock."""

    device: str
    queue: str
    reason: str
    count: int
    first_ms: int
    last_ms: int
    last_detail: str


_REFUSAL_COLS = "device, queue, reason, count, first_ms, last_ms, last_detail"


def _record(row: tuple[Any, ...], conn: sqlite3.Connection) -> DeviceRecord:
    """A device row read back; a queue list that does not decode is a damaged store (never read
    as an empty or partial list)."""
    try:
        queues = None if row[6] is None else json.loads(row[6])
    except (TypeError, ValueError) as exc:
        queues = exc
    if queues is not None and not (
        isinstance(queues, list) and all(isinstance(q, str) for q in queues)
    ):
        raise damaged(f"the queues device {row[0]!r} may push to are unreadable ({queues!r})", conn)
    return DeviceRecord(row[0], row[1], row[2], row[3], row[4], row[5],
                        None if queues is None else tuple(queues), row[7])


class DeviceTx:
    """The SQL of the device registry and its refusal counts."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def seen(self, name: str, now_ms: int, clock_offset_ms: int | None, agent: str | None) -> None:
        """Record that ``name`` was heard from at ``now_ms`` (added if new); None keeps a value."""
        self.conn.execute(
            "INSERT INTO devices (name, added_ms, last_seen_ms, clock_offset_ms, agent) "
            "VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT (name) DO UPDATE SET last_seen_ms = excluded.last_seen_ms, "
            "clock_offset_ms = coalesce(excluded.clock_offset_ms, clock_offset_ms), "
            "agent = coalesce(excluded.agent, agent)",
            (name, now_ms, now_ms, clock_offset_ms, agent),
        )

    def register(self, name: str, public_key: bytes, queues: Sequence[str] | None, now_ms: int) -> None:
        self.conn.execute(
            "INSERT INTO devices (name, added_ms, public_key, queues) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (name) DO UPDATE SET public_key = excluded.public_key, "
            "queues = excluded.queues, revoked_ms = NULL",
            (name, now_ms, public_key, None if queues is None else json.dumps(list(queues))),
        )

    def rekey(self, name: str, public_key: bytes) -> None:
        self.conn.execute("UPDATE devices SET public_key = ?, revoked_ms = NULL WHERE name = ?",
                          (public_key, name))

    def set_queues(self, name: str, queues: Sequence[str] | None) -> None:
        self.conn.execute("UPDATE devices SET queues = ? WHERE name = ?",
                          (None if queues is None else json.dumps(list(queues)), name))

    def holders(self, public_key: bytes, but: str) -> list[DeviceRecord]:
        """The devices other than ``but`` registered with ``public_key`` (revoked ones too)."""
        rows = self.conn.execute(
            f"SELECT {_COLS} FROM devices WHERE public_key = ? AND name != ? ORDER BY name",
            (public_key, but))
        return [_record(row, self.conn) for row in rows]

    def revoke(self, name: str, now_ms: int) -> bool:
        """Revoke a device; return False if it is unknown or already revoked."""
        cur = self.conn.execute(
            "UPDATE devices SET revoked_ms = ? WHERE name = ? AND revoked_ms IS NULL", (now_ms, name)
        )
        return cur.rowcount == 1

    def get(self, name: str) -> DeviceRecord | None:
        row = self.conn.execute(f"SELECT {_COLS} FROM devices WHERE name = ?", (name,)).fetchone()
        return None if row is None else _record(row, self.conn)

    def all(self) -> list[DeviceRecord]:
        return [
            _record(row, self.conn)
            for row in self.conn.execute(f"SELECT {_COLS} FROM devices ORDER BY name")
        ]

    def refused(
        self, device: str, queue: str, refused: Mapping[str, tuple[int, str]], now_ms: int
    ) -> None:
        self.conn.executemany(
            f"INSERT INTO device_refusals ({_REFUSAL_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (device, queue, reason) DO UPDATE SET count = count + excluded.count, "
            "last_ms = excluded.last_ms, last_detail = excluded.last_detail",
            [
                (device, queue, reason, n, now_ms, now_ms, detail)
                for reason, (n, detail) in refused.items()
            ],
        )

    def refusals(self, device: str | None) -> list[DeviceRefusal]:
        """What was refused (of ``device``; None: of every device), the latest first."""
        where, args = ("WHERE device = ? ", (device,)) if device is not None else ("", ())
        rows = self.conn.execute(
            f"SELECT {_REFUSAL_COLS} FROM device_refusals {where}"
            "ORDER BY last_ms DESC, device, queue, reason", args)
        return [DeviceRefusal(*row) for row in rows]

    def backlog(self, device: str, queue: str, messages: int, now_ms: int) -> None:
        self.conn.execute(
            "INSERT INTO device_backlogs (device, queue, messages, reported_ms) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (device, queue) DO UPDATE SET messages = excluded.messages, "
            "reported_ms = excluded.reported_ms", (device, queue, messages, now_ms))


class DeviceRegistry:
    """The devices a home server knows: contact, clock offset, keys, revocation."""

    def __init__(self, db: ConnectionFactory, clock: Clock) -> None:
        self.db = db
        self.clock = clock

    def record_device(
        self, name: str, *, clock_offset_ms: int | None = None, agent: str | None = None
    ) -> None:
        """Note that device ``name`` was heard from now (and its clock offset and agent)."""
        check_name(name, "device name")
        if clock_offset_ms is not None:
            check_int(clock_offset_ms, "clock_offset_ms")
        with self.db.write() as tx:
            DeviceTx(tx).seen(name, self.clock(), clock_offset_ms, agent)

    def devices(self) -> list[DeviceRecord]:
        with self.db.read() as conn:
            return DeviceTx(conn).all()

    def has_registered(self) -> bool:
        """Whether any device was ever registered with a key (revoked ones count)."""
        with self.db.read() as conn:
            return conn.execute(
                "SELECT 1 FROM devices WHERE public_key IS NOT NULL LIMIT 1"
            ).fetchone() is not None

    def register_device(
        self, name: str, public_key: bytes, *, queues: Sequence[str] | None = None, share_key: bool = False,
        replace: bool = True,
    ) -> list[str]:
        """Register a device (see ``QueueManager.register_device``); return the other devices that
        have its key too (some only with ``share_key``)."""
        _check_device_name(name)
        _check_key(public_key)
        queues = _checked_queues(queues)
        with self.db.write() as tx:
            devices = DeviceTx(tx)
            before = None if replace else devices.get(name)
            if before is not None and before.public_key is not None:
                raise DeviceExists(
                    f"device {name} is registered already: re-key it (edgeq server devices rekey), change "
                    "its queues (edgeq server devices set-queues), or revoke it")
            others = _key_holders(devices, name, public_key, share_key)
            devices.register(name, public_key, queues, self.clock())
        return others

    def rekey_device(self, name: str, public_key: bytes, *, share_key: bool = False) -> list[str]:
        """Give registered device ``name`` a new key, keeping its queues and lifting a revocation; return
        the other devices that have the key too (some only with ``share_key``)."""
        check_name(name, "device name")
        _check_key(public_key)
        with self.db.write() as tx:
            devices = DeviceTx(tx)
            _registered(devices, name)
            others = _key_holders(devices, name, public_key, share_key)
            devices.rekey(name, public_key)
        return others

    def set_device_queues(self, name: str, queues: Sequence[str] | None) -> None:
        """Change the queues registered device ``name`` may push to (None: any), from its next request."""
        check_name(name, "device name")
        queues = _checked_queues(queues)
        with self.db.write() as tx:
            devices = DeviceTx(tx)
            _registered(devices, name)
            devices.set_queues(name, queues)

    def revoke_device(self, name: str) -> None:
        """Revoke a device: the server refuses its requests from now on."""
        check_name(name, "device name")
        with self.db.write() as tx:
            devices = DeviceTx(tx)
            if devices.get(name) is None:
                raise DeviceNotFound(
                    f"no device {name!r} is known here: see `edgeq server devices list`"
                )
            devices.revoke(name, self.clock())

    def device(self, name: str) -> DeviceRecord | None:
        check_name(name, "device name")
        with self.db.read() as conn:
            return DeviceTx(conn).get(name)

    def record_refusals(
        self, device: str, queue: str, refused: Mapping[str, tuple[int, str]]
    ) -> None:
        """Note ``device``'s messages refused on ``queue`` now: per reason, (how many, the last text)."""
        check_name(device, "device name")
        check_name(queue, "queue name")
        for reason, (n, _) in refused.items():
            check_positive(n, f"the count of refusals {reason!r}")
        if refused:
            with self.db.write() as tx:
                DeviceTx(tx).refused(device, queue, refused, self.clock())

    def record_backlog(self, device: str, queue: str, messages: int) -> None:
        """Keep the backlog ``device`` reported for ``queue`` now (the console's and /metrics' figure)."""
        check_name(device, "device name")
        check_name(queue, "queue name")
        check_non_negative(messages, "backlog")
        with self.db.write(durable=False) as tx:  # lost in a power cut: the next report replaces it
            DeviceTx(tx).backlog(device, queue, messages, self.clock())

    def refusals(self, device: str | None = None) -> list[DeviceRefusal]:
        """What the server refused, per device, queue and reason (of ``device`` only, if given)."""
        if device is not None:
            check_name(device, "device name")
        with self.db.read() as conn:
            return DeviceTx(conn).refusals(device)


def _check_device_name(name: str) -> None:
    check_name(name, "device name")
    if "." in name:
        raise InvalidArgument(
            f"device name {name!r} must not contain '.': the home server holds a device's messages on "
            "queues named <device>.<queue>, so a dot would let one device read another's"
        )


def _check_key(public_key: bytes) -> None:
    if not isinstance(public_key, bytes) or len(public_key) != 32:
        raise InvalidArgument(
            "public_key must be the 32 raw bytes of an Ed25519 public key "
            "(make a pair with `edgeq keys new`)"
        )


def _checked_queues(queues: Sequence[str] | None) -> list[str] | None:
    if queues is None:
        return None
    if isinstance(queues, str) or not isinstance(queues, Sequence):
        raise InvalidType("queues must be a list of queue names, or None for any")
    return [check_name(q, "queue name") for q in queues]


def _registered(devices: DeviceTx, name: str) -> DeviceRecord:
    found = devices.get(name)
    if found is None or found.public_key is None:
        raise DeviceNotFound(f"no device {name!r} is registered here: register it first "
                             "(edgeq server devices add, or POST /api/v1/devices)")
    return found


def _key_holders(devices: DeviceTx, name: str, public_key: bytes, share_key: bool) -> list[str]:
    """The other devices with ``public_key``: refused unless ``share_key`` (a signature would no longer
    say which device made it)."""
    others = devices.holders(public_key, name)
    if others and not share_key:
        named = ", ".join(d.name + (f" (revoked {d.revoked_at})" if d.revoked_ms is not None else "")
                          for d in others)
        raise KeyInUse(
            f"that key is already registered to {named}: one key pair per device, so a signature says "
            f"which device sent it; make {name} its own with `edgeq keys new`, or share it knowingly "
            "(--force; the API's \"force\": true)")
    return [d.name for d in others]

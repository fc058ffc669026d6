"""What a home server durably knows about its devices (table ``devices``)."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

__all__ = ["DeviceRecord", "DeviceTx"]

_COLS = "name, added_ms, last_seen_ms, clock_offset_ms, agent"


@dataclass(frozen=True, slots=True)
class DeviceRecord:
    """A device as the home server last saw it.

    ``clock_offset_ms`` is the device's clock minus the server's, measured at
    its last hello (positive: the device runs ahead).
    """

    name: str
    added_ms: int
    last_seen_ms: int | None
    clock_offset_ms: int | None
    agent: str | None


class DeviceTx:
    """Device verbs on one open transaction."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def seen(self, name: str, now_ms: int, clock_offset_ms: int | None, agent: str | None) -> None:
        self.conn.execute(
            f"INSERT INTO devices ({_COLS}) VALUES (?, ?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET "
            "last_seen_ms = excluded.last_seen_ms, "
            "clock_offset_ms = coalesce(excluded.clock_offset_ms, clock_offset_ms), "
            "agent = coalesce(excluded.agent, agent)",
            (name, now_ms, now_ms, clock_offset_ms, agent),
        )

    def all(self) -> list[DeviceRecord]:
        rows = self.conn.execute(f"SELECT {_COLS} FROM devices ORDER BY name").fetchall()
        return [DeviceRecord(*row) for row in rows]

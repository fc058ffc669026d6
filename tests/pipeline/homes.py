"""A small home server for the export and retention tests: real stores, a manual clock,
device messages accepted through the real two-stage put."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pyarrow.dataset as ds

from edgeq import ManualClock, Message, MessageUID, QueueManager
from tests.pipeline.scenario import START_MS


def home_server(root: Path, start_ms: int = START_MS) -> tuple[QueueManager, ManualClock]:
    """A home server (journal on) named HOME with one queue Q, at ``start_ms``."""
    clock = ManualClock(start_ms)
    qm = QueueManager(root / "home.db", name="HOME", journal="server", clock=clock, durability="normal")
    qm.define_queue("Q")
    return qm, clock


def accept(qm: QueueManager, clock: ManualClock, count: int, start: int, *, step_ms: int = 600_000) -> None:
    """``count`` device messages through the two-stage put, one per ``step_ms`` (10 minutes)."""
    for i in range(start, start + count):
        uid = MessageUID("DEV1", (clock() - 5) * 1000 + i % 1000)
        qm.put_each("Q", [Message(b"m", uid=uid, created_ms=clock() - 5)], confirm_id=i + 1)
        qm.confirm_put_each("Q", [uid], device="DEV1", clock_offset_ms=0)
        clock.advance(step_ms)


def read_ids(out: Path) -> list[int]:
    """The journal ids an export directory holds, sorted (duplicates kept)."""
    table = ds.dataset(out, format="parquet", partitioning="hive").to_table(columns=["id"])
    return sorted(table.column("id").to_pylist())


def store_rows(db: Path) -> dict[int, int]:
    """The journal the store holds, as ``{id: at_ms}``, read with plain sqlite3."""
    with sqlite3.connect(db) as conn:
        return dict(conn.execute("SELECT id, at_ms FROM journal"))

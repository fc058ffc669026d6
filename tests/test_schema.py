"""edgeq.schema: a v8 store opened by this edgeq gains the v9 columns and tables, every
queue it held reading as uncompressed with no backout threshold, its messages untouched."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from edgeq import Message, QueueManager
from edgeq.schema import SCHEMA_VERSION


def test_a_v8_store_gains_the_v9_columns_and_tables(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with QueueManager(path, name="DEV1") as qm:
        qm.define_remote_queue("OUT", target_qmgr="HOME")
        qm.put("OUT", Message(b"kept"))
    conn = sqlite3.connect(path)
    for column in ("compression", "backout_queue", "backout_threshold"):  # the store as v8 left it
        conn.execute(f"ALTER TABLE queues DROP COLUMN {column}")
    for table in ("admin_replies", "admin_keys", "admin_requests"):
        conn.execute(f"DROP TABLE {table}")
    conn.execute("PRAGMA user_version = 8")
    conn.commit()
    conn.close()
    with QueueManager(path) as qm:
        attributes = qm.queue_attributes("OUT")
        assert attributes.compression is None and attributes.backout_threshold is None
        assert [m.data for m in qm.next_for_transmission("OUT", 10)] == [b"kept"]
        qm.alter_queue("OUT", compression="zlib")
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 9
        assert conn.execute("SELECT compression FROM queues WHERE name = 'OUT'").fetchone() == ("zlib",)
        tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert {"admin_replies", "admin_keys", "admin_requests"} <= tables
    finally:
        conn.close()

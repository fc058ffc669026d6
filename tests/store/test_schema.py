"""edgeq.store.schema: a v8 store opened by this edgeq gains the v9 columns and tables, every
queue it held reading as uncompressed with no backout threshold, its messages untouched."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from sqlite_utils import Database

from edgeq import QueueManager
from edgeq.store.integrity import register, row_crc
from edgeq.store.opening import APPLICATION_ID
from edgeq.store.schema import MIGRATIONS, SCHEMA_VERSION
from tests.conftest import T0


def test_a_v8_store_gains_the_v9_columns_and_tables(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path, isolation_level=None)  # the store as v8 left it: its migrations only
    register(conn)
    for step in MIGRATIONS[:8]:
        step(Database(conn))
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.execute("PRAGMA user_version = 8")
    conn.execute("INSERT INTO edgeq_meta (key, value) VALUES ('name', 'DEV1'), ('incarnation', 'abc')")
    conn.execute(
        "INSERT INTO queues (name, default_priority, ordering, created_ms, depth, bytes, kind, target_qmgr, "
        "target_queue, mode) VALUES ('OUT', 4, 'priority', 1, 1, 4, 'remote', 'HOME', 'OUT', 'async')")
    stamp = T0 * 1000
    crc = row_crc("OUT", "DEV1:abc", stamp, 4, T0, T0, 0, None, None, None, None, None, None, None, None,
                  b"kept")
    conn.execute(
        "INSERT INTO messages (queue_id, origin, stamp, state, rank, seq, priority, created_ms, arrived_ms, "
        "expiry_kind, backout_count, data, crc) VALUES (1, 'DEV1:abc', ?, 0, 4, ?, 4, ?, ?, 0, 0, ?, ?)",
        (stamp, stamp, T0, T0, b"kept", crc))
    conn.execute("UPDATE edgeq_clock SET stamp = ?", (stamp,))
    conn.close()
    with QueueManager(path) as qm:
        attributes = qm.queue_attributes("OUT")
        assert attributes.compression is None and attributes.backout_threshold is None
        assert [m.data for m in qm.exchange.next_for_transmission("OUT", 10)] == [b"kept"]
        qm.alter_queue("OUT", compression="zlib")
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("SELECT compression FROM queues WHERE name = 'OUT'").fetchone() == ("zlib",)
        tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert {"admin_replies", "admin_keys", "admin_requests"} <= tables
    finally:
        conn.close()


def test_a_v13_store_gains_the_api_tables_and_its_console_password_stays_the_operators(
    tmp_path: Path,
) -> None:
    from edgeq.sync.server.api.tokens import create_token, list_tokens
    from edgeq.sync.server.console.auth import load_credential
    from tests.sync.server.console.test_auth import legacy_password

    path = tmp_path / "home.db"
    conn = sqlite3.connect(path, isolation_level=None)  # the store as v13 left it
    register(conn)
    for step in MIGRATIONS[:13]:
        step(Database(conn))
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.execute("PRAGMA user_version = 13")
    conn.execute("INSERT INTO edgeq_meta (key, value) VALUES ('name', 'HOME'), ('incarnation', 'abc')")
    conn.close()
    legacy_password(path, "an-old-password")  # set before roles and accounts existed
    QueueManager(path).close()
    cred = load_credential(path, account="operator")
    assert cred is not None and cred.role == "operator" and cred.verify("an-old-password")
    token, _ = create_token(path, "ops", "viewer", now_ms=T0)
    assert list_tokens(path) == [token]
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("SELECT count(*) FROM api_actions").fetchone() == (0,)

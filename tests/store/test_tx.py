"""The store file: creation, refusal of foreign or corrupt files, names, schema, durability."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from edgeq import Message, QueueManager
from edgeq.errors import EdgeqError, InvalidArgument, NameMismatch, QueueManagerClosed, StoreError
from edgeq.store.opening import APPLICATION_ID
from edgeq.store.schema import SCHEMA_VERSION


def test_creates_then_reopens_with_the_stored_name(tmp_path: Path) -> None:
    path = tmp_path / "d.db"
    with QueueManager(path, name="DEV1") as qm:
        qm.define_queue("Q")
        qm.put("Q", Message(b"survives"))
    with QueueManager(path) as qm:
        assert qm.name == "DEV1"
        got = qm.get("Q")
        assert got is not None and got.data == b"survives"
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()


def test_new_store_needs_a_name(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="give the queue manager a name"):
        QueueManager(tmp_path / "d.db")


def test_opening_with_another_name_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "d.db"
    QueueManager(path, name="DEV1").close()
    with pytest.raises(NameMismatch, match="belongs to queue manager 'DEV1'"):
        QueueManager(path, name="DEV2")


@pytest.mark.parametrize("name", ["", "a" * 49, "bad name", "sl/ash", 5])
def test_bad_queue_manager_names_are_refused(tmp_path: Path, name: object) -> None:
    with pytest.raises(EdgeqError, match="name"):
        QueueManager(tmp_path / "d.db", name=name)  # type: ignore[arg-type]
    assert not (tmp_path / "d.db").exists()


def test_non_sqlite_file_is_refused_and_untouched(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    content = b"my precious notes\n" * 100
    path.write_bytes(content)
    with pytest.raises(StoreError, match="not a SQLite database"):
        QueueManager(path, name="DEV1")
    assert path.read_bytes() == content
    assert not Path(str(path) + "-wal").exists()


def test_foreign_sqlite_file_is_refused_and_untouched(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
    conn.execute("INSERT INTO invoices (total) VALUES (9.5)")
    conn.commit()
    conn.close()
    before = path.read_bytes()
    with pytest.raises(StoreError, match="another application"):
        QueueManager(path, name="DEV1")
    assert path.read_bytes() == before
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"  # not switched to WAL
    conn.close()


def test_corrupt_edgeq_file_is_refused_and_untouched(tmp_path: Path) -> None:
    path = tmp_path / "d.db"
    with QueueManager(path, name="DEV1", durability="normal") as qm:
        qm.define_queue("Q")
    data = bytearray(path.read_bytes())
    data[100:4096] = b"\xff" * (4096 - 100)  # smash the schema page after the header
    path.write_bytes(bytes(data))
    with pytest.raises(StoreError, match=r"untouched|corrupt|failed"):
        QueueManager(path, name="DEV1")
    assert path.read_bytes() == bytes(data)


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "d.db"
    QueueManager(path, name="DEV1").close()
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="newer edgeq"):
        QueueManager(path, name="DEV1")


def test_empty_file_is_initialised(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    path.touch()
    with QueueManager(path, name="DEV1") as qm:
        assert qm.queue_names() == []


def test_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="directory"):
        QueueManager(tmp_path, name="DEV1")


def opened_with(qm: QueueManager) -> list[str]:
    """The statements a new connection of ``qm`` runs (one is opened per thread)."""
    statements: list[str] = []
    with qm.tracer(statements.append):
        worker = threading.Thread(target=qm.queue_names)
        worker.start()
        worker.join()
    return statements


def test_durability_modes(tmp_path: Path) -> None:
    # Both commit at NORMAL; "full" then waits for a flush of the WAL (group commit).
    with QueueManager(tmp_path / "a.db", name="A") as qm:
        assert "PRAGMA synchronous = NORMAL" in opened_with(qm)
        qm.define_queue("Q")
        syncs = qm._db.sync_stats().syncs
        qm.put("Q", Message(b"x"))
        assert qm._db.sync_stats().syncs == syncs + 1
    with QueueManager(tmp_path / "b.db", name="B", durability="normal") as qm:
        assert "PRAGMA synchronous = NORMAL" in opened_with(qm)
        qm.define_queue("Q")
        qm.put("Q", Message(b"x"))
        assert qm._db.sync_stats().syncs == 0
    with pytest.raises(InvalidArgument, match="durability"):
        QueueManager(tmp_path / "c.db", name="C", durability="off")  # type: ignore[arg-type]


def test_closed_queue_manager_refuses_work(tmp_path: Path) -> None:
    qm = QueueManager(tmp_path / "d.db", name="DEV1")
    qm.define_queue("Q")
    qm.close()
    qm.close()
    with pytest.raises(QueueManagerClosed, match="closed"):
        qm.depth("Q")


def test_unopenable_path_raises_store_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="directory exists"):
        QueueManager(tmp_path / "no-such-dir" / "dev.db", name="DEV1")


def test_only_an_assured_gets_lock_commits_without_waiting_for_the_disk(tmp_path: Path) -> None:
    with QueueManager(tmp_path / "d.db", name="DEV1") as qm:
        qm.define_queue("Q")
        qm.put_many("Q", [Message(b"a"), Message(b"b")])
        syncs = qm._db.sync_stats().syncs
        got = qm.get("Q", confirm_id=1)
        assert got is not None
        assert qm._db.sync_stats().syncs == syncs  # the lock waited for no flush
        qm.confirm_get("Q", got.uid)
        qm.get("Q")
        assert qm._db.sync_stats().syncs == syncs + 2  # the confirm and the plain get stay durable

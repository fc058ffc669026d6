"""Encryption at rest: sealed data and fields, keys, tampering, quarantine, rotation."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from edgeq import Int32, ManualClock, Message, QueueManager
from edgeq.crypto import IntegrityError, KeyMissing, StoreKeys
from edgeq.errors import StoreError
from tests.conftest import T0, Recorder

ROOT = Path(__file__).resolve().parents[1]
SECRET = b"card 4111-1111-1111-1111"


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "store.key"
    StoreKeys.generate().save(path)
    return path


@pytest.fixture
def sealed(tmp_path: Path, key_file: Path, clock: ManualClock) -> Iterator[QueueManager]:
    qm = QueueManager(tmp_path / "d.db", name="DEV1", clock=clock, keys=key_file)
    qm.define_queue("SECRETS", encryption="aes-256-gcm", ordering="fifo")
    qm.define_queue("PLAIN")
    yield qm
    qm.close()


def raw(db: Path, sql: str, *args: object) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute(sql, args).fetchall()
        conn.commit()
        return rows
    finally:
        conn.close()


def test_data_and_fields_are_sealed_but_expiry_priority_and_uid_are_clear(
    sealed: QueueManager, tmp_path: Path
) -> None:
    uid = sealed.put("SECRETS", Message(SECRET, fields={"pin": "1234"}, priority=7, expiry=Int32(60_000)))
    assert sealed.queue_attributes("SECRETS").encryption == "aes-256-gcm"
    (data, fields, key_id, priority, deadline, stamp) = raw(
        tmp_path / "d.db", "SELECT data, fields, key_id, priority, deadline, stamp FROM messages"
    )[0]
    assert isinstance(data, bytes) and SECRET not in data and b"1234" not in (fields or b"")
    assert (key_id, priority, deadline, stamp) == ("k1", 7, T0 + 60_000, uid.stamp)
    sealed.close()
    for name in ("d.db", "d.db-wal"):
        path = tmp_path / name
        assert not path.exists() or SECRET not in path.read_bytes()
    assert "key" not in " ".join(str(r) for r in raw(tmp_path / "d.db", "SELECT key, value FROM edgeq_meta"
                                                     " WHERE key NOT LIKE 'keycheck.%'"))


def test_round_trip_with_filters_rules_and_durable_events(sealed: QueueManager, tmp_path: Path) -> None:
    sealed.alter_queue("SECRETS", rules=["counters"])
    rule = Recorder()
    sealed.add_rule("SECRETS", rule)
    sealed.put("SECRETS", Message(b"a", fields={"k": "x"}))
    sealed.put("SECRETS", Message(SECRET, fields={"k": "y"}))
    assert [m.data for m in sealed.browse("SECRETS", filter={"k": "y"})] == [SECRET]
    got = sealed.get("SECRETS", filter={"k": "y"})
    assert got is not None and got.data == SECRET and got.fields == {"k": "y"}
    assert [e.message.data for e in rule.events if e.kind == "removed" and e.message] == [SECRET]
    assert all(SECRET not in blob for (blob,) in raw(tmp_path / "d.db", "SELECT message FROM rule_events"))


def test_without_the_key_nothing_is_readable_but_expiry_still_works(
    sealed: QueueManager, tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    sealed.put("SECRETS", Message(SECRET, expiry=Int32(10)))
    sealed.put("SECRETS", Message(b"kept"))
    sealed.close()
    monkeypatch.delenv("EDGEQ_STORE_KEY", raising=False)
    monkeypatch.delenv("EDGEQ_STORE_KEY_FILE", raising=False)
    with QueueManager(tmp_path / "d.db", clock=clock) as keyless:
        clock.advance(10)
        assert keyless.depth("SECRETS") == 1  # the expiry check needed no key
        with pytest.raises(KeyMissing, match="open the store with its key file"):
            keyless.get("SECRETS")
        with pytest.raises(KeyMissing):
            keyless.put("SECRETS", Message(b"x"))
        with pytest.raises(KeyMissing, match="needs a store key"):
            keyless.define_queue("MORE", encryption="aes-256-gcm")
        keyless.put("PLAIN", Message(b"plain queues work"))
        assert keyless.depth("SECRETS") == 1  # nothing was lost


def test_a_wrong_key_is_refused_at_open(sealed: QueueManager, tmp_path: Path, clock: ManualClock) -> None:
    sealed.put("SECRETS", Message(SECRET))
    sealed.close()
    with pytest.raises(StoreError, match="not the key this store was encrypted with"):
        QueueManager(tmp_path / "d.db", clock=clock, keys=StoreKeys.generate())


def test_the_key_can_come_from_the_environment(
    sealed: QueueManager, key_file: Path, tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    sealed.put("SECRETS", Message(SECRET))
    sealed.close()
    monkeypatch.setenv("EDGEQ_STORE_KEY", key_file.read_text())
    with QueueManager(tmp_path / "d.db", clock=clock) as qm:
        got = qm.get("SECRETS")
        assert got is not None and got.data == SECRET


def test_a_tampered_row_is_quarantined_named_and_the_queue_goes_on(
    sealed: QueueManager, tmp_path: Path
) -> None:
    rule = Recorder()
    sealed.add_rule("SECRETS", rule)
    bad = sealed.put("SECRETS", Message(b"first"))
    sealed.put("SECRETS", Message(b"second"))
    (blob,) = raw(tmp_path / "d.db", "SELECT data FROM messages WHERE stamp = ?", bad.stamp)[0]
    assert isinstance(blob, bytes)
    flipped = blob[:-1] + bytes([blob[-1] ^ 1])
    raw(tmp_path / "d.db", "UPDATE messages SET data = ? WHERE stamp = ?", flipped, bad.stamp)
    with pytest.raises(IntegrityError, match=str(bad)):
        sealed.get("SECRETS")
    (entry,) = sealed.quarantined()
    assert (entry.queue, entry.uid) == ("SECRETS", str(bad))
    assert [(e.kind, e.reason, e.message.uid if e.message else None) for e in rule.events
            if e.kind == "removed"] == [("removed", "quarantined", bad)]
    got = sealed.get("SECRETS")
    assert got is not None and got.data == b"second"


def test_a_row_copied_to_another_queue_or_message_is_detected(
    sealed: QueueManager, tmp_path: Path, key_file: Path
) -> None:
    sealed.define_queue("OTHER", encryption="aes-256-gcm")
    src = sealed.put("SECRETS", Message(SECRET))
    dst = sealed.put("OTHER", Message(b"harmless"))
    db = tmp_path / "d.db"
    ((data, fields),) = raw(db, "SELECT data, fields FROM messages WHERE stamp = ?", src.stamp)
    raw(db, "UPDATE messages SET data = ?, fields = ? WHERE stamp = ?", data, fields, dst.stamp)
    with pytest.raises(IntegrityError, match=str(dst)):
        sealed.browse("OTHER")
    assert [e.uid for e in sealed.quarantined()] == [str(dst)]
    assert sealed.depth("OTHER") == 0 and sealed.depth("SECRETS") == 1


def test_rotation_reseals_every_row_under_the_new_key(
    sealed: QueueManager, tmp_path: Path, key_file: Path, clock: ManualClock
) -> None:
    sealed.put_many("SECRETS", [Message(b"%d" % i, fields={"i": i}) for i in range(25)])
    sealed.close()
    ring = StoreKeys.load(key_file).with_new_key()
    ring.save(key_file)
    with QueueManager(tmp_path / "d.db", clock=clock, keys=key_file) as qm:
        assert qm.rotate_keys(batch=10) == 25
        assert qm.rotate_keys() == 0
        assert {k for (k,) in raw(tmp_path / "d.db", "SELECT key_id FROM messages")} == {"k2"}
        assert [m.fields["i"] for m in qm.browse("SECRETS")] == list(range(25))


def test_rotation_resumes_after_a_crash(tmp_path: Path, key_file: Path) -> None:
    db = tmp_path / "d.db"
    with QueueManager(db, name="DEV1", keys=key_file, durability="normal") as qm:
        qm.define_queue("SECRETS", encryption="aes-256-gcm", ordering="fifo")
        for start in range(0, 3_000, 500):
            qm.put_many("SECRETS", [Message(b"%d" % i) for i in range(start, start + 500)])
    StoreKeys.load(key_file).with_new_key().save(key_file)
    script = textwrap.dedent("""
        import sys
        from edgeq import QueueManager
        qm = QueueManager(sys.argv[1], keys=sys.argv[2])
        print("rotating", flush=True)
        qm.rotate_keys(batch=5)
        print("done", flush=True)
    """)
    with subprocess.Popen([sys.executable, "-c", script, str(db), str(key_file)], stdout=subprocess.PIPE,
                          text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}) as child:
        assert child.stdout is not None and child.stdout.readline() == "rotating\n"
        while raw(db, "SELECT count(*) FROM messages WHERE key_id = 'k2'")[0][0] == 0:
            pass  # wait until some batches have committed
        child.send_signal(signal.SIGKILL)
        child.wait()
    mixed = dict(raw(db, "SELECT key_id, count(*) FROM messages GROUP BY key_id"))
    assert mixed.get("k2", 0) > 0 and mixed.get("k1", 0) > 0  # killed half way
    with QueueManager(db, keys=key_file) as qm:
        assert qm.rotate_keys() == mixed.get("k1", 0)
        assert [m.data for m in qm.browse("SECRETS")] == [b"%d" % i for i in range(3_000)]


def test_store_key_files(tmp_path: Path) -> None:
    path = tmp_path / "k.key"
    ring = StoreKeys.generate()
    ring.save(path)
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    loaded = StoreKeys.load(path)
    assert loaded.ids == ["k1"] and loaded.current == "k1"
    assert loaded.with_new_key().ids == ["k1", "k2"]
    path.write_text("{not json")
    with pytest.raises(ValueError, match="not an edgeq store key file"):
        StoreKeys.load(path)
    with pytest.raises(ValueError, match="cannot read"):
        StoreKeys.load(tmp_path / "missing.key")

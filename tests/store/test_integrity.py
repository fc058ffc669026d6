"""Damage is detected, never returned as data (issue 10): every path that acts on a
message row checks it; a damaged index is told from a damaged row; a get or browse
never returns one row twice or a locked one; anything unreadable in a store is a
StoreError saying so; a failed open leaves nothing behind.

Damage is made the way a medium makes it: raw writes that bypass edgeq (the row's
checksum is left as it was), and index entries repointed byte by byte in the file.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import cbor2
import pytest

from edgeq import Int32, ManualClock, Message, MessageUID, QueueManager
from edgeq.crypto import IntegrityError, StoreKeys
from edgeq.encoding.fields import decode_fields
from edgeq.errors import InvalidArgument, StoreError
from edgeq.rules import QueueRule
from edgeq.rules.base import RuleEvent
from edgeq.store.opening import APPLICATION_ID
from edgeq.store.schema import MIGRATIONS, SCHEMA_VERSION
from tests.conftest import T0, Recorder

COPIES = "tests.store.test_integrity.copies"


class Copies(QueueRule):
    """A persisted rule that logs each message event with its copy (for ``caplog``)."""

    def _seen(self, event: RuleEvent) -> None:
        logging.getLogger(COPIES).info("copy", extra={"event": event})

    on_removed = on_expired = _seen


def copies(caplog: pytest.LogCaptureFixture) -> list[RuleEvent]:
    return [r.__dict__["event"] for r in caplog.records if r.name == COPIES]


def raw(db: Path, sql: str, *args: object, schema: bool = False) -> list[tuple[object, ...]]:
    """Run SQL behind edgeq's back (``schema``: with the schema writable)."""
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        if schema:
            conn.execute("PRAGMA writable_schema = ON")
        rows = conn.execute(sql, args).fetchall()
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return rows
    finally:
        conn.close()


def row_id(db: Path, uid: object) -> int:
    (found,) = raw(db, "SELECT id FROM messages WHERE origin || '.' || stamp = ?", str(uid))
    return int(found[0])  # type: ignore[call-overload]


def _varint(buf: bytes, at: int) -> tuple[int, int]:
    value = 0
    for n in range(9):
        byte = buf[at + n]
        if n == 8:
            return (value << 8) | byte, at + 9
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value, at + n + 1
    raise AssertionError("unreachable")


def _width(serial: int) -> int:
    return {0: 0, 1: 1, 2: 2, 3: 3, 4: 4, 5: 6, 6: 8, 7: 8, 8: 0, 9: 0}.get(serial, (serial - 12) // 2)


def repoint(db: Path, index: str, old: int, new: int) -> None:
    """Damage ``index`` as a flipped byte does: its entry for row ``old`` now points at row
    ``new`` (both ids 2..127: one byte in the file). The index must fit one page."""
    ((root,),) = raw(db, "SELECT rootpage FROM sqlite_master WHERE name = ?", index)
    ((size,),) = raw(db, "PRAGMA page_size")
    data = bytearray(db.read_bytes())
    page = (int(root) - 1) * int(size)  # type: ignore[call-overload]
    assert data[page] == 0x0A, "the index is one leaf page"
    for n in range(int.from_bytes(data[page + 3 : page + 5], "big")):
        cell = page + int.from_bytes(data[page + 8 + 2 * n : page + 10 + 2 * n], "big")
        _, record = _varint(data, cell)
        header, at = _varint(data, record)
        serials = []
        while at < record + header:
            serial, at = _varint(data, at)
            serials.append(serial)
        rowid_at = record + header + sum(_width(s) for s in serials[:-1])
        if serials[-1] == 1 and data[rowid_at] == old:
            data[rowid_at] = new
            db.write_bytes(bytes(data))
            return
    raise AssertionError(f"{index} has no entry for row {old}")


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "d.db"


@pytest.fixture
def made(db: Path, clock: ManualClock) -> Iterator[QueueManager]:
    """A store with queues Q (FIFO) and OTHER, and two rows on PAD (never read), so every
    message of a test has a row id from 3 up (one byte in an index entry)."""
    qm = QueueManager(db, name="DEV1", clock=clock)
    qm.define_queue("Q", ordering="fifo")
    qm.define_queue("OTHER")
    qm.define_queue("PAD")
    qm.put_many("PAD", [Message(b"pad"), Message(b"pad")])
    yield qm
    qm.close()


def reopen(db: Path, clock: ManualClock, **kwargs: object) -> QueueManager:
    return QueueManager(db, clock=clock, **kwargs)  # type: ignore[arg-type]


# -- every path that acts on a row checks it ------------------------------------------------


def test_a_damaged_deadline_never_discards_a_live_message_as_expired(
    made: QueueManager, db: Path, clock: ManualClock
) -> None:
    rule = Recorder()
    made.add_rule("Q", rule)
    live = made.put("Q", Message(b"live"))
    made.put("Q", Message(b"next"))
    raw(db, "UPDATE messages SET deadline = 1 WHERE stamp = ?", live.stamp)  # flipped into the past
    with pytest.raises(IntegrityError, match=str(live)):
        made.get("Q")
    assert [e.uid for e in made.quarantined()] == [str(live)]
    assert rule.expired() == []  # not discarded as expired
    assert [(e.reason, e.message.uid if e.message else None) for e in rule.events if e.kind == "removed"] == [
        ("quarantined", live)
    ]
    got = made.get("Q")
    assert got is not None and got.data == b"next"


def test_a_damaged_deadline_never_delivers_an_expired_message(
    made: QueueManager, db: Path, clock: ManualClock
) -> None:
    gone = made.put("Q", Message(b"expired", expiry=Int32(10)))
    clock.advance(20)
    raw(db, "UPDATE messages SET deadline = ? WHERE stamp = ?", T0 + 10**9, gone.stamp)
    with pytest.raises(IntegrityError, match=str(gone)):
        made.browse("Q")
    assert made.get("Q") is None


def test_browse_checks_what_its_expiry_check_point_discards(
    made: QueueManager, db: Path, clock: ManualClock
) -> None:
    made.put("Q", Message(b"old", expiry=Int32(10)))
    live = made.put("Q", Message(b"live"))
    clock.advance(20)  # "old" expired: browse discards it, and must not take "live" with it
    raw(db, "UPDATE messages SET deadline = 5 WHERE stamp = ?", live.stamp)
    with pytest.raises(IntegrityError, match=str(live)):
        made.browse("Q")
    assert [e.uid for e in made.quarantined()] == [str(live)]


@pytest.mark.parametrize("verb", ["confirm_get", "confirm_get_each", "delete_message"])
def test_confirming_or_deleting_a_damaged_row_quarantines_it(
    made: QueueManager, db: Path, caplog: pytest.LogCaptureFixture, verb: str
) -> None:
    made.alter_queue("Q", rules=["tests.store.test_integrity:Copies"])
    made.put_many("Q", [Message(b"one"), Message(b"two")])
    first, second = made.get_many("Q", 2, confirm_id=7)
    raw(db, "UPDATE messages SET data = ? WHERE stamp = ?", b"0ne",
        first.uid.stamp)  # type: ignore[union-attr]
    caplog.set_level(logging.INFO, COPIES)
    with pytest.raises(IntegrityError, match=str(first.uid)):
        if verb == "confirm_get_each":
            made.confirm_get_each("Q", [second.uid, first.uid])  # type: ignore[list-item]
        else:
            getattr(made, verb)("Q", first.uid)
    assert [e.uid for e in made.quarantined()] == [str(first.uid)]
    assert [(e.reason, e.message and e.message.data) for e in copies(caplog)] == [("quarantined", b"")]
    if verb == "confirm_get_each":  # only the damaged row was touched: confirming again does the rest
        assert [r.status
                for r in made.confirm_get_each("Q", [second.uid, first.uid])] == [  # type: ignore[list-item]
            "confirmed", "unknown"
        ]


def test_a_put_confirm_never_discards_or_publishes_a_damaged_row_and_the_resend_gets_through(
    made: QueueManager, db: Path, clock: ManualClock
) -> None:
    """A flipped deadline must not make a locked put look expired (lost, with nothing
    observing), nor may a damaged row be made visible: the confirm quarantines it and
    answers ``unknown``, so the sender keeps its copy and puts it again."""
    rule = Recorder()
    made.add_rule("Q", rule)
    first, second = (MessageUID.parse(f"DEV2:abcdefghij.{T0 * 1000}"),
                     MessageUID.parse(f"DEV2:abcdefghij.{T0 * 1000 + 1}"))
    sent = Message(b"payload", uid=first, created_ms=T0, expiry=Int32(3_600_000))
    damaged, fine = made.put_each("Q", [sent, Message(b"fine", uid=second, created_ms=T0)], confirm_id=5)
    raw(db, "UPDATE messages SET deadline = ? WHERE stamp = ?", T0 - 1, damaged.uid.stamp)  # looks expired
    results = made.confirm_put_each("Q", [damaged.uid, fine.uid])
    assert [r.status for r in results] == ["unknown", "confirmed"]
    assert [e.uid for e in made.quarantined()] == [str(damaged.uid)]
    assert [e.reason for e in rule.events if e.kind == "removed"] == ["quarantined"]
    assert not [e for e in rule.events if e.kind == "expired"]  # never reported as an expiry
    again = made.put_each("Q", [Message(sent.data, uid=first, created_ms=T0, expiry=Int32(3_600_000),
                                        resend=True)], confirm_id=6)
    assert [r.status for r in again] == ["stored"]
    assert [r.status for r in made.confirm_put_each("Q", [damaged.uid])] == ["confirmed"]
    assert sorted(m.data for m in made.browse("Q")) == [b"fine", b"payload"]


def test_undo_quarantines_a_damaged_locked_row_and_undoes_the_rest_next_time(
    made: QueueManager, db: Path
) -> None:
    rule = Recorder()
    made.add_rule("Q", rule)
    locked = made.put("Q", Message(b"unconfirmed"), confirm_id=9)
    raw(db, "UPDATE messages SET priority = 8 WHERE stamp = ?", locked.stamp)
    with pytest.raises(IntegrityError, match=str(locked)):
        made.undo("Q", 9)
    assert [e.reason for e in rule.events if e.kind == "removed"] == ["quarantined"]
    assert made.depth("Q") == 0


def test_rules_never_get_a_damaged_copy_from_a_bulk_discard(
    made: QueueManager, db: Path, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    made.alter_queue("Q", rules=["tests.store.test_integrity:Copies"])
    doomed = made.put("Q", Message(b"secret plan", expiry=Int32(10)))
    raw(db, "UPDATE messages SET data = ? WHERE stamp = ?", b"public plan", doomed.stamp)
    clock.advance(20)
    caplog.set_level(logging.INFO, COPIES)
    assert made.sweep_expired("Q") == 1
    assert [(e.kind, e.reason, e.message and e.message.data) for e in copies(caplog)] == [
        ("removed", "quarantined", b"")
    ]
    assert [e.uid for e in made.quarantined()] == [str(doomed)]


# -- a damaged index is not a damaged row --------------------------------------------------


def test_a_row_an_index_misplaced_is_never_quarantined(
    made: QueueManager, db: Path, clock: ManualClock
) -> None:
    mine = made.put("Q", Message(b"mine"))
    theirs = made.put("OTHER", Message(b"theirs"))
    made.close()
    repoint(db, "messages_ready", row_id(db, mine), row_id(db, theirs))
    with reopen(db, clock) as qm:
        with pytest.raises(StoreError, match=r"index .*--repair") as caught:
            qm.get("Q")
        assert not isinstance(caught.value, IntegrityError)
        assert qm.quarantined() == []
        got = qm.get("OTHER")
        assert got is not None and got.data == b"theirs"


def test_a_queue_name_index_leading_to_another_queue_is_an_index_error(
    made: QueueManager, db: Path, clock: ManualClock
) -> None:
    made.put("OTHER", Message(b"other's"))
    made.close()
    ((other,), (pad,)) = raw(db, "SELECT id FROM queues WHERE name IN ('OTHER', 'PAD') ORDER BY name")
    repoint(db, "idx_queues_name", int(other), int(pad))  # type: ignore[call-overload]
    with reopen(db, clock) as qm:
        for call in (lambda: qm.get("OTHER"), lambda: qm.put("OTHER", Message(b"x")),
                     lambda: qm.depth("OTHER")):
            with pytest.raises(StoreError, match="name index"):
                call()
        assert qm.queue_names() == ["OTHER", "PAD", "Q"]
        assert [m.data for m in qm.browse("PAD")] == [b"pad", b"pad"]


def test_a_uid_index_entry_moved_to_another_row_is_an_index_error(
    made: QueueManager, db: Path, clock: ManualClock
) -> None:
    made.put_many("Q", [Message(b"a"), Message(b"b")])
    first, second = made.get_many("Q", 2, confirm_id=3)
    made.close()
    repoint(db, "messages_uid", row_id(db, first.uid), row_id(db, second.uid))
    with reopen(db, clock) as qm:
        with pytest.raises(StoreError, match="index"):
            qm.confirm_get("Q", first.uid)  # type: ignore[arg-type]
        assert qm.quarantined() == []
        qm.confirm_get("Q", second.uid)  # type: ignore[arg-type]


@pytest.mark.parametrize("first", ["browse", "sweep"])
def test_a_deadline_index_never_discards_a_live_message(db: Path, clock: ManualClock, first: str) -> None:
    """Browse reads what it discards, and so does a bulk discard whose events are wanted
    (a rule's): a live message the deadline index has expired is found, not discarded.
    (A bulk discard nothing observes deletes through the index unread: docs/storage.md.)"""
    with QueueManager(db, name="DEV1", clock=clock) as qm:
        qm.define_queue("Q", ordering="fifo")
        qm.define_queue("PAD")
        qm.put_many("PAD", [Message(b"pad"), Message(b"pad")])
        old = qm.put("Q", Message(b"old", expiry=Int32(10)))
        live = qm.put("Q", Message(b"live", expiry=Int32(10**9)))
    repoint(db, "messages_deadline", row_id(db, old), row_id(db, live))
    with reopen(db, clock) as qm:
        assert qm.activate("Q") == 0  # activated while nothing has expired yet
        clock.advance(20)
        if first == "sweep":
            qm.add_rule("Q", Recorder())  # observed: the sweep reads the rows it discards
            with pytest.raises(StoreError, match="deadline index"):
                qm.sweep_expired("Q")
        with pytest.raises(StoreError, match="deadline index"):
            qm.browse("Q")
    assert raw(db, "SELECT data FROM messages WHERE stamp = ?", live.stamp) == [(b"live",)]


def test_a_get_or_browse_never_returns_one_row_twice(
    made: QueueManager, db: Path, clock: ManualClock
) -> None:
    a, b, _ = made.put_many("Q", [Message(b"a"), Message(b"b"), Message(b"c")])
    made.close()
    repoint(db, "messages_ready", row_id(db, b), row_id(db, a))  # b's entry now leads to a
    with reopen(db, clock) as qm:
        assert [m.data for m in qm.browse("Q")] == [b"a", b"c"]
        assert [m.data for m in qm.get_many("Q", 10)] == [b"a", b"c"]


def test_a_locked_row_reached_through_the_ready_index_is_skipped(
    made: QueueManager, db: Path, clock: ManualClock
) -> None:
    made.put_many("Q", [Message(b"taken"), Message(b"ready")])
    taken = made.get("Q", confirm_id=5)
    assert taken is not None
    made.close()
    ready = raw(db, "SELECT id FROM messages WHERE data = ?", b"ready")[0][0]
    repoint(db, "messages_ready", int(ready), row_id(db, taken.uid))  # type: ignore[call-overload]
    with reopen(db, clock) as qm:
        assert qm.browse("Q") == []
        assert qm.get("Q") is None  # never handed out a second time while locked
        qm.confirm_get("Q", taken.uid)  # type: ignore[arg-type]


# -- anything unreadable is a damaged store, never a caller's mistake ---------------------------


@pytest.mark.parametrize(
    ("column", "value"),
    [("default_priority", 68), ("ordering", "prixrity"), ("kind", "lokal"), ("depth", -3), ("max_depth", 0),
     ("encryption", "aes-256-gcn"), ("on_full", "rejekt")],
)
def test_an_out_of_range_queue_row_is_a_damaged_store(
    made: QueueManager, db: Path, clock: ManualClock, column: str, value: object
) -> None:
    made.put("Q", Message(b"x"))
    made.close()
    raw(db, f"UPDATE queues SET {column} = ? WHERE name = 'Q'", value)
    with reopen(db, clock) as qm:
        for call in (lambda: qm.put("Q", Message(b"y")), lambda: qm.get("Q"),
                     lambda: qm.queue_attributes("Q")):
            with pytest.raises(StoreError, match="the store is damaged") as caught:
                call()
            assert not isinstance(caught.value, (InvalidArgument, TypeError))


def test_text_that_is_not_utf8_quarantines_its_row_and_the_queue_goes_on(
    made: QueueManager, db: Path
) -> None:
    bad = made.put("Q", Message(b"bad", reply_to="REPLIES"))
    made.put("Q", Message(b"good"))
    raw(db, "UPDATE messages SET reply_to = CAST(x'5245ff4c494553' AS TEXT) WHERE stamp = ?", bad.stamp)
    with pytest.raises(IntegrityError, match=str(bad)):
        made.get("Q")
    got = made.get("Q")
    assert got is not None and got.data == b"good"


def test_fields_that_do_not_decode_are_a_damaged_store() -> None:
    for blob in (cbor2.dumps([1, 2]), cbor2.dumps({"n": ["i", True]}), cbor2.dumps({"n": ["q", 1]}), b"\xa1"):
        with pytest.raises(StoreError, match="the store is damaged"):
            decode_fields(blob)


@pytest.mark.parametrize(
    ("key", "value", "what"),
    [("name", "DE V1", "name"), ("incarnation", "K3X!", "incarnation"), ("journal", "sever", "journal"),
     ("keycheck.k1", "%%not base64%%", "check value")],
)
def test_a_damaged_identity_is_a_damaged_store(
    db: Path, clock: ManualClock, key: str, value: str, what: str
) -> None:
    keys = StoreKeys.generate()
    QueueManager(db, name="DEV1", clock=clock, keys=keys, journal="device").close()
    raw(db, "UPDATE edgeq_meta SET value = ? WHERE key = ?", value, key)
    with pytest.raises(StoreError, match=f"the store is damaged: .*{what}"):
        reopen(db, clock, keys=keys)


@pytest.mark.parametrize(
    ("sql", "error"),
    [("replace(sql, 'IS NOT NULL', '> 0')", "its schema"),  # still SQL: only the digest tells
     ("CAST(x'435245415445ff' AS TEXT)", "SQLite cannot read it")],  # not even UTF-8
)
def test_a_damaged_schema_is_a_damaged_store_left_untouched(
    made: QueueManager, db: Path, clock: ManualClock, sql: str, error: str
) -> None:
    made.close()
    raw(db, f"UPDATE sqlite_master SET sql = {sql} WHERE name = 'messages_confirm'", schema=True)
    damaged = db.read_bytes()
    with pytest.raises(StoreError, match=f"the store is damaged: {error}"):
        reopen(db, clock)
    assert db.read_bytes() == damaged


def test_a_damaged_rule_binding_is_a_damaged_store(made: QueueManager, db: Path, clock: ManualClock) -> None:
    made.alter_queue("Q", rules=[("log", {"events": ["removed"]})])
    made.close()
    raw(db, "UPDATE rule_bindings SET config = '{\"events\": [\"rem'")
    with pytest.raises(StoreError,
                       match=r"the store is damaged: the config of rule binding .*'log' on queue 'Q'"):
        reopen(db, clock)


def test_a_damaged_device_record_is_a_damaged_store(db: Path, clock: ManualClock) -> None:
    with QueueManager(db, name="HOME", clock=clock) as qm:
        qm.register_device("DEV1", bytes(32), queues=["ORDERS"])
    raw(db, "UPDATE devices SET queues = '[\"ORD'")
    with reopen(db, clock) as qm, pytest.raises(StoreError, match=r"the store is damaged: .*DEV1"):
        qm.device("DEV1")


def test_a_damaged_journal_entry_is_a_damaged_store(db: Path, clock: ManualClock) -> None:
    with QueueManager(db, name="HOME", clock=clock, journal="server") as qm:
        qm.define_queue("Q")
        qm.put("Q", Message(b"x"))
        qm.get("Q")
    raw(db, "UPDATE journal SET at_ms = 'l763683200000'")
    with reopen(db, clock) as qm, pytest.raises(StoreError, match=r"the store is damaged: journal entry 1 "):
        qm.journal_since()


def test_a_damaged_rule_event_reaches_its_rules_as_quarantined(
    made: QueueManager, db: Path, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, COPIES)
    made.alter_queue("Q", rules=["tests.store.test_integrity:Copies"])
    made.put_many("Q", [Message(b"one"), Message(b"two"), Message(b"three")])
    one, two, _ = made.get_many("Q", 3)  # recorded and delivered; `made` is not closed before the
    ids = [r[0] for r in raw(db, "SELECT id FROM rule_events ORDER BY id")]  # reopen: still undelivered
    blob = bytearray(raw(db, "SELECT message FROM rule_events WHERE id = ?",
                         ids[1])[0][0])  # type: ignore[arg-type]
    blob[-8] ^= 0x20  # b"two" -> b"tWo", the checksum after it unchanged
    raw(db, "UPDATE rule_events SET message = ? WHERE id = ?", bytes(blob), ids[1])
    raw(db, "UPDATE rule_events SET message = x'8a' WHERE id = ?", ids[2])  # does not even decode
    caplog.clear()
    with reopen(db, clock):
        seen = [(e.reason, e.message and (str(e.message.uid), e.message.data)) for e in copies(caplog)]
    assert (seen
            == [("got", (str(one.uid), b"one")), ("quarantined", (str(two.uid), b"")), ("quarantined", None)])


def test_undelivered_rule_events_of_an_older_store_keep_their_copies(tmp_path: Path, clock: ManualClock,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    """A v7 store's pending events carry rows without a checksum: the migration gives them theirs."""
    db = tmp_path / "v7.db"
    conn = sqlite3.connect(db, isolation_level=None)
    from sqlite_utils import Database

    for step in MIGRATIONS[:7]:
        step(Database(conn))
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.execute("PRAGMA user_version = 7")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("INSERT INTO edgeq_meta (key, value) VALUES ('name', 'DEV1'), ('incarnation', 'abc')")
    conn.execute("INSERT INTO queues (name, default_priority, ordering, created_ms, depth) VALUES "
                 "('Q', 4, 'fifo', 1, 0)")
    conn.execute("INSERT INTO rule_bindings (queue_id, position, name, config) VALUES "
                 "(1, 0, 'tests.store.test_integrity:Copies', '{}')")
    v7_row = [5, "DEV1:abc", 1763683200000005, 0, None, 4, T0, T0, 0, None, None, None, 0, None, None, None,
              None, b"kept", None]
    conn.execute(
        "INSERT INTO rule_events (queue, kind, detail, at_ms, message) VALUES ('Q', 'removed', 'got', ?, ?)",
        (T0, cbor2.dumps(v7_row)))
    conn.close()
    caplog.set_level(logging.INFO, COPIES)
    with reopen(db, clock):
        pass
    assert [(e.reason, e.message and e.message.data) for e in copies(caplog)] == [("got", b"kept")]
    assert raw(db, "PRAGMA user_version") == [(SCHEMA_VERSION,)]


def test_the_constructor_never_raises_a_raw_python_error(
    made: QueueManager, db: Path, clock: ManualClock
) -> None:
    made.close()
    raw(db, "UPDATE edgeq_meta SET value = x'ff' WHERE key = 'name'")  # a blob where text belongs
    with pytest.raises(StoreError, match="the store is damaged"):
        reopen(db, clock)


# -- a failed open leaves nothing behind ------------------------------------------------------------


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_a_new_path_opened_without_a_name_leaves_no_file(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="give the queue manager a name"):
        QueueManager(tmp_path / "typo.db")
    assert leftovers(tmp_path) == []
    with QueueManager(tmp_path / "typo.db", name="DEV1") as qm:  # the name is not taken over
        assert qm.name == "DEV1"


def test_a_bad_key_in_the_environment_leaves_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDGEQ_STORE_KEY", "{not json")
    with pytest.raises(InvalidArgument, match="EDGEQ_STORE_KEY"):
        QueueManager(tmp_path / "new.db", name="DEV1")
    assert leftovers(tmp_path) == []


def test_a_creation_that_fails_midway_leaves_no_file(tmp_path: Path) -> None:
    def broken_clock() -> int:
        raise RuntimeError("the clock broke")

    with pytest.raises(RuntimeError, match="the clock broke"):
        QueueManager(tmp_path / "new.db", name="DEV1", clock=broken_clock)
    assert leftovers(tmp_path) == []


def test_an_existing_store_is_not_written_before_it_is_recognised(db: Path, clock: ManualClock) -> None:
    QueueManager(db, name="DEV1", clock=clock).close()
    for version in (SCHEMA_VERSION + 1, 0):
        raw(db, f"PRAGMA user_version = {version}")
        before = db.read_bytes()
        with pytest.raises(StoreError, match=r"newer edgeq|no schema version"):
            reopen(db, clock)
        assert db.read_bytes() == before
        assert leftovers(db.parent) == ["d.db"]


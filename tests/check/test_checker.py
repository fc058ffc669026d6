"""edgeq.check.checker: finding real damage in copies of real stores, and repairing it.

Damage is made the way it happens: bytes flipped in the file where SQLite keeps
them (a message's data, an index entry, a stamp), or rows changed behind edgeq's
back through a plain sqlite3 connection (tests/damage.py). Each test checks what
the report says, repairs, and checks again.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from edgeq import ManualClock, Message, QueueManager
from edgeq.check.checker import NotAStore, StoreCheck, preflight
from edgeq.check.report import CheckReport, CounterDrift
from edgeq.errors import StoreError
from edgeq.store.connection import ConnectionFactory
from edgeq.uid import MessageUID
from tests import damage
from tests.conftest import STORE_KEYS, Recorder
from tests.damage import LINES, PAYLOADS, make_store


@pytest.fixture
def store(db_path: Path, clock: ManualClock) -> Path:
    make_store(db_path, clock)
    return db_path


@pytest.fixture
def opened(store: Path, clock: ManualClock) -> Iterator[tuple[QueueManager, Recorder]]:
    """The store opened, with a recording rule on ORDERS."""
    qm = QueueManager(store, clock=clock, keys=STORE_KEYS)
    recorder = Recorder()
    qm.add_rule("ORDERS", recorder)
    yield qm, recorder
    qm.close()


def row_of(path: Path, data: bytes) -> tuple[int, str, int, bytes]:
    """(id, origin, stamp, data as stored) of the plain message ``data`` (found by its
    data, or, on a sealed store, by position among ORDERS' rows)."""
    conn = damage.raw(path)
    try:
        row = conn.execute("SELECT id, origin, stamp, data FROM messages WHERE data = ?", (data,)).fetchone()
        if row is None:  # sealed: the rows are in put order
            index = PAYLOADS.index(data)
            row = conn.execute(
                "SELECT id, origin, stamp, data FROM messages WHERE queue_id = "
                "(SELECT id FROM queues WHERE name = 'ORDERS') ORDER BY id LIMIT 1 OFFSET ?", (index,),
            ).fetchone()
    finally:
        conn.close()
    return row[0], row[1], row[2], row[3]


def uid_text(path: Path, data: bytes) -> str:
    _, origin, stamp, _ = row_of(path, data)
    return f"{origin}.{stamp}"


def check(path: Path) -> CheckReport:
    """A check without a queue manager (as ``edgeq check`` runs without --repair)."""
    db = ConnectionFactory(path)
    try:
        return StoreCheck(db).run()
    finally:
        db.close()


def unblock(path: Path, clock: ManualClock) -> CheckReport:
    """What ``edgeq check --repair`` does before it opens the queue manager."""
    db = ConnectionFactory(path)
    try:
        return StoreCheck(db).unblock(clock())
    finally:
        db.close()


def drain(qm: QueueManager, queue: str) -> list[bytes]:
    out = []
    while (m := qm.get(queue)) is not None:
        out.append(m.data)
    return out


# -- a sound store ----------------------------------------------------------------------------


def test_a_sound_store_is_clean(store: Path, clock: ManualClock) -> None:
    report = check(store)
    assert report.clean and report.checked == 40
    assert (report.sqlite, report.messages, report.counters, report.records, report.identity) == ((),) * 5
    assert report.to_json()["clean"] is True and report.repairs is None
    with QueueManager(store, clock=clock) as qm:
        repaired = qm.check(repair=True)
        assert repaired.clean and repaired.repairs is None
        assert qm.depth("ORDERS") == 30


def test_the_messages_are_read_in_one_streaming_select_whatever_their_number(
    tmp_path: Path, clock: ManualClock
) -> None:
    seen: dict[int, list[str]] = {}
    for count in (10, 500):
        with QueueManager(tmp_path / f"{count}.db", name="DEV1", clock=clock) as qm:
            qm.define_queue("Q")
            qm.put_many("Q", [Message(b"m%d" % i) for i in range(count)])
            statements: list[str] = []
            with qm.tracer(statements.append):
                assert qm.check().checked == count
            seen[count] = [s for s in statements if "FROM messages" in s]
    assert len(seen[10]) == len(seen[500]) == 1
    assert "NOT INDEXED" in seen[500][0] and "edgeq_crc" in seen[500][0]


# -- damaged message rows -----------------------------------------------------------------------


@pytest.mark.parametrize("sealed", [False, True], ids=["plain", "sealed"])
def test_a_flipped_bit_in_a_messages_data_is_found_quarantined_and_told_to_its_rules(
    db_path: Path, clock: ManualClock, sealed: bool
) -> None:
    make_store(db_path, clock, sealed=sealed)
    victim = PAYLOADS[7]
    _, _, _, stored = row_of(db_path, victim)
    uid = uid_text(db_path, victim)
    damage.flip(db_path, stored, at=len(stored) // 2, mask=0x04)

    found = check(db_path)
    assert [(m.uid, m.queue, m.fix) for m in found.messages] == [(uid, "ORDERS", "quarantine")]
    assert "checksum does not match" in found.messages[0].what
    assert found.sqlite == () and found.counters == () and not found.clean

    with QueueManager(db_path, clock=clock, keys=STORE_KEYS) as qm:
        recorder = Recorder()
        qm.add_rule("ORDERS", recorder)
        report = qm.check(repair=True)
        assert report.repairs is not None and len(report.repairs.quarantined) == 1
        assert uid in report.repairs.quarantined[0] and report.repairs.left == ()
        assert report.repairs.rebuilt == ()  # SQLite found every index sound: none is rebuilt
        assert [(e.kind, str(e.message.uid) if e.message else None, e.reason) for e in recorder.events] == [
            ("removed", uid, "quarantined")
        ]
        assert qm.queue_stats("ORDERS").get("quarantined") == 1  # the persisted counters rule saw it too
        assert [q.uid for q in qm.quarantined()] == [uid]
        assert qm.check().clean
        assert drain(qm, "ORDERS") == [p for p in PAYLOADS if p != victim]


@pytest.mark.parametrize(("sql", "what"), [
    ("UPDATE messages SET data = x'00' WHERE id = ?", "checksum does not match"),
    ("UPDATE messages SET data = 'text now' WHERE id = ?", "data is text"),
    ("UPDATE messages SET priority = 'high' WHERE id = ?", "priority is text"),
    ("UPDATE messages SET crc = NULL WHERE id = ?", "no checksum"),
    ("UPDATE messages SET state = 7 WHERE id = ?", "impossible state 7"),
    ("UPDATE messages SET confirm_id = 99 WHERE id = ?", "ready, yet locked under confirm id 99"),
    ("UPDATE messages SET state = 2 WHERE id = ?", "get-locked without a confirm id"),
    ("UPDATE messages SET backout_count = -3 WHERE id = ?", "negative backout count -3"),
    ("UPDATE messages SET seq = 'late' WHERE id = ?", "seq is text"),
    ("UPDATE messages SET origin = CAST(x'4445c431' AS TEXT) WHERE id = ?", "origin is not valid UTF-8 text"),
])
def test_a_row_changed_behind_edgeqs_back_is_found_and_quarantined(
    store: Path, opened: tuple[QueueManager, Recorder], sql: str, what: str
) -> None:
    qm, recorder = opened
    msg_id, _, _, _ = row_of(store, PAYLOADS[3])
    damage.execute(store, sql, msg_id)

    found = qm.check()
    assert [(m.id, m.queue) for m in found.messages] == [(msg_id, "ORDERS")]
    assert what in found.messages[0].what

    report = qm.check(repair=True)
    assert report.repairs is not None and len(report.repairs.quarantined) == 1
    assert qm.check().clean, qm.check()
    assert drain(qm, "ORDERS") == [p for p in PAYLOADS if p != PAYLOADS[3]]
    assert len(qm.quarantined()) == 1
    told = [e for e in recorder.events if e.reason == "quarantined"]
    assert len(told) == (0 if "UTF-8" in what else 1)  # no rule is told of a message without a readable uid


def test_a_damaged_order_key_is_given_back_not_quarantined(
    store: Path, opened: tuple[QueueManager, Recorder]
) -> None:
    qm, recorder = opened
    conn = damage.raw(store)
    (msg_id,) = conn.execute("SELECT id FROM messages WHERE data = ?", (LINES[6],)).fetchone()
    conn.execute("UPDATE messages SET rank = 5 WHERE id = ?", (msg_id,))  # FIFO: rank is always 0
    conn.close()
    assert qm.browse("LOG", limit=1)[0].data == LINES[6]  # the damage reorders the queue

    found = qm.check()
    assert ([(m.queue, m.fix, m.what) for m in found.messages]
            == [("LOG", "rerank", "its order key (rank 5) should be 0")])
    report = qm.check(repair=True)
    assert (report.repairs is not None and len(report.repairs.reranked) == 1
            and report.repairs.quarantined == ())
    assert qm.check().clean and qm.quarantined() == [] and recorder.events == []
    assert drain(qm, "LOG") == LINES


def test_a_row_moved_to_no_queue_is_quarantined_and_its_queue_recounted(
    store: Path, opened: tuple[QueueManager, Recorder]
) -> None:
    qm, _ = opened
    msg_id, _, _, _ = row_of(store, PAYLOADS[0])
    damage.execute(store, "UPDATE messages SET queue_id = 99 WHERE id = ?", msg_id)

    found = qm.check()
    assert [(m.queue, m.what) for m in found.messages] == [(None, "belongs to no queue (queue id 99)")]
    assert found.counters == (CounterDrift("ORDERS", 30, 29, 30 * len(PAYLOADS[0]), 29 * len(PAYLOADS[0])),)

    report = qm.check(repair=True)
    assert report.repairs is not None
    assert len(report.repairs.quarantined) == 1 and report.repairs.recounted == (
        f"ORDERS: depth 30 -> 29, bytes {30 * len(PAYLOADS[0])} -> {29 * len(PAYLOADS[0])}",
    )
    assert qm.check().clean and qm.depth("ORDERS") == 29


def test_counters_that_drifted_are_recounted_and_nothing_else_changes(
    store: Path, opened: tuple[QueueManager, Recorder]
) -> None:
    qm, recorder = opened
    damage.execute(store, "UPDATE queues SET depth = depth + 5, bytes = bytes - 7 WHERE name = 'LOG'")
    size = sum(map(len, LINES))
    found = qm.check()
    assert found.counters == (CounterDrift("LOG", 15, 10, size - 7, size),) and found.messages == ()

    report = qm.check(repair=True)
    assert report.repairs is not None
    assert report.repairs.recounted == (f"LOG: depth 15 -> 10, bytes {size - 7} -> {size}",)
    assert (report.repairs.quarantined, report.repairs.rebuilt) == ((), ())
    assert qm.check().clean and qm.depth("LOG") == 10 and recorder.events == []


def test_every_message_of_a_queue_failing_blames_the_queue_not_the_messages(
    store: Path, clock: ManualClock
) -> None:
    # a flipped bit in its name
    damage.execute(store, "UPDATE queues SET name = 'ORDERZ' WHERE name = 'ORDERS'")
    with QueueManager(store, clock=clock) as qm:
        found = qm.check()
        assert len(found.messages) == 30 and {m.fix for m in found.messages} == {"leave"}
        assert [(r.table, r.queue) for r in found.records] == [("queues", "ORDERZ")]
        report = qm.check(repair=True)
        assert report.repairs is not None and report.repairs.quarantined == ()
        assert len(report.repairs.left) == 31
        assert qm.depth("ORDERZ") == 30 and qm.quarantined() == []


# -- damaged indexes ------------------------------------------------------------------------------


def test_a_damaged_index_entry_is_rebuilt_and_no_row_is_touched(
    store: Path, opened: tuple[QueueManager, Recorder]
) -> None:
    qm, recorder = opened
    _, origin, stamp, _ = row_of(store, PAYLOADS[12])
    entry = origin.encode() + stamp.to_bytes(8, "big")
    qm.close()
    damage.flip(store, entry, at=len(origin) - 1, mask=0x02, within="messages_uid")

    found = check(store)
    assert any("messages_uid" in line for line in found.sqlite), found.sqlite
    assert found.messages == () and found.counters == ()

    with QueueManager(store) as again:
        report = again.check(repair=True)
        assert report.repairs is not None and "messages_uid" in report.repairs.rebuilt
        assert report.repairs.quarantined == () and report.repairs.left == ()
        assert again.check().clean
        again.delete_message("ORDERS", MessageUID(origin, stamp))  # found through the rebuilt index
        assert again.depth("ORDERS") == 29 and again.quarantined() == []
    assert recorder.events == []


def test_a_flipped_stamp_that_collides_with_its_neighbours_uid_is_quarantined(
    store: Path, clock: ManualClock
) -> None:
    # Stamps of one batch are consecutive: flipping the low bit of an even one gives the next
    # message's stamp, so the damaged row now claims its neighbour's uid.
    conn = damage.raw(store)
    msg_id, origin, stamp, data = conn.execute(
        "SELECT id, origin, stamp, data FROM messages WHERE queue_id = (SELECT id FROM queues WHERE name = "
        "'ORDERS') AND stamp % 2 = 0 ORDER BY id LIMIT 1 OFFSET 3"
    ).fetchone()
    conn.close()
    neighbour = PAYLOADS[PAYLOADS.index(data) + 1]
    damage.flip(store, origin.encode() + stamp.to_bytes(8, "big"), at=len(origin) + 7, within="messages")

    found = check(store)
    assert [(m.id, m.uid) for m in found.messages] == [(msg_id, f"{origin}.{stamp + 1}")]
    assert any("messages_uid" in line for line in found.sqlite), found.sqlite

    with QueueManager(store, clock=clock) as qm:
        report = qm.check(repair=True)
        assert report.repairs is not None and len(report.repairs.quarantined) == 1
        assert "messages_uid" in report.repairs.rebuilt
        assert qm.check().clean
        got = drain(qm, "ORDERS")
        assert data not in got and neighbour in got and len(got) == 29


# -- damaged records beside the messages ----------------------------------------------------------


def test_a_rule_binding_that_cannot_be_decoded_is_set_aside_so_the_store_opens(
    store: Path, clock: ManualClock
) -> None:
    damage.execute(store, "UPDATE rule_bindings SET config = '{\"queue\": \"DL' ")
    with pytest.raises(StoreError, match="damaged"):
        QueueManager(store, clock=clock).close()

    found = check(store)
    assert [(r.table, r.queue) for r in found.records] == [("rule_bindings", "ORDERS")]
    assert "cannot be read as a JSON object" in found.records[0].what

    unblocked = unblock(store, clock)
    assert unblocked.repairs is not None and len(unblocked.repairs.quarantined) == 1
    with QueueManager(store, clock=clock) as qm:
        assert qm.check().clean
        assert qm.queue_bindings("ORDERS") == []
        assert [(q.queue, q.uid) for q in qm.quarantined()] == [("ORDERS", "rule_bindings.1")]


def test_a_rule_event_that_cannot_be_decoded_is_set_aside(store: Path, clock: ManualClock) -> None:
    damage.execute(
        store,
        "INSERT INTO rule_events (queue, kind, detail, at_ms, message) VALUES ('ORDERS', 'removed', 'got', "
        "1, ?)", b"\xff\x00 not cbor",
    )
    found = check(store)
    assert ([(r.table, r.what) for r in found.records]
            == [("rule_events", "its copy of the message cannot be decoded")])
    assert unblock(store, clock).repairs is not None
    with QueueManager(store, clock=clock) as qm:
        assert qm.check().clean


def test_a_damaged_journal_row_is_quarantined(store: Path, clock: ManualClock) -> None:
    damage.execute(
        store,
        "INSERT INTO journal (kind, side, at_ms, queue, uid, origin) VALUES ('expired', 'sever', 5, "
        "'ORDERS', 'u', 'o')"
    )
    with QueueManager(store, clock=clock) as qm:
        found = qm.check()
        assert ([(r.table, r.what) for r in found.records]
                == [("journal", "its side is neither server nor device")])
        report = qm.check(repair=True)
        assert report.repairs is not None and report.repairs.quarantined == (
            "journal row 1 (queue ORDERS): its side is neither server nor device",
        )
        assert qm.check().clean


def test_a_damaged_incarnation_is_drawn_again_and_a_lost_clock_reset(store: Path, clock: ManualClock) -> None:
    with QueueManager(store, clock=clock) as qm:
        before = qm.origin
    damage.execute(store, "UPDATE edgeq_meta SET value = 'k3x9Q!' WHERE key = 'incarnation'")
    damage.execute(store, "DELETE FROM edgeq_clock")
    found = check(store)
    assert len(found.identity) == 2 and "incarnation 'k3x9Q!' is damaged" in found.identity[0]

    report = unblock(store, clock)
    assert report.repairs is not None and len(report.repairs.identity) == 2
    with QueueManager(store, clock=clock) as qm:
        assert qm.origin != before and qm.check().clean
        uid = qm.put("ORDERS", Message(b"after the repair"))
        conn = damage.raw(store)
        (highest,) = conn.execute("SELECT max(stamp) FROM messages WHERE data != ?",
                                  (b"after the repair",)).fetchone()
        conn.close()
        assert uid.stamp > highest


# -- files that are not (readable) stores ----------------------------------------------------------


def test_preflight_refuses_what_is_not_an_edgeq_store_and_leaves_it_untouched(tmp_path: Path) -> None:
    with pytest.raises(NotAStore, match="does not exist"):
        preflight(tmp_path / "missing.db")
    empty = tmp_path / "empty.db"
    empty.touch()
    with pytest.raises(NotAStore, match="empty"):
        preflight(empty)
    for path in damage.not_stores(tmp_path):
        before = path.read_bytes()
        with pytest.raises(NotAStore):
            preflight(path)
        assert path.read_bytes() == before


def test_a_file_sqlite_cannot_read_is_reported_damaged(store: Path) -> None:
    damage.garble_schema_page(store)
    early = preflight(store)  # an edgeq store by its header: recognised, then found unreadable
    report = early if early is not None else check(store)
    assert not report.clean and report.checked == 0
    assert report.unreadable == ("SQLite cannot read the store (database disk image is malformed)",)


def test_an_edgeq_store_whose_schema_version_was_lost_is_damaged_not_foreign(store: Path) -> None:
    damage.execute(store, "PRAGMA user_version = 0")
    report = preflight(store)
    assert report is not None and "no schema version" in report.unreadable[0]


def test_a_journal_of_dead_lettered_and_discarded_messages_is_not_damage(
    db_path: Path, clock: ManualClock
) -> None:
    """Since the dead-letter queue a journal holds these kinds too: they are records, not damage."""
    with QueueManager(db_path, name="DEV1", clock=clock) as qm:
        qm.define_remote_queue("METRICS", target_qmgr="HOME", refusal_limit=1)
        uid = qm.put("METRICS", Message(b"refused once too often"))
        qm.exchange.refused("METRICS", [(uid, "no-queue: HOME has no queue METRICS")])
        qm.dlq_delete([uid])
        assert {e.kind for e in qm.journal_since()} >= {"dead-lettered", "discarded"}
        report = qm.check(repair=True)
        assert report.records == () and report.clean
        assert report.repairs is None  # nothing to repair, nothing quarantined
        assert {e.kind for e in qm.journal_since()} >= {"dead-lettered", "discarded"}

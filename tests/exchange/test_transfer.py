"""The verbs the sync layer builds on: per-message batches, remembered uids,
remote and home-server queues, transmission, lock release."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlite_utils import Database

from edgeq import Int32, ManualClock, Message, MessageUID, QueueManager
from edgeq.errors import InvalidArgument, RemoteUnavailable
from edgeq.store.schema import MIGRATIONS, SCHEMA_VERSION
from tests.conftest import Recorder

UID = MessageUID("DEV1", 1_763_683_200_000_001)


def test_put_each_reports_every_outcome(qm: QueueManager) -> None:
    qm.define_queue("Q", max_depth=3, max_message_bytes=10)
    held = MessageUID("DEV1", 7)
    qm.put("Q", Message(b"held", uid=held))
    results = qm.put_each("Q", [
        Message(b"new", uid=UID),
        Message(b"again", uid=held),
        Message(b"stale", uid=MessageUID("DEV1", 8), expiry=Int32(1), created_ms=1),
        Message(b"x" * 11, uid=MessageUID("DEV1", 9)),
        Message(b"fits", uid=MessageUID("DEV1", 10)),
        Message(b"full", uid=MessageUID("DEV1", 11)),
    ], confirm_id=1)
    assert [r.status for r in results] == ["stored", "duplicate", "expired", "refused", "stored", "refused"]
    assert "max_message_bytes" in results[3].detail and "max_depth" in results[5].detail
    assert qm.depth("Q") == 3


def test_resend_replaces_unconfirmed_copy_in_put_each(qm: QueueManager) -> None:
    qm.define_queue("Q")
    assert qm.put_each("Q", [Message(b"v1", uid=UID)], confirm_id=1)[0].status == "stored"
    assert qm.put_each("Q", [Message(b"v2", uid=UID, resend=True)], confirm_id=2)[0].status == "replaced"
    assert qm.put_each("Q", [Message(b"v3", uid=UID)], confirm_id=3)[0].status == "unconfirmed"
    qm.confirm_put("Q", UID)
    got = qm.get("Q")
    assert got is not None and got.data == b"v2"


def test_confirmed_uid_is_remembered_after_consumption_then_forgotten(
    open_qm: Callable[..., QueueManager], clock: ManualClock
) -> None:
    qm = open_qm(remember_confirmed_ms=60_000)
    qm.define_queue("Q")
    qm.put_each("Q", [Message(b"x", uid=UID)], confirm_id=1)
    assert [r.status for r in qm.confirm_put_each("Q", [UID])] == ["confirmed"]
    assert qm.get("Q") is not None  # consumed: the row is gone
    assert qm.put_each("Q", [Message(b"x", uid=UID, resend=True)], confirm_id=2)[0].status == "duplicate"
    assert [r.status for r in qm.confirm_put_each("Q", [UID])] == ["already"]
    clock.advance(60_001)
    qm.confirm_put_each("Q", [])  # any confirm prunes the window
    assert qm.put_each("Q", [Message(b"x", uid=UID)], confirm_id=3)[0].status == "stored"


def test_remembering_can_be_disabled(open_qm: Callable[..., QueueManager]) -> None:
    qm = open_qm(remember_confirmed_ms=None)
    qm.define_queue("Q")
    qm.put("Q", Message(b"x", uid=UID), confirm_id=1)
    qm.confirm_put("Q", UID)
    assert qm.get("Q") is not None
    assert qm.put_each("Q", [Message(b"x", uid=UID)])[0].status == "stored"


def test_confirm_put_each_statuses(qm: QueueManager, clock: ManualClock, rule: Recorder) -> None:
    qm.define_queue("Q")
    qm.add_rule("Q", rule)
    soon = qm.put("Q", Message(b"soon", expiry=Int32(10)), confirm_id=1)
    fine = qm.put("Q", Message(b"fine"), confirm_id=1)
    clock.advance(10)
    results = qm.confirm_put_each("Q", [soon, fine, fine, "DEV1.5"])
    assert [r.status for r in results] == ["expired", "confirmed", "already", "unknown"]
    assert rule.expired() == [(b"soon", "add")]


def test_remote_queue_stores_and_transmits(qm: QueueManager, clock: ManualClock, rule: Recorder) -> None:
    qm.define_remote_queue("ORDERS", target_qmgr="HOME", target_queue="IN")
    attrs = qm.queue_attributes("ORDERS")
    assert ((attrs.kind, attrs.target_qmgr, attrs.target_queue, attrs.mode)
            == ("remote", "HOME", "IN", "async"))
    assert [q.name for q in qm.remote_queues()] == ["ORDERS"]
    qm.add_rule("ORDERS", rule)
    qm.put("ORDERS", Message(b"gone", expiry=Int32(5)))
    a = qm.put("ORDERS", Message(b"a", expiry=Int32(60_000)))
    b = qm.put("ORDERS", Message(b"b"))
    with pytest.raises(InvalidArgument, match="remote queue"):
        qm.get("ORDERS")
    with pytest.raises(InvalidArgument, match="remote queue"):
        qm.browse("ORDERS")
    clock.advance(5)
    batch = qm.exchange.next_for_transmission("ORDERS", 10)
    assert [m.uid for m in batch] == [a, b] and batch[0].remaining_expiry_ms == 59_995
    assert rule.expired() == [(b"gone", "get")]
    # not locked, not removed
    assert [m.uid for m in qm.exchange.next_for_transmission("ORDERS", 10)] == [a, b]
    assert qm.exchange.transmitted("ORDERS", [a, b, "DEV1.42"]) == 2
    assert rule.removed() == [(b"a", "transmitted"), (b"b", "transmitted")]
    assert qm.depth("ORDERS") == 0
    with pytest.raises(InvalidArgument, match="not a remote queue"):
        qm.define_queue("L")
        qm.exchange.next_for_transmission("L", 1)


def test_sync_remote_queue_delivers_inside_put_or_keeps_nothing(qm: QueueManager) -> None:
    qm.define_remote_queue("NOW", target_qmgr="HOME", mode="sync")
    with pytest.raises(RemoteUnavailable, match="no sync agent"):
        qm.put("NOW", Message(b"x"))
    assert qm.depth("NOW") == 0

    def down(queue: str) -> None:
        raise ConnectionError("server unreachable")

    qm.exchange.set_transmitter(down)
    with pytest.raises(RemoteUnavailable, match=r"server unreachable.*nothing was kept"):
        qm.put("NOW", Message(b"x"))
    assert qm.depth("NOW") == 0
    sent: list[bytes] = []

    def deliver(queue: str) -> None:
        batch = qm.exchange.next_for_transmission(queue, 100)
        sent.extend(m.data for m in batch)
        qm.exchange.transmitted(queue, [m.uid for m in batch])

    qm.exchange.set_transmitter(deliver)
    qm.put("NOW", Message(b"y"))
    assert sent == [b"y"] and qm.depth("NOW") == 0


def test_home_server_queue_is_a_local_queue_with_a_server(qm: QueueManager) -> None:
    qm.define_home_server_queue("INBOX", server="HOME", expiry_ms=1_000)
    (home,) = qm.home_server_queues()
    assert (home.name, home.kind, home.server, home.expiry_ms) == ("INBOX", "home", "HOME", 1_000)
    qm.put("INBOX", Message(b"pulled"))
    got = qm.get("INBOX")
    assert got is not None and got.data == b"pulled"


def test_release_locks_restores_every_get_lock(qm: QueueManager) -> None:
    qm.define_queue("Q")
    qm.put_many("Q", [Message(b"1"), Message(b"2"), Message(b"3")])
    qm.get_many("Q", 2, confirm_id=1)
    assert qm.get("Q", confirm_id=2) is not None
    assert qm.release_locks("Q") == 3
    assert [m.backout_count for m in qm.browse("Q")] == [1, 1, 1]


def test_a_version_1_store_is_migrated_with_its_messages(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path, isolation_level=None)
    MIGRATIONS[0](Database(conn, execute_plugins=False))
    conn.execute("PRAGMA application_id = 1162102609")
    conn.execute("PRAGMA user_version = 1")
    conn.execute("INSERT INTO edgeq_meta VALUES ('name', 'OLD')")
    conn.execute(
        "INSERT INTO queues (name, default_priority, ordering, created_ms, depth) VALUES ('Q', 4, "
        "'priority', 1, 1)"
    )
    conn.execute(
        "INSERT INTO messages (queue_id, origin, stamp, state, rank, seq, priority, created_ms, arrived_ms,"
        " expiry_kind, backout_count, data) VALUES (1, 'OLD', 5, 0, 4, 5, 4, 1, 1, 0, 0, x'6f6c64')"
    )
    conn.close()
    with QueueManager(path) as qm:
        assert qm.queue_attributes("Q").kind == "local"
        got = qm.get("Q")
        assert got is not None and got.data == b"old" and str(got.uid) == "OLD.5"
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    conn.close()


def test_confirm_get_each_statuses(qm: QueueManager, clock: ManualClock, rule: Recorder) -> None:
    qm.define_queue("Q", ordering="fifo")
    qm.add_rule("Q", rule)
    qm.put("Q", Message(b"short", expiry=Int32(10)))
    qm.put("Q", Message(b"long"))
    a, b = qm.get_many("Q", 2, confirm_id=4)
    clock.advance(10)
    results = qm.confirm_get_each("Q", [a.uid, b.uid, b.uid, "DEV1.99"])
    assert [r.status for r in results] == ["expired", "confirmed", "unknown", "unknown"]
    assert rule.expired() == [(b"short", "get")] and rule.removed() == [(b"long", "confirmed")]
    assert qm.depth("Q") == 0


def test_confirm_put_each_batch_keeps_order_and_handles_repeats(qm: QueueManager) -> None:
    qm.define_queue("Q", ordering="fifo")
    uids = [qm.put("Q", Message(b"%d" % i), confirm_id=1) for i in range(3)]
    results = qm.confirm_put_each("Q", [uids[2], uids[0], uids[2], uids[1]])
    assert [r.status for r in results] == ["confirmed", "confirmed", "already", "confirmed"]
    assert [m.data for m in qm.browse("Q")] == [b"2", b"0", b"1"]  # confirm order

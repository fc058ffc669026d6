"""edgeq.sync.server.admin.records: the home store's table admin_requests, on a real file: what a
reply records (once; a refusal of an unauthenticated copy only until the genuine answer),
the listings, the statuses, and a damaged row read as damage."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from edgeq import ManualClock, Message, QueueManager
from edgeq.admin.wire import AdminReply, AdminRequest, request_message
from edgeq.errors import StoreError
from edgeq.store.schema import MIGRATIONS
from edgeq.sync.server.admin.records import AdminRecords, unauthenticated
from tests.conftest import T0

KEY = Ed25519PrivateKey.generate()


@pytest.fixture
def records(tmp_path: Path) -> Iterator[AdminRecords]:
    QueueManager(tmp_path / "home.db", name="HOME").close()  # the schema
    table = AdminRecords(str(tmp_path / "home.db"))
    yield table
    table.close()


def sent(records: AdminRecords, device: str = "DEV1", created_ms: int = T0, expires_ms: int | None = None,
         action: str = "inquire-all") -> AdminRequest:
    request = AdminRequest.create(action, device=device, reply_qmgr="HOME", created_ms=created_ms,
                                  key_id="ops", expires_ms=expires_ms).sign(KEY)
    records.add(request, request.to_bytes())
    return request


def answer(request: AdminRequest, rc: str = "success", *, device: str | None = None,
           authenticated: bool = True, at: int = T0) -> AdminReply:
    item: dict[str, object] = {"object": None, "rc": "success" if rc == "success" else "failed",
                               "reason": None if rc == "success" else "no"}
    if not authenticated:
        item["authenticated"] = False
    return AdminReply(request.request_id, device or request.device, rc, (item,), f"{rc}",
                      at)  # type: ignore[arg-type]


def record(records: AdminRecords, reply: AdminReply, now_ms: int = T0) -> str:
    return records.reply(reply, reply.to_bytes(), now_ms)


def test_a_request_is_recorded_as_sent(records: AdminRecords) -> None:
    request = sent(records, expires_ms=T0 + 10)
    got = records.get(request.request_id)
    assert got is not None
    assert (got.device, got.action, got.target, got.created_ms, got.expires_ms, got.request) == (
        "DEV1", "inquire-all", None, T0, T0 + 10, request.to_bytes())
    assert (got.status(T0 + 9), got.status(T0 + 10), got.describe(T0 + 10)) == (
        "pending", "expired", "expired before delivery: never executed")
    assert records.get("ab" * 16) is None


def test_a_request_handed_over_reads_unknown_after_its_expiry(records: AdminRecords) -> None:
    given, kept = sent(records, expires_ms=T0 + 10), sent(records, expires_ms=T0 + 10)
    assert records.handed_over("DEV2", [given.request_id], T0 + 1) == 0  # not that device's request
    assert records.handed_over("DEV1", [given.request_id], T0 + 1) == 1
    assert records.handed_over("DEV1", [given.request_id], T0 + 5) == 0  # the first hand-over counts
    got, never = records.get(given.request_id), records.get(kept.request_id)
    assert got is not None and never is not None and got.delivered_ms == T0 + 1
    assert (got.status(T0 + 10), got.describe(T0 + 10)) == (
        "unknown", "outcome unknown until the device answers")
    assert never.status(T0 + 10) == "expired" and never.delivered_ms is None
    record(records, answer(given), T0 + 99)  # a late reply: its real outcome
    got = records.get(given.request_id)
    assert got is not None and got.describe(T0 + 100) == "replied: success"


def test_a_request_a_pull_holds_before_its_mark_is_already_unknown(tmp_path: Path) -> None:
    """The pull marks what it hands over right after its get: a request whose message a pull
    holds locked (that moment) may be on its way to the device, and never reads "never executed"."""
    with QueueManager(tmp_path / "home.db", name="HOME", clock=ManualClock(T0)) as home:
        home.define_queue("DEV1.SYSTEM.ADMIN")
        records = AdminRecords(str(home.path))
        try:
            held, waiting = sent(records, expires_ms=T0 + 10), sent(records, expires_ms=T0 + 10)
            for request in (held, waiting):
                home.put("DEV1.SYSTEM.ADMIN", request_message(request))
            locked = home.get_many("DEV1.SYSTEM.ADMIN", 1, confirm_id=7)  # the pull's get, before its mark
            assert [m.correlation_id for m in locked] == [bytes.fromhex(held.request_id)]
            by_id = {r.request_id: r.status(T0 + 10) for r in records.pending()}
            assert by_id == {held.request_id: "unknown", waiting.request_id: "expired"}
        finally:
            records.close()


def test_requests_sent_before_the_mark_are_taken_as_handed_over_unless_waiting(tmp_path: Path) -> None:
    path = tmp_path / "home.db"
    with QueueManager(path, name="HOME", clock=ManualClock(T0)) as home:
        home.define_queue("DEV1.SYSTEM.ADMIN")
        records = AdminRecords(str(path))
        try:
            waiting, pulled = sent(records, expires_ms=T0 + 10), sent(records, expires_ms=T0 + 10)
            home.put("DEV1.SYSTEM.ADMIN", request_message(waiting))  # the other's message is gone: pulled
            home.put("DEV1.SYSTEM.ADMIN", Message(b"stray"))  # no correlation id: changes nothing
        finally:
            records.close()
    conn = sqlite3.connect(path)  # the store as the migration before the mark left it
    conn.execute("ALTER TABLE admin_requests DROP COLUMN delivered_ms")
    conn.execute("DROP TABLE api_tokens")  # and the tables of the migrations after it (_v14, _v15)
    conn.execute("DROP TABLE api_actions")
    conn.execute("DROP TABLE device_backlogs")
    conn.execute(f"PRAGMA user_version = {[m.__name__ for m in MIGRATIONS].index('_v13')}")
    conn.commit()
    conn.close()
    QueueManager(path, clock=ManualClock(T0)).close()  # migrates
    records = AdminRecords(str(path))
    try:
        by_id = {r.request_id: r.describe(T0 + 10) for r in records.pending()}
        assert by_id == {waiting.request_id: "expired before delivery: never executed",
                         pulled.request_id: "outcome unknown until the device answers"}
    finally:
        records.close()


def test_a_reply_is_recorded_once_and_only_for_its_device(records: AdminRecords) -> None:
    request = sent(records)
    assert record(records, answer(request, device="DEV2")) == "unknown"  # not the device it was sent to
    assert record(records, answer(request), T0 + 5) == "recorded"
    assert record(records, answer(request, "failed"), T0 + 6) == "already"  # the first answer stands
    got = records.get(request.request_id)
    assert got is not None and (got.rc, got.replied_ms, got.status(T0 + 99), got.describe(T0)) == (
        "success", T0 + 5, "replied", "replied: success")


def test_an_unauthenticated_refusal_stands_only_until_the_genuine_answer(records: AdminRecords) -> None:
    request = sent(records)
    forged = answer(request, "failed", authenticated=False)
    assert unauthenticated(forged) and not unauthenticated(answer(request))
    assert record(records, forged) == "recorded"  # nothing better known: the operator sees why
    assert record(records, forged) == "already"
    assert record(records, answer(request), T0 + 1) == "recorded"  # the genuine answer replaces it
    assert record(records, forged, T0 + 2) == "already"  # and no refusal replaces a real answer
    got = records.get(request.request_id)
    assert got is not None and got.rc == "success" and got.replied_ms == T0 + 1


def test_listings(records: AdminRecords) -> None:
    first, second, other = (sent(records, created_ms=T0), sent(records, created_ms=T0 + 1),
                            sent(records, "DEV2", T0 + 2))
    assert ([r.request_id for r in records.pending()]
            == [first.request_id, second.request_id, other.request_id])
    assert [r.request_id for r in records.pending("DEV2")] == [other.request_id]
    record(records, answer(first), T0 + 10)
    record(records, answer(other), T0 + 20)
    # the latest first
    assert [r.request_id for r in records.replied()] == [other.request_id, first.request_id]
    assert [r.request_id for r in records.replied(limit=1)] == [other.request_id]
    assert [r.request_id for r in records.replied("DEV1")] == [first.request_id]
    assert [r.request_id for r in records.pending()] == [second.request_id]
    shown = records.replied("DEV1")[0].as_dict(T0)
    assert (shown["status"] == "replied"
            and shown["reply"]["results"] == [{"object": None, "rc": "success", "reason": None}])


def test_a_damaged_reply_reads_as_damage(records: AdminRecords, tmp_path: Path) -> None:
    request = sent(records)
    with sqlite3.connect(tmp_path / "home.db") as conn:
        conn.execute("UPDATE admin_requests SET replied_ms = 1, rc = 'success', reply = x'00'")
    with pytest.raises(StoreError, match="the store is damaged: the reply recorded for admin request"):
        records.get(request.request_id)
    with pytest.raises(StoreError, match="the store is damaged"):
        record(records, answer(request))  # deciding whether it may replace the stored one reads it

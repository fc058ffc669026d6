"""The journal: accepted, expired and delivered entries, written with the change itself."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from edgeq import Int32, ManualClock, Message, MessageUID, QueueManager
from edgeq.errors import InvalidArgument
from edgeq.store.journal import JournalEntry
from tests.conftest import T0


def test_server_journal_records_accepted_expired_and_delivered(
    open_qm: Callable[..., QueueManager], clock: ManualClock
) -> None:
    qm = open_qm(name="HOME", journal="server")
    qm.define_queue("ORDERS")
    uid = MessageUID("DEV1", (T0 - 500) * 1000)
    device_msg = Message(b"12345", uid=uid, created_ms=T0 - 500)
    qm.put_each("ORDERS", [device_msg], confirm_id=1)
    clock.advance(20)
    qm.confirm_put_each("ORDERS", [uid], device="DEV1", clock_offset_ms=-30)
    qm.put("ORDERS", Message(b"short", expiry=Int32(10)))
    assert qm.get("ORDERS") is not None  # delivered (priority 4, arrival order: the device message)
    clock.advance(10)
    assert qm.sweep_expired("ORDERS") == 1
    accepted, delivered, expired = qm.journal_since()
    assert (accepted.kind, accepted.side, accepted.uid, accepted.origin, accepted.device) == (
        "accepted", "server", str(uid), "DEV1", "DEV1"
    )
    assert ((accepted.size, accepted.created_ms, accepted.arrived_ms, accepted.confirmed_ms)
            == (5, T0 - 500, T0, T0 + 20))
    assert accepted.clock_offset_ms == -30
    assert (delivered.kind, delivered.uid, delivered.at_ms) == ("delivered", str(uid), T0 + 20)
    assert ((expired.kind, expired.side, expired.check_point, expired.origin)
            == ("expired", "server", "sweep", qm.origin))
    assert [e.id for e in qm.journal_since(accepted.id)] == [delivered.id, expired.id]


def test_device_journal_keeps_only_expiries_and_can_be_trimmed(
    open_qm: Callable[..., QueueManager], clock: ManualClock
) -> None:
    qm = open_qm(journal="device")
    qm.define_queue("Q")
    qm.put("Q", Message(b"y"))
    qm.put("Q", Message(b"x", expiry=Int32(5)))
    got = qm.get("Q")
    assert got is not None and got.data == b"y"  # a device journal does not record deliveries
    clock.advance(5)
    assert qm.depth("Q") == 0
    (entry,) = qm.journal_since()
    assert (entry.kind, entry.side, entry.check_point, entry.at_ms) == ("expired", "device", "depth", T0 + 5)
    assert qm.exchange.journal_trim(entry.id) == 1
    assert qm.journal_since() == []


def test_remote_expiries_are_rebased_and_deduplicated(open_qm: Callable[..., QueueManager]) -> None:
    qm = open_qm(name="HOME", journal="server")
    reported = JournalEntry(3, "expired", "device", T0 + 1_000, "ORDERS", "DEV1.5", "DEV1", check_point="get")
    assert qm.exchange.journal_remote_expiries("DEV1", [reported], clock_offset_ms=400) == 1
    # resent: kept once
    assert qm.exchange.journal_remote_expiries("DEV1", [reported], clock_offset_ms=400) == 0
    (entry,) = qm.journal_since()
    assert (entry.side, entry.at_ms, entry.device, entry.check_point) == ("device", T0 + 600, "DEV1", "get")


def test_remote_expiries_each_answer_every_entry(open_qm: Callable[..., QueueManager]) -> None:
    qm = open_qm(name="HOME", journal="server")

    def reported(uid: str, queue: str = "ORDERS", kind: str = "expired") -> JournalEntry:
        return JournalEntry(0, kind, "device", T0 + 1_000, queue, uid, uid.rpartition(".")[0],
                            check_point="get")

    entries = [
        reported("DEV1.5"),                     # its own
        reported("DEV1:k3x9qa.6"),              # its own, origin with the store's incarnation
        reported("HOME.7", "DEV1.INBOX"),       # pulled from the server's queue for DEV1, expired there
        reported("HOME.8"),                     # foreign
        reported("DEV2.9", "DEV2.INBOX"),       # another device's queue
        reported("HOME.10", "DEV1."),           # not a queue held for DEV1
        reported("DEV1.11", kind="accepted"),   # not an expiry
        reported("DEV1.5"),                     # the same again
    ]
    results = qm.exchange.journal_remote_expiries_each("DEV1", entries, clock_offset_ms=400)
    assert [(r.uid, r.queue, r.status) for r in results] == [
        ("DEV1.5", "ORDERS", "recorded"), ("DEV1:k3x9qa.6", "ORDERS", "recorded"),
        ("HOME.7", "DEV1.INBOX", "recorded"), ("HOME.8", "ORDERS", "refused"),
        ("DEV2.9", "DEV2.INBOX", "refused"), ("HOME.10", "DEV1.", "refused"),
        ("DEV1.11", "ORDERS", "refused"), ("DEV1.5", "ORDERS", "already"),
    ]
    assert all(r.detail for r in results if r.status == "refused")
    assert "foreign" in results[3].detail
    again = qm.exchange.journal_remote_expiries_each("DEV1", entries[:3])
    assert [r.status for r in again] == ["already"] * 3
    recorded = [e for e in qm.journal_since() if e.kind == "expired"]
    assert [(e.uid, e.queue, e.at_ms, e.device) for e in recorded] == [
        ("DEV1.5", "ORDERS", T0 + 600, "DEV1"), ("DEV1:k3x9qa.6", "ORDERS", T0 + 600, "DEV1"),
        ("HOME.7", "DEV1.INBOX", T0 + 600, "DEV1"),
    ]
    assert qm.exchange.journal_remote_expiries_each("DEV1", []) == []


def test_a_store_with_sync_queues_journals_device_expiries_by_default(
    open_qm: Callable[..., QueueManager], clock: ManualClock
) -> None:
    qm = open_qm()
    assert qm.journal_mode is None  # no remote or home-server queue: nothing to report
    qm.define_queue("Q")
    assert qm.journal_mode is None
    qm.define_home_server_queue("INBOX", server="HOME")
    assert qm.journal_mode == "device"  # at once, in the process that defined it
    qm.put("INBOX", Message(b"x", expiry=Int32(5)))
    clock.advance(5)
    assert qm.depth("INBOX") == 0
    assert [(e.queue, e.side) for e in qm.journal_since()] == [("INBOX", "device")]
    qm.close()
    qm = open_qm()
    assert qm.journal_mode == "device"  # and at every later open
    qm.define_remote_queue("ORDERS", target_qmgr="HOME")
    qm.put("ORDERS", Message(b"y", expiry=Int32(5)))
    clock.advance(5)
    assert qm.sweep_expired() == 1
    assert [e.queue for e in qm.journal_since()] == ["INBOX", "ORDERS"]
    qm.close()
    assert open_qm(journal="server").journal_mode == "server"  # an explicit setting wins


def test_an_explicit_journal_off_stays_off(open_qm: Callable[..., QueueManager], clock: ManualClock) -> None:
    qm = open_qm(journal="off")
    qm.define_remote_queue("ORDERS", target_qmgr="HOME")
    qm.define_home_server_queue("INBOX", server="HOME")
    assert qm.journal_mode is None
    qm.put("ORDERS", Message(b"x", expiry=Int32(5)))
    clock.advance(5)
    assert qm.sweep_expired() == 1
    assert qm.journal_since() == []
    qm.close()
    assert open_qm().journal_mode is None


def test_journal_arguments_are_validated(open_qm: Callable[..., QueueManager]) -> None:
    with pytest.raises(InvalidArgument, match="journal must be"):
        open_qm(journal="both")
    qm = open_qm(journal="device")
    with pytest.raises(InvalidArgument, match="journal='server'"):
        qm.exchange.journal_remote_expiries("DEV1", [])
    with pytest.raises(InvalidArgument, match="after_id"):
        qm.journal_since(-1)


def test_bulk_expiry_is_journaled_without_rules(
    open_qm: Callable[..., QueueManager], clock: ManualClock
) -> None:
    qm = open_qm(name="HOME", journal="server")
    qm.define_queue("Q")
    qm.put_many("Q", [Message(b"%d" % i, expiry=Int32(1)) for i in range(1_200)])
    clock.advance(1)
    assert qm.depth("Q") == 0
    entries = qm.journal_since(limit=5_000)
    assert len(entries) == 1_200 and {e.check_point for e in entries} == {"depth"}


def test_devices_are_recorded_durably(open_qm: Callable[..., QueueManager], clock: ManualClock) -> None:
    qm = open_qm(name="HOME")
    qm.exchange.record_device("DEV1", clock_offset_ms=250, agent="edgeq-agent/0.1")
    clock.advance(1_000)
    qm.exchange.record_device("DEV1")  # a later contact keeps the measured offset
    qm.close()
    (dev,) = open_qm(name="HOME").devices()
    assert (dev.name, dev.added_ms, dev.last_seen_ms, dev.clock_offset_ms, dev.agent) == (
        "DEV1", T0, T0 + 1_000, 250, "edgeq-agent/0.1"
    )


def test_journal_mode_is_kept_by_the_store(open_qm: Callable[..., QueueManager]) -> None:
    qm = open_qm(journal="device")
    assert qm.journal_mode == "device"
    qm.close()
    qm = open_qm()
    assert qm.journal_mode == "device"
    qm.close()
    assert open_qm(journal="off").journal_mode is None


def test_device_registry(open_qm: Callable[..., QueueManager]) -> None:
    from edgeq.errors import DeviceNotFound, InvalidType

    qm = open_qm(name="HOME")
    key = bytes(range(32))
    qm.register_device("DEV1", key, queues=["ORDERS", "TELEMETRY"])
    qm.exchange.record_device("DEV1", clock_offset_ms=5)  # contact keeps the registration
    dev = qm.device("DEV1")
    assert (dev is not None and dev.public_key == key and dev.queues == ("ORDERS", "TELEMETRY")
            and dev.registered)
    qm.revoke_device("DEV1")
    dev = qm.device("DEV1")
    assert dev is not None and dev.revoked_ms == T0 and not dev.registered
    qm.register_device("DEV1", key)  # re-registering lifts the revocation
    dev = qm.device("DEV1")
    assert dev is not None and dev.registered and dev.queues is None
    with pytest.raises(DeviceNotFound):
        qm.revoke_device("DEV9")
    with pytest.raises(InvalidArgument, match="32 raw bytes"):
        qm.register_device("DEV2", b"short")
    with pytest.raises(InvalidArgument, match=r"must not contain '\.'"):
        qm.register_device("DEV1.INBOX", key)
    with pytest.raises(InvalidType):
        qm.register_device("DEV2", key, queues="ORDERS")  # type: ignore[arg-type]
    assert qm.device("DEV9") is None

"""edgeq.sync.server.admin.client: the operator's AdminClient on a real home store: requests signed,
recorded and queued for the device; replies collected from SYSTEM.ADMIN.REPLY exactly
once, and only from the device the request went to; statuses, waits, fan-out, resend.

The device here is a real queue manager executing the requests (``process_admin``); the
messages between the two stores are carried by hand, as the sync agent would carry them
(tests/sync/agent/test_admin.py and test_admin_e2e.py carry them over HTTP)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from edgeq import ManualClock, Message, QueueManager
from edgeq.admin.wire import ADMIN_QUEUE, ADMIN_REPLY_QUEUE, AdminReply, AdminRequest, request_message
from edgeq.errors import DeviceNotFound, EdgeqError, InvalidArgument
from edgeq.sync.keys import public_bytes
from edgeq.sync.server.admin.client import AdminClient, OperatorKey, new_operator_key, operator_key_id
from edgeq.uid import MessageUID
from edgeq.values import Int64
from tests.conftest import T0


@pytest.fixture
def key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


@pytest.fixture
def home(tmp_path: Path, clock: ManualClock) -> Iterator[QueueManager]:
    qm = QueueManager(tmp_path / "home.db", name="HOME", clock=clock)
    qm.register_device("DEV1", bytes(32))
    qm.register_device("DEV2", bytes([2]) * 32)  # a key of its own
    yield qm
    qm.close()


@pytest.fixture
def client(home: QueueManager, key: Ed25519PrivateKey) -> Iterator[AdminClient]:
    with AdminClient(home, operator_key=key, poll_s=0.01) as admin:
        yield admin


def device(tmp_path: Path, name: str, key: Ed25519PrivateKey, clock: ManualClock) -> QueueManager:
    """A device that trusts ``key`` and has the admin queues the sync agent would define."""
    qm = QueueManager(tmp_path / f"{name}.db", name=name, clock=clock)
    qm.trust_admin_key(operator_key_id(public_bytes(key)), key.public_key())
    qm.define_home_server_queue(ADMIN_QUEUE, server="HOME")
    qm.define_remote_queue(ADMIN_REPLY_QUEUE, target_qmgr="HOME")
    return qm


def carry(home: QueueManager, dev: QueueManager) -> int:
    """What one sync does for the admin queues: pull the device's requests, execute them,
    push the replies (keeping each message's uid, as the protocol does). Returns the
    replies carried."""
    held = f"{dev.name}.{ADMIN_QUEUE}"
    if held in home.queue_names():
        for message in home.get_many(held, 100):
            dev.put(ADMIN_QUEUE, message)
    dev.process_admin()
    replies = dev.exchange.next_for_transmission(ADMIN_REPLY_QUEUE, 100)
    if replies:
        home.put_many(ADMIN_REPLY_QUEUE, replies)
        dev.exchange.transmitted(ADMIN_REPLY_QUEUE, [m.uid for m in replies if m.uid is not None])
    return len(replies)


def test_a_request_is_signed_recorded_and_queued_for_the_device(
    client: AdminClient, home: QueueManager, key: Ed25519PrivateKey
) -> None:
    handle = client.request("DEV1", "inquire-queue", "ORDERS", expires_ms=T0 + 60_000)
    (message,) = home.browse("DEV1.SYSTEM.ADMIN")
    request = AdminRequest.from_bytes(message.data)
    assert request.verify(key.public_key())
    assert (request.request_id, request.device, request.action, request.target) == (
        handle.request_id, "DEV1", "inquire-queue", "ORDERS")
    assert (request.reply_qmgr, request.reply_queue, request.key_id) == (
        "HOME", ADMIN_REPLY_QUEUE, operator_key_id(public_bytes(key)))
    assert message.correlation_id == bytes.fromhex(handle.request_id)
    assert message.expiry == Int64(T0 + 60_000)  # it expires on the server like any message
    record = handle.record
    assert (record.status(T0), record.created_ms, record.expires_ms, record.request) == (
        "pending", T0, T0 + 60_000, message.data)
    assert [r.request_id for r in client.pending()] == [handle.request_id]
    assert ADMIN_REPLY_QUEUE in home.queue_names()  # where the replies will arrive


def test_requests_that_cannot_be_sent_say_why(
    client: AdminClient, home: QueueManager, tmp_path: Path
) -> None:
    with pytest.raises(DeviceNotFound, match=r"DEV9.*edgeq server devices add DEV9"):
        client.request("DEV9", "inquire-all")
    home.revoke_device("DEV2")
    with pytest.raises(InvalidArgument, match="DEV2 is revoked"):
        client.request("DEV2", "inquire-all")
    with pytest.raises(InvalidArgument, match="not in the future"):
        client.request("DEV1", "inquire-all", expires_ms=T0)
    with pytest.raises(InvalidArgument, match="unknown admin action"):
        client.request("DEV1", "reboot")
    with AdminClient(home) as reader, pytest.raises(InvalidArgument, match="no operator key"):
        reader.request("DEV1", "inquire-all")
    with pytest.raises(InvalidArgument, match="poll_s must be a positive number"):
        AdminClient(home, poll_s=0)
    assert client.pending() == []  # nothing was recorded by a refused request
    assert "DEV1.SYSTEM.ADMIN" not in home.queue_names() or home.depth("DEV1.SYSTEM.ADMIN") == 0


def test_a_reply_is_collected_into_the_record_once(
    client: AdminClient, home: QueueManager, key: Ed25519PrivateKey, tmp_path: Path, clock: ManualClock
) -> None:
    with device(tmp_path, "DEV1", key, clock) as dev:
        handle = client.request("DEV1", "define-queue", "ALERTS", {"expiry_ms": 60_000})
        assert carry(home, dev) == 1
        assert dev.queue_attributes("ALERTS").expiry_ms == 60_000
        reply = handle.wait(5)
        assert (reply is not None
                and (reply.rc, reply.device, reply.request_id) == ("success", "DEV1", handle.request_id))
        assert handle.status == "replied" and home.depth(ADMIN_REPLY_QUEUE) == 0
        # The same request delivered again (a replay): answered from the remembered reply,
        # whose message is the same one; recorded once.
        client.resend(handle.request_id)
        assert carry(home, dev) == 1
        report = client.collect()
        assert (report.recorded, report.repeated, report.refused) == (0, 1, [])
        assert [r.request_id for r in client.replies()] == [handle.request_id]
        assert client.pending() == []


def test_a_reply_from_another_device_or_for_no_request_is_dropped(
    client: AdminClient, home: QueueManager, clock: ManualClock
) -> None:
    handle = client.request("DEV1", "inquire-all")
    forged = AdminReply(handle.request_id, "DEV1", "success", (), "done", T0)
    unknown = AdminReply("ab" * 16, "DEV2", "success", (), "done", T0)
    home.put_many(ADMIN_REPLY_QUEUE, [
        Message(forged.to_bytes(), uid=MessageUID("DEV2", 7)),  # DEV2 pushed DEV1's "reply"
        Message(unknown.to_bytes(), uid=MessageUID("DEV2", 8)),  # DEV2's reply to nothing sent to it
        Message(b"\xa0not a reply", uid=MessageUID("DEV2", 9)),
    ])
    report = client.collect()
    assert report.recorded == 0
    assert [why.split(":")[0] for _, why in report.refused] == [
        f"a reply of DEV1 to request {handle.request_id} sent by DEV2",
        f"no request {'ab' * 16} was sent to DEV2", "not an admin reply"]
    assert handle.status == "pending" and home.depth(ADMIN_REPLY_QUEUE) == 0


def test_a_collector_that_died_leaves_nothing_lost(client: AdminClient, home: QueueManager) -> None:
    handle = client.request("DEV1", "inquire-all")
    reply = AdminReply(handle.request_id, "DEV1", "success", (), "done", T0)
    home.put(ADMIN_REPLY_QUEUE, Message(reply.to_bytes(), uid=MessageUID("DEV1", 5)))
    assert home.get(ADMIN_REPLY_QUEUE, confirm_id=99) is not None  # taken, never recorded nor confirmed
    assert client.collect().recorded == 1
    assert handle.reply == reply and home.depth(ADMIN_REPLY_QUEUE) == 0


def test_a_refusal_of_an_unauthenticated_copy_gives_way_to_the_genuine_reply(
    client: AdminClient, home: QueueManager, key: Ed25519PrivateKey, tmp_path: Path, clock: ManualClock
) -> None:
    with device(tmp_path, "DEV1", key, clock) as dev:
        handle = client.request("DEV1", "define-queue", "ALERTS")
        genuine = home.get("DEV1.SYSTEM.ADMIN")
        assert genuine is not None
        # A copy changed on the way (same id, other params): the device refuses it, unrun.
        tampered = AdminRequest.from_bytes(genuine.data).replace_params(expiry_ms=1)
        home.put("DEV1.SYSTEM.ADMIN", request_message(tampered))
        carry(home, dev)
        refused = handle.wait(5)
        assert refused is not None and refused.rc == "failed" and "does not verify" in refused.message
        assert "ALERTS" not in dev.queue_names()
        home.put("DEV1.SYSTEM.ADMIN", genuine)  # the genuine request arrives after all
        carry(home, dev)
        client.collect()
        assert handle.reply is not None and handle.reply.rc == "success"
        assert dev.queue_attributes("ALERTS").expiry_ms is None
        # ... and no later refusal of a copy displaces the genuine answer.
        home.put("DEV1.SYSTEM.ADMIN",
                 request_message(AdminRequest.from_bytes(genuine.data).replace_params(x=2)))
        carry(home, dev)
        assert client.collect().repeated == 1 and handle.reply.rc == "success"


def test_an_untrusted_operator_learns_why_from_the_refusal(
    home: QueueManager, tmp_path: Path, clock: ManualClock, key: Ed25519PrivateKey
) -> None:
    stranger = Ed25519PrivateKey.generate()
    with device(tmp_path, "DEV1", key, clock) as dev, AdminClient(home, operator_key=stranger) as client:
        handle = client.request("DEV1", "purge", "ORDERS")
        carry(home, dev)
        reply = handle.wait(5)
        assert reply is not None and reply.rc == "failed" and "is not trusted here" in reply.message


def test_expired_before_execution_and_waits(
    client: AdminClient, home: QueueManager, clock: ManualClock
) -> None:
    handle = client.request("DEV1", "inquire-all", expires_ms=T0 + 1_000)
    assert handle.wait(0) is None and handle.status == "pending"  # no reply yet, none waited for
    clock.advance(1_000)
    assert handle.status == "expired"
    assert handle.wait(None) is None  # returns at once: it can no longer run
    (record,) = client.pending()
    assert record.describe(clock()) == "expired before delivery: never executed"  # no pull ever took it
    assert home.depth("DEV1.SYSTEM.ADMIN") == 0  # its message expired there like any other


def test_fan_out_reaches_every_known_device_not_revoked(client: AdminClient, home: QueueManager) -> None:
    home.exchange.record_device("DEV3")  # heard from, never registered: known all the same
    home.revoke_device("DEV2")
    handles = client.request_all("inquire-sync")
    assert sorted(h.device for h in handles) == ["DEV1", "DEV3"]
    assert {h.device: home.depth(f"{h.device}.SYSTEM.ADMIN") for h in handles} == {"DEV1": 1, "DEV3": 1}
    records = client.wait_all(handles, 0)
    assert sorted(r.status(T0) for r in records.values()) == ["pending", "pending"]


def test_fan_out_with_no_device_says_so(tmp_path: Path, key: Ed25519PrivateKey) -> None:
    with QueueManager(tmp_path / "h.db", name="HOME") as home, \
            AdminClient(home, operator_key=key) as client, \
            pytest.raises(DeviceNotFound, match="knows no device"):
        client.request_all("inquire-all")


def test_handles_of_earlier_requests_and_unknown_ids(client: AdminClient, home: QueueManager, tmp_path: Path,
                                                     key: Ed25519PrivateKey) -> None:
    sent = client.request("DEV1", "sweep")
    with AdminClient(tmp_path / "home.db", operator_key=key) as other:  # by path, as another process would
        assert other.handle(sent.request_id).device == "DEV1"
        with pytest.raises(EdgeqError, match="no admin request 'ffff'"):
            other.handle("ffff")


def test_operator_keys_round_trip_through_their_files(tmp_path: Path) -> None:
    pair, key_id = new_operator_key(tmp_path / "operator.key")
    loaded = OperatorKey.load(pair.private_path)
    assert loaded.key_id == key_id == operator_key_id(pair.public_key)
    assert OperatorKey.load(pair.private_path, "ops-alice").key_id == "ops-alice"
    with pytest.raises(EdgeqError, match="exists"):
        new_operator_key(tmp_path / "operator.key")


def test_resend_refuses_a_request_that_expired_or_whose_device_is_revoked(
    client: AdminClient, home: QueueManager, clock: ManualClock
) -> None:
    lapsed = client.request("DEV1", "inquire-all", expires_ms=clock() + 1_000)
    kept = client.request("DEV2", "inquire-all")
    clock.advance(2_000)
    with pytest.raises(EdgeqError, match="expired 1 s ago: a device would never run it; send a new request"):
        client.resend(lapsed.request_id)
    home.revoke_device("DEV2")
    with pytest.raises(EdgeqError, match=r"device DEV2 is revoked .*: it would never take the request"):
        client.resend(kept.request_id)
    assert home.depth(f"DEV2.{ADMIN_QUEUE}") == 1  # only the first sending

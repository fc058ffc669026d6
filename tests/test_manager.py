"""The facade's verbs, one example each (as docs/api.md shows them): what its doctests checked."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from edgeq import Int32, Message, MessageUID, QueueManager
from edgeq.admin.wire import AdminRequest
from edgeq.errors import QueueExists
from edgeq.rules import QueueRule


@pytest.fixture
def qm(tmp_path: Path) -> Iterator[QueueManager]:
    with QueueManager(tmp_path / "d.db", name="DEV1") as qm:
        yield qm


@pytest.fixture
def home(tmp_path: Path) -> Iterator[QueueManager]:
    with QueueManager(tmp_path / "h.db", name="HOME", journal="server") as home:
        yield home


def test_the_first_example(qm: QueueManager) -> None:
    qm.define_queue("ORDERS", expiry_ms=3_600_000)
    qm.put("ORDERS", Message(b"42 widgets", expiry=Int32(60_000)))
    assert qm.depth("ORDERS") == 1
    got = qm.get("ORDERS")
    assert got is not None and got.data == b"42 widgets"


def test_tracer_sees_the_sql_of_a_put(qm: QueueManager) -> None:
    qm.define_queue("Q")
    seen: list[str] = []
    with qm.tracer(seen.append):
        qm.put("Q", Message(b"x"))
    assert any(s.startswith("INSERT INTO messages") for s in seen)


# -- messages ----------------------------------------------------------------------------------
def test_an_assured_put_is_invisible_until_confirmed(qm: QueueManager) -> None:
    qm.define_queue("Q")
    uid = qm.put("Q", Message(b"x"), confirm_id=17)
    assert qm.get("Q") is None
    qm.confirm_put("Q", uid)
    got = qm.get("Q")
    assert got is not None and got.uid == uid


def test_put_each_refuses_a_resend_over_an_unconfirmed_copy_of_another_batch(home: QueueManager) -> None:
    home.define_queue("Q")
    m = Message(b"x", uid=MessageUID("DEV1", 5))
    assert [r.status for r in home.put_each("Q", [m, m.replace(resend=True)], confirm_id=1)] == [
        "stored", "refused"]


def test_confirm_put_each_answers_each_uid(home: QueueManager) -> None:
    home.define_queue("Q")
    uid = home.put("Q", Message(b"x"), confirm_id=1)
    assert [r.status for r in home.confirm_put_each("Q", [uid, uid, "DEV9.1"])] == [
        "confirmed", "already", "unknown"]


def test_get_takes_the_highest_priority_first(qm: QueueManager) -> None:
    qm.define_queue("Q")
    qm.put("Q", Message(b"low", priority=1))
    qm.put("Q", Message(b"high", priority=8))
    got = qm.get("Q")
    assert got is not None and got.data == b"high"


def test_browse_filters_on_fields(qm: QueueManager) -> None:
    qm.define_queue("Q")
    qm.put("Q", Message(b"a", fields={"k": "v"}))
    qm.put("Q", Message(b"b"))
    assert [m.data for m in qm.browse("Q", filter={"k": "v"})] == [b"a"]


def test_confirm_get_each_answers_each_uid(home: QueueManager) -> None:
    home.define_queue("Q")
    home.put("Q", Message(b"x"))
    m = home.get("Q", confirm_id=3)
    assert m is not None and m.uid is not None
    assert [r.status for r in home.confirm_get_each("Q", [m.uid, m.uid])] == ["confirmed", "unknown"]


# -- queues ------------------------------------------------------------------------------------
def test_define_queue_again_exactly_so_is_allowed_otherwise_refused(qm: QueueManager) -> None:
    qm.define_queue("ALERTS", expiry_ms=30_000, ordering="fifo")
    assert qm.queue_attributes("ALERTS").ordering == "fifo"
    qm.define_queue("ALERTS", expiry_ms=30_000, ordering="fifo", exist_ok=True)
    with pytest.raises(QueueExists, match=r"^queue 'ALERTS' is already defined on DEV1, otherwise: "
                                          r"expiry_ms 30000, not 60000; "):
        qm.define_queue("ALERTS", expiry_ms=60_000, ordering="fifo", exist_ok=True)


def test_define_remote_queue_targets_the_same_name_by_default(qm: QueueManager) -> None:
    qm.define_remote_queue("ORDERS", target_qmgr="HOME", max_bytes=1 << 20, on_full="discard-oldest")
    assert qm.queue_attributes("ORDERS").target_queue == "ORDERS"


def test_a_home_server_queue_turns_the_device_journal_on(qm: QueueManager) -> None:
    qm.define_home_server_queue("INBOX", server="HOME")
    assert (qm.queue_attributes("INBOX").server, qm.journal_mode) == ("HOME", "device")


def test_alter_queue_returns_the_new_attributes(qm: QueueManager) -> None:
    qm.define_queue("Q")
    assert qm.alter_queue("Q", max_depth=1000).max_depth == 1000


def test_queue_attributes_usage_and_names(qm: QueueManager) -> None:
    qm.define_queue("B", max_depth=10)
    qm.define_queue("A", max_bytes=100)
    qm.put("A", Message(b"12345"))
    u = qm.queue_usage("A")
    assert (qm.queue_attributes("B").max_depth, (u.depth, u.bytes, u.max_bytes)) == (10, (1, 5, 100))
    assert qm.queue_names() == ["A", "B"]


def test_sweep_expired_on_a_fresh_queue_discards_nothing(qm: QueueManager) -> None:
    qm.define_queue("Q")
    assert qm.sweep_expired("Q") == 0


# -- consumers ---------------------------------------------------------------------------------
def test_consume_takes_each_message_and_confirms_it(qm: QueueManager) -> None:
    qm.define_queue("Q")
    qm.put_many("Q", [Message(b"a"), Message(b"b")])
    with qm.consume("Q", wait=0) as messages:
        assert [m.data for m in messages] == [b"a", b"b"]
    assert qm.depth("Q") == 0


def test_listen_delivers_and_confirms(qm: QueueManager) -> None:
    qm.define_queue("Q")
    seen = threading.Event()
    with qm.listen("Q", lambda m: seen.set()) as listener:
        qm.put("Q", Message(b"ping"))
        assert seen.wait(5)
    assert (listener.delivered, qm.depth("Q")) == (1, 0)


# -- dead letters ------------------------------------------------------------------------------
def test_a_refused_message_is_dead_lettered_and_resent(qm: QueueManager) -> None:
    qm.define_remote_queue("METRICS", target_qmgr="HOME", refusal_limit=1)
    uid = qm.put("METRICS", Message(b"x"))
    why = "no-queue: HOME has no queue METRICS"
    assert [r.dead_lettered for r in qm.exchange.refused("METRICS", [(uid, why)])] == [True]
    (dead,) = qm.dlq_browse()
    assert (dead.fields["dlq.reason"], dead.fields["dlq.queue"]) == ("refused", "METRICS")
    assert (qm.dlq_resend([uid]).moved == [uid], qm.depth("METRICS"), qm.dlq_browse()) == (True, 1, [])


# -- rules -------------------------------------------------------------------------------------
def test_rules_bindings_failures_and_stats(qm: QueueManager) -> None:
    qm.define_queue("Q", rules=["log", "counters"])
    qm.add_rule("Q", QueueRule())
    assert [b.name for b in qm.queue_bindings("Q")][:2] == ["log", "counters"]
    assert qm.rule_failures() == []
    qm.put("Q", Message(b"x"))
    assert qm.queue_stats("Q") == {"added": 1}


def test_apply_stats_each_applies_an_event_once(qm: QueueManager) -> None:
    qm.define_queue("Q")
    assert qm.apply_stats_each("Q", [({"seen": 1}, 7), ({"seen": 1}, 7), ({"seen": 2}, None)]) == [
        True, False, True]
    assert qm.queue_stats("Q") == {"seen": 3}


def test_check_of_a_sound_store_is_clean(qm: QueueManager) -> None:
    qm.define_queue("Q")
    qm.put("Q", Message(b"x"))
    report = qm.check()
    assert (report.clean, report.checked) == (True, 1)


# -- remote administration ---------------------------------------------------------------------
def test_trust_admin_key_for_some_actions(qm: QueueManager) -> None:
    qm.trust_admin_key("ops", Ed25519PrivateKey.generate().public_key(), actions=["inquire-queue"])
    assert [(k.key_id, k.actions) for k in qm.admin_keys()] == [("ops", ("inquire-queue",))]


def test_execute_admin_runs_a_request_once_and_remembers_its_reply(qm: QueueManager) -> None:
    key = Ed25519PrivateKey.generate()
    qm.trust_admin_key("ops", key.public_key())
    req = AdminRequest.create("define-queue", "ORDERS", {"expiry_ms": 60000}, device="DEV1",
                              reply_qmgr="HOME", created_ms=qm.now_ms(), key_id="ops").sign(key)
    assert qm.execute_admin(req.to_bytes()).rc == "success"
    assert qm.queue_attributes("ORDERS").expiry_ms == 60000
    assert qm.execute_admin(req.to_bytes()).rc == "success"  # the same request again: remembered


# -- the journal and devices -------------------------------------------------------------------
def test_journal_since_lists_an_accepted_put(home: QueueManager) -> None:
    home.define_queue("Q")
    uid = home.put("Q", Message(b"x"), confirm_id=1)
    home.confirm_put("Q", uid)
    assert [(e.kind, e.uid == str(uid)) for e in home.journal_since()] == [("accepted", True)]


def test_devices_heard_from_and_registered(home: QueueManager) -> None:
    home.exchange.record_device("DEV1", clock_offset_ms=-12)
    assert [(d.name, d.clock_offset_ms) for d in home.devices()] == [("DEV1", -12)]
    home.register_device("DEV2", bytes(32), queues=["ORDERS"])
    device = home.device("DEV2")
    assert device is not None and device.queues == ("ORDERS",)

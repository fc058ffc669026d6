"""The device's admin executor (``qm.execute_admin`` and ``qm.process_admin``): every action,
MQe's expiry check points at delete and size inquiry, exactly-once execution, and every
refusal. Real stores in tmp_path, an injected clock."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import cbor2
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from edgeq import Int32, ManualClock, Message, QueueManager
from edgeq.admin.executor import INTERRUPTED, LEASE_MS, MAX_SKEW_MS, RETENTION_MS
from edgeq.admin.wire import ADMIN_QUEUE, ADMIN_REPLY_QUEUE, INQUIRE_ACTIONS, AdminReply, as_python
from edgeq.errors import InvalidArgument, InvalidType, StoreError
from tests.adminkit import OPERATOR, admin_queues, enqueue, replies, signed
from tests.conftest import T0, Recorder

VIEWER = Ed25519PrivateKey.generate()


@pytest.fixture
def dev(tmp_path: Path, clock: ManualClock) -> Iterator[QueueManager]:
    """DEV1, trusting "ops" for everything and "viewer" for inquiries only."""
    with QueueManager(tmp_path / "dev1.db", name="DEV1", clock=clock) as qm:
        qm.trust_admin_key("ops", OPERATOR.public_key())
        qm.trust_admin_key("viewer", VIEWER.public_key(), actions=INQUIRE_ACTIONS)
        yield qm


def run(qm: QueueManager, action: str, target: str | None = None, params: dict[str, object] | None = None,
        **kwargs: object) -> AdminReply:
    return qm.execute_admin(signed(qm, action, target, params, **kwargs).to_bytes())  # type: ignore[arg-type]


def only(reply: AdminReply) -> dict[str, object]:
    (result,) = reply.results
    return dict(result)


# -- the actions --------------------------------------------------------------------------------


def test_inquire_queue_answers_attributes_depth_bytes_and_the_oldest_messages_age(
    dev: QueueManager, clock: ManualClock
) -> None:
    dev.define_queue("ORDERS", max_depth=50, ordering="fifo")
    dev.put("ORDERS", Message(b"12345"))
    clock.advance(2_000)
    dev.put("ORDERS", Message(b"678"))
    clock.advance(500)
    reply = run(dev, "inquire-queue", "ORDERS")
    assert (reply.rc, reply.device, reply.executed_ms) == ("success", "DEV1", T0 + 2_500)
    result = only(reply)
    assert (result["object"], result["rc"], result["reason"]) == ("ORDERS", "success", None)
    assert (result["depth"], result["bytes"], result["oldest_age_ms"]) == (2, 8, 2_500)
    attributes = as_python(result["attributes"])
    assert isinstance(attributes, dict)
    assert (attributes["max_depth"], attributes["ordering"], attributes["kind"]) == (50, "fifo", "local")


def test_inquire_queue_of_an_empty_or_missing_queue(dev: QueueManager) -> None:
    dev.define_queue("EMPTY")
    assert only(run(dev, "inquire-queue", "EMPTY"))["oldest_age_ms"] is None
    reply = run(dev, "inquire-queue", "NOPE")
    assert reply.rc == "failed" and "no queue 'NOPE'" in str(only(reply)["reason"])
    assert "needs a target queue" in run(dev, "inquire-queue").message


def test_inquire_all_lists_every_queue_with_kind_and_depth(dev: QueueManager) -> None:
    dev.define_queue("A")
    dev.define_remote_queue("B", target_qmgr="HOME")
    dev.put("B", Message(b"xy"))
    reply = run(dev, "inquire-all")
    assert reply.rc == "success"
    assert [(r["object"], r["kind"], r["depth"], r["bytes"]) for r in reply.results] == [
        ("A", "local", 0, 0), ("B", "remote", 1, 2)]
    assert "without a target" in run(dev, "inquire-all", "A").message


def test_define_queue_of_each_kind_with_the_local_apis_attribute_names(dev: QueueManager) -> None:
    local = run(dev, "define-queue", "L", {"expiry_ms": 60_000, "max_depth": 10, "ordering": "fifo",
                                          "on_full": "discard-oldest", "rules": ["counters"]})
    assert local.rc == "success", local.message
    assert as_python(only(local)["attributes"])["max_depth"] == 10  # type: ignore[index]
    assert [b.name for b in dev.queue_bindings("L")] == ["counters"]
    remote = run(dev, "define-queue", "R", {"kind": "remote", "target_qmgr": "HOME", "target_queue": "IN",
                                           "refusal_limit": 3})
    assert remote.rc == "success", remote.message
    home = run(dev, "define-queue", "H", {"kind": "home", "server": "HOME", "expiry_ms": 5_000})
    assert home.rc == "success", home.message
    attrs = {n: dev.queue_attributes(n) for n in ("L", "R", "H")}
    assert ((attrs["L"].expiry_ms, attrs["L"].ordering, attrs["L"].on_full)
            == (60_000, "fifo", "discard-oldest"))
    assert (attrs["R"].kind, attrs["R"].target_qmgr, attrs["R"].target_queue, attrs["R"].refusal_limit) == (
        "remote", "HOME", "IN", 3)
    assert (attrs["H"].kind, attrs["H"].server, attrs["H"].expiry_ms) == ("home", "HOME", 5_000)


@pytest.mark.parametrize(("params", "reason"), [
    ({"expiry_ms": -5}, "expiry_ms must be a positive int"),
    ({"expiry_ms": "soon"}, "expiry_ms must be a positive int or None"),
    ({"colour": "red"}, "unknown parameter(s) colour for define-queue"),
    ({"refusal_limit": 3}, "unknown parameter(s) refusal_limit"),
    ({"kind": "remote"}, "needs parameter(s) target_qmgr"),
    ({"kind": "home"}, "needs parameter(s) server"),
    ({"kind": "alias"}, "kind 'alias' is not a queue kind"),
    ({"kind": "remote", "target_qmgr": "bad name"}, "target queue manager name"),
    ({"rules": ["tests.rulekit:FileRecorder"]}, "is a module path"),
    ({"rules": [["tests.rulekit:FileRecorder", {"path": "/tmp/x"}]]}, "is a module path"),
    ({"rules": ["no-such-rule"]}, "no-such-rule"),
    ({"ordering": "random"}, "ordering must be 'priority' or 'fifo'"),
])
def test_define_queue_with_bad_params_fails_with_the_reason_and_defines_nothing(
    dev: QueueManager, params: dict[str, object], reason: str
) -> None:
    reply = run(dev, "define-queue", "Q", params)
    assert reply.rc == "failed"
    assert reason in str(only(reply)["reason"]) and reason in reply.message
    assert dev.queue_names() == []


def test_define_queue_that_exists_fails(dev: QueueManager) -> None:
    dev.define_queue("Q")
    assert "already defined" in str(only(run(dev, "define-queue", "Q"))["reason"])


def test_alter_queue_changes_attributes_and_refuses_bad_ones(dev: QueueManager) -> None:
    dev.define_queue("Q")
    reply = run(dev, "alter-queue", "Q", {"max_depth": 7, "expiry_ms": 1_000})
    assert (reply.rc == "success"
            and as_python(only(reply)["attributes"])["max_depth"] == 7)  # type: ignore[index]
    assert dev.queue_attributes("Q").expiry_ms == 1_000
    assert "needs at least one attribute" in run(dev, "alter-queue", "Q").message
    assert "unknown parameter(s) target_qmgr" in run(dev, "alter-queue", "Q", {"target_qmgr": "X"}).message
    assert ("refusal_limit applies to remote queues only"
            in run(dev, "alter-queue", "Q", {"refusal_limit": 2}).message)
    assert dev.queue_attributes("Q").max_depth == 7


def test_purge_and_sweep(dev: QueueManager, clock: ManualClock) -> None:
    dev.define_queue("A")
    dev.define_queue("B")
    for data in (b"1", b"2"):
        dev.put("A", Message(data))
    dev.put("B", Message(b"old", expiry=Int32(1_000)))
    dev.put("A", Message(b"old", expiry=Int32(1_000)))
    clock.advance(5_000)
    assert [(r["object"], r["discarded"]) for r in run(dev, "sweep").results] == [("A", 1), ("B", 1)]
    assert only(run(dev, "sweep", "A"))["discarded"] == 0
    assert only(run(dev, "purge", "A"))["purged"] == 2
    assert dev.depth("A") == 0
    assert run(dev, "purge").rc == "failed"


def test_inquire_rules_lists_bindings_and_failures_and_retry_rules_retries(
    dev: QueueManager, clock: ManualClock, tmp_path: Path
) -> None:
    switch = tmp_path / "fail"
    switch.touch()
    dev.define_queue("Q", rules=[("tests.rulekit:Failing", {"switch": str(switch)}), "counters"])
    dev.define_queue("PLAIN")
    dev.put("Q", Message(b"x", expiry=Int32(10)))
    clock.advance(100)
    dev.sweep_expired("Q")
    reply = run(dev, "inquire-rules")
    assert [r["object"] for r in reply.results] == ["Q"]  # queues with bindings or failures only
    (result,) = reply.results
    assert ([b["name"] for b in result["bindings"]]
            == ["tests.rulekit:Failing", "counters"])  # type: ignore[attr-defined]
    (failure,) = result["failures"]  # type: ignore[misc]
    assert failure["rule"] == "tests.rulekit:Failing" and "failing on purpose" in failure["last_error"]
    assert [r["object"] for r in run(dev, "inquire-rules", "PLAIN").results] == ["PLAIN"]
    switch.unlink()
    retried = run(dev, "retry-rules", None, {"parked": False})
    assert only(retried)["retried"] == 1 and dev.rule_failures() == []
    assert "parked must be true or false" in run(dev, "retry-rules", None, {"parked": 1}).message
    assert "unknown parameter(s) queue" in run(dev, "retry-rules", None, {"queue": "Q"}).message


def test_inquire_sync_reports_what_the_store_holds_unsent_and_refused(
    dev: QueueManager, clock: ManualClock
) -> None:
    dev.define_remote_queue("ORDERS", target_qmgr="HOME", refusal_limit=4)
    dev.define_home_server_queue("INBOX", server="HOME")
    dev.put("ORDERS", Message(b"a"))
    dev.exchange.record_sync_state({"": {"server": "HOME", "stopped": False}})
    clock.advance(3_000)
    reply = run(dev, "inquire-sync")
    assert reply.rc == "success"
    agent, *queues = reply.results
    assert agent["object"] is None and as_python(agent["agent"]) == {"server": "HOME", "stopped": False}
    by_name = {q["object"]: q for q in queues}
    assert (by_name["ORDERS"]["backlog"], by_name["ORDERS"]["oldest_age_ms"],
            by_name["ORDERS"]["refusal_limit"]) == (
        1, 3_000, 4)
    assert (by_name["INBOX"]["kind"], by_name["INBOX"]["peer"]) == ("home", "HOME")


# -- MQe's expiry check points: size inquiry and delete ------------------------------------------


@pytest.fixture
def watched(dev: QueueManager, rule: Recorder) -> Recorder:
    """Queue Q on DEV1, with a rule recording its events."""
    dev.define_queue("Q")
    dev.add_rule("Q", rule)
    return rule


def test_a_depth_inquiry_purges_expired_messages_first_and_rules_see_depth(
    dev: QueueManager, clock: ManualClock, watched: Recorder
) -> None:
    rule = watched
    dev.put("Q", Message(b"short", expiry=Int32(1_000)))
    dev.put("Q", Message(b"long", expiry=Int32(60_000)))
    dev.depth("Q")  # activate now, so the discard below is the inquiry's
    clock.advance(5_000)
    result = only(run(dev, "inquire-queue", "Q"))
    assert (result["depth"], result["bytes"]) == (1, 4)
    assert rule.expired() == [(b"short", "depth")]
    all_queues = run(dev, "inquire-all")
    assert [r["depth"] for r in all_queues.results] == [1]


def test_delete_purges_expired_messages_first_then_deletes_and_rules_see_delete(
    dev: QueueManager, clock: ManualClock, watched: Recorder
) -> None:
    rule = watched
    dev.put("Q", Message(b"a", expiry=Int32(1_000)))
    dev.put("Q", Message(b"b", expiry=Int32(1_000)), confirm_id=7)  # locked: its state is irrelevant (MQe)
    dev.depth("Q")
    clock.advance(5_000)
    reply = run(dev, "delete-queue", "Q")
    assert reply.rc == "success", reply.message
    assert "Q" not in dev.queue_names()
    assert sorted(rule.expired()) == [(b"a", "delete"), (b"b", "delete")]
    assert ("queue_deleted", "Q", None) in rule.calls


def test_delete_is_refused_while_live_messages_remain_with_their_count(
    dev: QueueManager, clock: ManualClock, watched: Recorder
) -> None:
    rule = watched
    dev.put("Q", Message(b"dead", expiry=Int32(1_000)))
    for data in (b"live1", b"live2"):
        dev.put("Q", Message(data))
    dev.depth("Q")
    clock.advance(5_000)
    reply = run(dev, "delete-queue", "Q")
    assert reply.rc == "failed"
    result = only(reply)
    assert result["depth"] == 2 and "still holds 2 unexpired message(s)" in str(result["reason"])
    assert rule.expired() == [(b"dead", "delete")]  # purged first, even though the delete is refused
    assert dev.depth("Q") == 2


def test_the_admin_delete_behaves_as_the_local_one(dev: QueueManager, clock: ManualClock) -> None:
    """Same check point, same outcome: the admin action is the local verb."""
    for name in ("LOCAL", "ADMIN"):
        dev.define_queue(name)
        dev.put(name, Message(b"x", expiry=Int32(1_000)))
    clock.advance(2_000)
    dev.delete_queue("LOCAL")
    assert run(dev, "delete-queue", "ADMIN").rc == "success"
    assert dev.queue_names() == []


# -- expired requests -------------------------------------------------------------------------


def test_an_expired_request_is_answered_expired_before_execution_and_not_run(
    dev: QueueManager, clock: ManualClock
) -> None:
    request = signed(dev, "define-queue", "LATE", expires_ms=T0 + 1_000)
    clock.advance(1_000)
    reply = dev.execute_admin(request.to_bytes(), remaining_ms=0)  # it arrived with no life left
    assert reply.rc == "failed" and reply.message.startswith("expired before execution")
    assert dev.queue_names() == []
    clock.set(T0)  # even if the clock steps back, the request was answered: remembered, never run
    assert dev.execute_admin(request.to_bytes()) == reply and dev.queue_names() == []


def test_a_request_lives_its_lifetime_from_arrival_whatever_the_operators_deadline_says(
    dev: QueueManager, clock: ManualClock
) -> None:
    # Made by an operator whose clock is 10 minutes behind this device's: its absolute
    # deadline is long past here, its lifetime (1 minute, 30 s of it left) is not.
    request = signed(dev, "define-queue", "FRESH", created_ms=T0 - 600_000, expires_ms=T0 - 540_000)
    assert dev.execute_admin(request.to_bytes(), remaining_ms=30_000).rc == "success"
    late = signed(dev, "define-queue", "STALE", expires_ms=T0 + 3_600_000)  # an hour, but it arrived spent
    assert dev.execute_admin(late.to_bytes(), remaining_ms=0).message.startswith("expired before execution")
    zero = signed(dev, "define-queue", "ZERO", expires_ms=clock())  # a lifetime of 0: over at once
    assert dev.execute_admin(zero.to_bytes()).message.startswith("expired before execution")
    assert dev.queue_names() == ["FRESH"]
    with pytest.raises(InvalidArgument, match="remaining_ms"):
        dev.execute_admin(request.to_bytes(), remaining_ms=-1)


def test_a_request_that_expires_on_the_admin_queue_is_discarded_there_with_rules_told(
    dev: QueueManager, clock: ManualClock, rule: Recorder
) -> None:
    admin_queues(dev)
    dev.add_rule(ADMIN_QUEUE, rule)
    enqueue(dev, signed(dev, "define-queue", "LATE", expires_ms=T0 + 1_000))
    clock.advance(2_000)
    assert dev.process_admin() == []
    ((_, where),) = rule.expired()
    assert where == "browse"
    assert "LATE" not in dev.queue_names() and replies(dev) == []


# -- exactly once -----------------------------------------------------------------------------


def test_a_request_delivered_twice_is_answered_from_the_remembered_reply_not_run_again(
    dev: QueueManager, clock: ManualClock
) -> None:
    dev.define_queue("Q")
    dev.put("Q", Message(b"1"))
    request = signed(dev, "purge", "Q")
    first = dev.execute_admin(request.to_bytes())
    assert only(first)["purged"] == 1
    dev.put("Q", Message(b"2"))
    clock.advance(60_000)
    again = dev.execute_admin(request.to_bytes())
    assert again == first  # the same reply, executed_ms included
    assert dev.depth("Q") == 1  # the second delivery purged nothing


def test_a_request_whose_run_was_interrupted_is_answered_outcome_unknown_and_not_run_again(
    dev: QueueManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In process: the action is cut short by something that is not an error (as a kill
    would); the marker answers the redelivery. The real crash is in test_admin_crash.py."""
    import edgeq.admin.executor

    real = edgeq.admin.executor.run_action
    calls = []

    def interrupted(*args: object) -> object:
        calls.append(args)
        raise KeyboardInterrupt

    monkeypatch.setattr(edgeq.admin.executor, "run_action", interrupted)
    request = signed(dev, "define-queue", "Q")
    with pytest.raises(KeyboardInterrupt):
        dev.execute_admin(request.to_bytes())
    monkeypatch.setattr(edgeq.admin.executor, "run_action", real)
    again = dev.execute_admin(request.to_bytes())
    assert again.rc == "failed" and again.message == INTERRUPTED
    assert len(calls) == 1 and dev.queue_names() == []


def test_replies_are_forgotten_after_the_window_and_older_requests_are_refused(
    dev: QueueManager, clock: ManualClock
) -> None:
    old = signed(dev, "define-queue", "Q")
    assert dev.execute_admin(old.to_bytes()).rc == "success"
    dev.delete_queue("Q")
    clock.advance(RETENTION_MS + MAX_SKEW_MS + 1)
    assert run(dev, "inquire-all").rc == "success"  # prunes what is older than the window
    assert [r.request_id for r in dev.admin_history()] != [] and old.request_id not in {
        r.request_id for r in dev.admin_history()}
    replay = dev.execute_admin(old.to_bytes())
    assert replay.rc == "failed" and "beyond the 30 days" in replay.message
    assert dev.queue_names() == []  # a forgotten request is refused, never run again


def test_a_request_from_the_future_is_refused(dev: QueueManager) -> None:
    reply = run(dev, "inquire-all", created_ms=T0 + MAX_SKEW_MS + 1)
    assert reply.rc == "failed" and "in the future" in reply.message


# -- refusals ---------------------------------------------------------------------------------


def refused(qm: QueueManager, data: bytes, caplog: pytest.LogCaptureFixture, reason: str) -> AdminReply:
    with caplog.at_level(logging.WARNING, logger="edgeq.admin"):
        reply = qm.execute_admin(data)
    assert reply.rc == "failed" and reason in reply.message, reply.message
    assert any(r.name == "edgeq.admin" and reason in r.getMessage() for r in caplog.records)
    assert qm.queue_names() == []  # nothing was run
    assert reply in qm.admin_history()  # the trace
    return reply


def test_an_unsigned_request_is_refused(dev: QueueManager, caplog: pytest.LogCaptureFixture) -> None:
    reply = refused(dev, signed(dev, "define-queue", "Q", key=None).to_bytes(), caplog, "unsigned")
    assert only(reply)["authenticated"] is False


def test_a_tampered_request_is_refused(dev: QueueManager, caplog: pytest.LogCaptureFixture) -> None:
    genuine = signed(dev, "define-queue", "Q", {"max_depth": 10})
    tampered = dataclasses.replace(genuine, params={"max_depth": 99999})
    refused(dev, tampered.to_bytes(), caplog, "the signature does not verify")


def test_a_request_signed_by_an_untrusted_key_is_refused(
    dev: QueueManager, caplog: pytest.LogCaptureFixture
) -> None:
    stranger = Ed25519PrivateKey.generate()
    refused(dev, signed(dev, "define-queue", "Q", key=stranger, key_id="stranger").to_bytes(), caplog,
            "key 'stranger' is not trusted")
    # a trusted id with another key's signature: does not verify
    refused(dev, signed(dev, "define-queue", "Q", key=stranger).to_bytes(), caplog, "does not verify")


def test_an_action_the_key_may_not_run_is_refused(
    dev: QueueManager, caplog: pytest.LogCaptureFixture
) -> None:
    refused(dev, signed(dev, "define-queue", "Q", key=VIEWER, key_id="viewer").to_bytes(), caplog,
            "key 'viewer' may not run define-queue")
    assert run(dev, "inquire-all", key=VIEWER, key_id="viewer").rc == "success"


def test_a_request_for_another_device_is_refused(dev: QueueManager, caplog: pytest.LogCaptureFixture) -> None:
    refused(dev, signed(dev, "define-queue", "Q", device="DEV2").to_bytes(), caplog,
            "for queue manager DEV2, and this is DEV1")


@pytest.mark.parametrize("data", [b"", b"garbage", b"\xa1\x61v\x02"])
def test_a_malformed_request_is_refused(
    dev: QueueManager, caplog: pytest.LogCaptureFixture, data: bytes
) -> None:
    reply = refused(dev, data, caplog, "refused: ")
    assert reply.request_id == ""


def test_an_untrusted_key_is_refused_from_when_it_is_untrusted(dev: QueueManager) -> None:
    request = signed(dev, "define-queue", "Q")
    assert dev.untrust_admin_key("ops") is True
    assert dev.untrust_admin_key("ops") is False
    assert "not trusted" in dev.execute_admin(request.to_bytes()).message
    dev.trust_admin_key("ops", OPERATOR.public_key())
    assert dev.execute_admin(request.to_bytes()).rc == "success"  # the refusal did not block the genuine


def test_a_forged_copy_cannot_stand_in_for_the_genuine_request(dev: QueueManager) -> None:
    """A refusal of an unauthenticated request is remembered under its digest, not under the
    id it claims: the genuine request with that id still runs."""
    genuine = signed(dev, "define-queue", "Q")
    forged = dataclasses.replace(genuine, params={"max_depth": 1})
    assert dev.execute_admin(forged.to_bytes()).rc == "failed"
    assert dev.execute_admin(genuine.to_bytes()).rc == "success"
    assert dev.queue_attributes("Q").max_depth is None


def test_a_reply_too_large_to_send_says_the_action_ran(dev: QueueManager, tmp_path: Path) -> None:
    dev.define_queue("Q", rules=[("tests.rulekit:FileRecorder",
                                  {"path": str(tmp_path / ("x" * 200)) + "y" * 5000})])
    reply = run(dev, "inquire-rules", "Q")
    assert reply.rc == "failed" and "the action ran, but its reply cannot be sent" in reply.message


# -- keys -------------------------------------------------------------------------------------


def test_admin_keys_are_listed_replaced_and_checked(dev: QueueManager, clock: ManualClock) -> None:
    assert [(k.key_id, k.actions, k.added_ms) for k in dev.admin_keys()] == [
        ("ops", ("*",), T0), ("viewer", INQUIRE_ACTIONS, T0)]
    clock.advance(1)
    dev.trust_admin_key("viewer", VIEWER.public_key(), actions=["purge", "purge", "*"])
    assert dev.admin_keys()[1].actions == ("*",) and dev.admin_keys()[1].added_ms == T0 + 1
    with pytest.raises(InvalidArgument, match="unknown admin action"):
        dev.trust_admin_key("x", VIEWER.public_key(), actions=["reboot"])
    with pytest.raises(InvalidType, match="non-empty list"):
        dev.trust_admin_key("x", VIEWER.public_key(), actions=[])
    with pytest.raises(InvalidType, match="non-empty list"):
        dev.trust_admin_key("x", VIEWER.public_key(), actions="purge")
    with pytest.raises(InvalidArgument, match="admin key id"):
        dev.trust_admin_key("bad id", VIEWER.public_key())
    with pytest.raises(InvalidArgument, match="not an Ed25519 public key"):
        dev.trust_admin_key("x", b"not a key")
    with pytest.raises(InvalidType, match="bytes"):
        dev.execute_admin("text")  # type: ignore[arg-type]


# -- process_admin: the admin queue end to end in one store -------------------------------------


def test_process_admin_runs_each_request_and_puts_its_reply_on_the_reply_queue(
    dev: QueueManager, clock: ManualClock
) -> None:
    admin_queues(dev)
    define = signed(dev, "define-queue", "ORDERS", {"expiry_ms": 60_000})
    inquire = signed(dev, "inquire-queue", "ORDERS")
    dev.define_queue("APP")
    forged = signed(dev, "purge", "APP", key=None, reply_queue="APP")
    for request in (define, inquire, forged):
        enqueue(dev, request)
    answered = dev.process_admin()
    assert [r.rc for r in answered] == ["success", "success", "failed"]
    assert dev.depth(ADMIN_QUEUE) == 0
    waiting = dev.browse(ADMIN_REPLY_QUEUE)
    assert ([m.correlation_id for m in waiting]
            == [bytes.fromhex(r.request_id) for r in (define, inquire, forged)])
    assert [AdminReply.from_bytes(m.data) for m in waiting] == answered
    assert dev.depth("APP") == 0  # an unauthenticated request's reply never goes where it says
    assert dev.process_admin() == []


def test_process_admin_answers_a_redelivered_request_with_the_same_reply_message(dev: QueueManager) -> None:
    """A request pulled again (say the server resent it) is answered from the remembered
    reply, as the same message: a copy still held is not put twice."""
    admin_queues(dev)
    request = signed(dev, "define-queue", "Q")
    enqueue(dev, request)
    (first,) = dev.process_admin()
    enqueue(dev, request)  # the same request, delivered again
    (second,) = dev.process_admin()
    assert second == first and second.rc == "success"
    assert len(dev.browse(ADMIN_REPLY_QUEUE)) == 1


def test_process_admin_without_an_admin_queue_does_nothing(dev: QueueManager) -> None:
    assert dev.process_admin() == []


def test_process_admin_without_its_reply_queue_logs_and_keeps_the_reply(
    dev: QueueManager, caplog: pytest.LogCaptureFixture
) -> None:
    dev.define_queue(ADMIN_QUEUE)
    request = signed(dev, "define-queue", "Q")
    enqueue(dev, request)
    with caplog.at_level(logging.ERROR, logger="edgeq.admin"):
        (reply,) = dev.process_admin()
    assert reply.rc == "success" and dev.depth(ADMIN_QUEUE) == 0
    assert any("cannot be put on SYSTEM.ADMIN.REPLY" in r.getMessage() for r in caplog.records)
    dev.define_queue(ADMIN_REPLY_QUEUE)
    enqueue(dev, request)  # the operator resends: the remembered reply goes out
    assert dev.process_admin() == [reply] and replies(dev) == [reply]


def test_process_admin_leaves_the_queue_to_a_live_lease_holder_and_takes_over_a_dead_or_late_one(
    dev: QueueManager, clock: ManualClock, tmp_path: Path
) -> None:
    admin_queues(dev)
    enqueue(dev, signed(dev, "inquire-all"))
    db = dev._db

    def lease(pid: int, until: int) -> None:
        with db.write() as conn:
            conn.execute("INSERT OR REPLACE INTO edgeq_meta (key, value) VALUES ('admin.lease', ?)",
                         (json.dumps({"token": "other", "pid": pid, "until_ms": until}),))

    lease(os.getpid(), T0 + LEASE_MS)  # alive (this very process), in time
    assert dev.process_admin() == []
    lease(_dead_pid(), T0 + LEASE_MS)  # its process is gone
    assert len(dev.process_admin()) == 1
    enqueue(dev, signed(dev, "inquire-all"))
    lease(os.getpid(), T0 + 10)
    clock.advance(10)  # its time is up
    assert len(dev.process_admin()) == 1
    with db.read() as conn:  # released after the run
        assert conn.execute("SELECT count(*) FROM edgeq_meta WHERE key = 'admin.lease'").fetchone() == (0,)


def _dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_process_admin_checks_its_limit(dev: QueueManager) -> None:
    with pytest.raises(InvalidArgument):
        dev.process_admin(limit=0)


def test_process_admin_on_encrypted_and_plain_stores(open_qm: Callable[..., QueueManager]) -> None:
    """The admin queues are queues like any: sealed at rest when the store encrypts."""
    qm = open_qm()
    qm.trust_admin_key("ops", OPERATOR.public_key())
    admin_queues(qm)
    qm.define_queue("Q")
    qm.put("Q", Message(b"x"))
    request = signed(qm, "inquire-queue", "Q")
    enqueue(qm, request)
    (reply,) = qm.process_admin()
    assert only(reply)["depth"] == 1
    assert replies(qm) == [reply]


def test_damaged_admin_rows_read_as_a_damaged_store(dev: QueueManager) -> None:
    request = signed(dev, "inquire-all")
    dev.execute_admin(request.to_bytes())
    with dev._db.write() as conn:
        conn.execute("UPDATE admin_replies SET reply = x'a1617801'")  # {"x": 1}: no edgeq record
        conn.execute("UPDATE admin_keys SET actions = 'not json' WHERE key_id = 'viewer'")
    with pytest.raises(StoreError, match="the store is damaged: the remembered admin reply"):
        dev.execute_admin(request.to_bytes())
    with pytest.raises(StoreError, match="the store is damaged: admin key 'viewer'"):
        dev.admin_keys()
    with dev._db.write() as conn:
        conn.execute("UPDATE admin_replies SET reply = ?",
                     (cbor2.dumps({"reply": b"junk", "stamp": 1, "final": True}),))
    with pytest.raises(StoreError, match="does not decode"):
        dev.admin_history()

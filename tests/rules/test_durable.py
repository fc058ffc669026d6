"""Rule events are never lost: recorded with the deletion, redelivered after a crash,
retried when a rule fails, parked when it keeps failing."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from edgeq import Int32, Int64, ManualClock, Message, QueueManager
from tests.rulekit import Failing, read_events

ROOT = Path(__file__).resolve().parents[2]


def run_child(script: str, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT,
    )


SETUP = """
    import sys
    from edgeq import QueueManager, Message, Int64
    db, marker, log = sys.argv[1:4]
    qm = QueueManager(db, name="DEV1")
    if "Q" not in qm.queue_names():
        qm.define_queue("Q", rules=[
            ("tests.rulekit:Blocker", {"marker": marker}),
            ("tests.rulekit:FileRecorder", {"path": log}),
            ("counters", {}),
        ])
"""


def test_sigkill_between_commit_and_delivery_delivers_on_reopen(tmp_path: Path) -> None:
    db, marker, log = tmp_path / "d.db", tmp_path / "block", tmp_path / "events.jsonl"
    marker.touch()
    with run_child(SETUP + """
    uid = qm.put("Q", Message(b"doomed", expiry=Int64(1)))   # expires on add; the event commits
    print("never reached", flush=True)
    """, str(db), str(marker), str(log)) as child:
        assert child.stdout is not None and child.stderr is not None
        line = child.stdout.readline()  # the first rule is running: the event has committed
        if not line.startswith("delivering "):
            child.kill()
            pytest.fail(f"child did not reach the rule: {line!r} {child.stderr.read()}")
        event_id = int(line.split()[1])
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert [e for e in read_events(log) if e["kind"] == "expired"] == []  # the second rule never saw it
    marker.unlink()
    with QueueManager(db, name="DEV1") as qm:  # reopening delivers it
        delivered = [e for e in read_events(log) if e["kind"] == "expired"]
        assert [(e["id"], e["where"]) for e in delivered] == [(event_id, "add")]
        assert qm.queue_stats("Q") == {"expired": 1, "expired.add": 1}
    with QueueManager(db, name="DEV1"):
        pass
    assert len([e for e in read_events(log) if e["kind"] == "expired"]) == 1  # delivered once, forgotten


def test_redelivery_after_crash_keeps_the_event_id_and_counters_count_once(tmp_path: Path) -> None:
    db, marker, log = tmp_path / "d.db", tmp_path / "absent", tmp_path / "events.jsonl"
    with run_child(SETUP + """
    import os, signal
    qm.put("Q", Message(b"doomed", expiry=Int64(1)))   # delivered to every rule...
    os.kill(os.getpid(), signal.SIGKILL)                # ...but killed before it is forgotten
    """, str(db), str(marker), str(log)) as child:
        _, err = child.communicate()
    assert child.returncode == -signal.SIGKILL, err
    first = [e for e in read_events(log) if e["kind"] == "expired"]
    assert len(first) == 1
    with QueueManager(db, name="DEV1") as qm:
        again = [e for e in read_events(log) if e["kind"] == "expired"]
        assert len(again) == 2 and again[0]["id"] == again[1]["id"]  # at-least-once, same id
        assert qm.queue_stats("Q")["expired"] == 1  # deduplicated by event id


def test_failing_rule_is_retried_then_parked_and_never_blocks(
    open_qm: Callable[..., QueueManager], tmp_path: Path, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    switch = tmp_path / "fail"
    switch.touch()
    log = tmp_path / "events.jsonl"
    qm = open_qm(rule_retry_limit=3, rule_retry_base_ms=1_000)
    qm.define_queue("Q", rules=[
        ("tests.rulekit:Failing", {"switch": str(switch)}),
        ("tests.rulekit:FileRecorder", {"path": str(log)}),
    ])
    with caplog.at_level(logging.ERROR, logger="edgeq.rules"):
        qm.put("Q", Message(b"x", expiry=Int64(1)))
    (event,) = [e for e in read_events(log) if e["kind"] == "expired"]  # the next rule still ran
    assert f"event id {event['id']}" in caplog.text
    (failure,) = qm.rule_failures()
    assert (failure.event_id, failure.attempts, failure.parked) == (event["id"], 1, False)
    qm.put("Q", Message(b"ok"))  # not due yet: no retry
    assert qm.rule_failures()[0].attempts == 1
    clock.advance(1_000)
    qm.put("Q", Message(b"ok2"))  # any operation retries what is due
    assert qm.rule_failures()[0].attempts == 2
    clock.advance(2_000)
    assert qm.retry_rule_failures() == 0
    (parked,) = qm.rule_failures(parked=True)
    assert parked.attempts == 3 and "failing on purpose" in parked.last_error
    assert qm.depth("Q") == 2  # the queue kept working throughout
    switch.unlink()
    assert qm.retry_rule_failures(parked=True) == 1
    assert qm.rule_failures() == []
    rule = next(b for b in qm.queue_bindings("Q") if b.name.endswith("Failing")).rule
    assert isinstance(rule, Failing) and rule.seen == [event["id"]]


def test_expiry_events_of_locked_and_batched_discards_are_durable(
    open_qm: Callable[..., QueueManager], tmp_path: Path, clock: ManualClock
) -> None:
    log = tmp_path / "events.jsonl"
    qm = open_qm()
    qm.define_queue("Q", rules=[("tests.rulekit:FileRecorder", {"path": str(log)})])
    qm.put_many("Q", [Message(b"%d" % i, expiry=Int32(10)) for i in range(1_500)])
    assert qm.get("Q", confirm_id=1) is not None
    clock.advance(10)
    assert qm.sweep_expired("Q") == 1_500
    ids = [e["id"] for e in read_events(log) if e["kind"] == "expired"]
    assert len(ids) == len(set(ids)) == 1_500
    qm.close()
    conn = __import__("sqlite3").connect(tmp_path / "device.db")
    assert conn.execute("SELECT count(*) FROM rule_events").fetchone()[0] == 0  # all forgotten at close
    conn.close()


def test_explicit_retry_ignores_backoff_and_filters_by_event(
    open_qm: Callable[..., QueueManager], tmp_path: Path
) -> None:
    switch = tmp_path / "fail"
    switch.touch()
    qm = open_qm(rule_retry_base_ms=3_600_000)
    qm.define_queue("Q", rules=[("tests.rulekit:Failing", {"switch": str(switch)})])
    qm.put("Q", Message(b"a", expiry=Int64(1)))
    qm.put("Q", Message(b"b", expiry=Int64(1)))
    first, second = (f.event_id for f in qm.rule_failures())
    switch.unlink()
    assert qm.retry_rule_failures(event_id=first) == 1  # now, though its backoff has an hour to run
    assert [f.event_id for f in qm.rule_failures()] == [second]
    assert qm.retry_rule_failures() == 1
    assert qm.rule_failures() == []

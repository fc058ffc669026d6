"""edgeq.cli.views: records as text for people and as JSON for scripts, from a real store."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from edgeq import Int32, Int64, ManualClock, Message, QueueManager
from edgeq.cli.views import (
    binding_json,
    failure_json,
    format_bindings,
    format_failures,
    format_message,
    format_queue,
    format_queue_table,
    format_rules_table,
    format_stats,
    format_table,
    message_json,
    queue_json,
)
from edgeq.queues.attributes import QueueUsage
from edgeq.rules.registry import RuleInfo
from edgeq.store.rules import FailureRow

T0 = 1_763_715_600_000  # 2025-11-21T09:00:00Z


@pytest.fixture
def qm(tmp_path: Path) -> Iterator[QueueManager]:
    manager = QueueManager(tmp_path / "dev.db", name="DEV1", clock=ManualClock(T0))
    manager.define_queue("DLQ")
    manager.define_queue("ORDERS", expiry_ms=90_000, max_depth=10,
                         rules=[("dead-letter", {"queue": "DLQ"}), "counters"])
    yield manager
    manager.close()


def put_and_browse(qm: QueueManager, message: Message) -> Message:
    qm.put("ORDERS", message)
    (shown,) = qm.browse("ORDERS")
    return shown


def test_a_text_message_for_people(qm: QueueManager) -> None:
    message = put_and_browse(qm, Message(b"42 widgets", priority=7, fields={"n": Int32(5), "site": "north"},
                                         correlation_id=b"\x01\x02", reply_to="REPLIES").expire_after(30_000))
    lines = format_message(message).splitlines()
    assert lines[0] == f"{message.uid}  priority 7  created 2025-11-21T09:00:00Z"
    assert lines[1:] == [
        "  expiry   relative Int32(30000), 30s after creation; 30s left",
        "  correlation id (hex) 0102",
        "  reply to REPLIES",
        "  fields   n:int32=5 site=north",
        "  data     UTF-8 text, 10 bytes: 42 widgets",
    ]


def test_binary_and_multi_line_data_and_the_queues_expiry(qm: QueueManager) -> None:
    binary = put_and_browse(qm, Message(b"\x00\xff", fields={"at": Int64(T0)}).expire_at(T0 + 3_600_000))
    assert format_message(binary).splitlines()[1:] == [
        "  expiry   absolute Int64(1763719200000), at 2025-11-21T10:00:00Z; 1h 0m left",
        "  fields   at:int64=1763715600000",
        "  data     binary (not UTF-8), 2 bytes, as hex: 00ff",
    ]
    qm.purge("ORDERS")
    text = put_and_browse(qm, Message(b"line 1\nline 2\n"))
    assert format_message(text).splitlines()[1:] == [
        "  expiry   the queue's expiry_ms; 1m 30s left",
        "  data     UTF-8 text, 14 bytes:",
        "    line 1",
        "    line 2",
    ]


def test_a_message_as_json(qm: QueueManager) -> None:
    message = put_and_browse(qm, Message(b"\xff", fields={"ok": True, "r": float("nan"), "raw": b"\x0a"}))
    out = message_json(message)
    assert json.loads(json.dumps(out)) == out  # plain JSON, even with a NaN field
    assert out["data"] == base64.b64encode(b"\xff").decode() and out["data_text"] is None
    assert out["fields"] == {"ok": {"type": "bool", "value": True}, "r": {"type": "float", "value": "nan"},
                             "raw": {"type": "bytes", "value": "0a"}}
    assert out["expiry"] is None and out["remaining_expiry_ms"] == 90_000
    absolute = message_json(Message(b"x").expire_at(T0))
    assert absolute["expiry"] == {"type": "int64", "at_ms": T0, "at": "2025-11-21T09:00:00Z"}


def test_a_queue_with_its_bindings_in_order(qm: QueueManager) -> None:
    attrs, bindings = qm.queue_attributes("ORDERS"), qm.queue_bindings("ORDERS")
    usage = QueueUsage("ORDERS", 3, 2_500, 10, None, "reject")
    text = format_queue(attrs, usage, bindings).splitlines()
    assert text[:5] == ["queue              ORDERS", "depth              3",
                        "bytes              2500 (2.4 KiB)",
                        "expiry_ms          90000 (1m 30s)", "cap_expiry_ms      none"]
    assert text[5:8] == ["max_depth          10", "max_bytes          none", "on_full            reject"]
    assert (text[-2:]
            == ['rules              1. dead-letter:{"queue": "DLQ"}', "                   2. counters"])
    out = queue_json(attrs, usage, bindings)
    assert (out["name"], out["depth"], out["bytes"], out["max_depth"]) == ("ORDERS", 3, 2_500, 10)
    assert (out["max_bytes"], out["on_full"], out["refusal_limit"]) == (None, "reject", None)
    assert out["rules"] == [binding_json(b) for b in bindings]
    assert (out["rules"][0]
            == {"name": "dead-letter", "config": {"queue": "DLQ"}, "persisted": True, "error": None})
    assert "rules" not in queue_json(attrs, usage)
    assert format_bindings([]) == "none"


def test_a_queue_table(qm: QueueManager) -> None:
    qm.define_remote_queue("OUT", target_qmgr="HOME", target_queue="ORDERS", max_bytes=4096)
    qm.define_home_server_queue("INBOX", server="HOME")
    qm.put("ORDERS", Message(b"12345"))
    table = format_queue_table([(qm.queue_attributes(n), qm.queue_usage(n)) for n in qm.queue_names()])
    assert table.splitlines() == [
        "QUEUE   DEPTH  BYTES  EXPIRY  CAP  MAX-DEPTH  MAX-BYTES  PRIO  ORDERING  KIND",
        "DLQ     0      0      -       -    -          -          4     priority  local",
        "INBOX   0      0      -       -    -          -          4     priority  home HOME",
        "ORDERS  1      5      1m30s   -    10         -          4     priority  local",
        "OUT     0      0      -       -    -          4096       4     priority  remote HOME/ORDERS (async)",
    ]


def test_a_remote_queue_shows_where_it_goes_and_its_refusal_limit(qm: QueueManager) -> None:
    qm.define_remote_queue("OUT", target_qmgr="HOME", mode="sync", refusal_limit=5)
    text = format_queue(qm.queue_attributes("OUT"), qm.queue_usage("OUT"))
    assert "kind               remote: HOME/OUT (sync)\nrefusal_limit      5" in text
    qm.alter_queue("OUT", refusal_limit=None)
    assert "refusal_limit      default" in format_queue(qm.queue_attributes("OUT"), qm.queue_usage("OUT"))
    assert "refusal_limit" not in format_queue(qm.queue_attributes("ORDERS"), qm.queue_usage("ORDERS"))


def test_tables_have_aligned_columns_and_no_trailing_blanks() -> None:
    assert format_table(("A", "LONG-HEADER"), [("wide cell", ""), ("x", "y")]) == (
        "A          LONG-HEADER\nwide cell\nx          y"
    )
    rules = [RuleInfo("counters", "edgeq", "Counts what happens.", "edgeq.rules.counters:CountersRule")]
    assert format_rules_table(rules) == "RULE      PACKAGE  SUMMARY\ncounters  edgeq    Counts what happens."


def test_failures_waiting_and_parked() -> None:
    waiting = FailureRow(3, "b1", "my_pkg:Alarm", "FLAKY", 1, "ConnectionError:\n  pager  unreachable",
                         T0, T0 + 1_120, parked=False)
    parked = FailureRow(7, "b1", "my_pkg:Alarm", "FLAKY", 5, "boom", T0, T0 + 9_000, parked=True)
    assert format_failures([waiting, parked]).splitlines() == [
        "EVENT  QUEUE  RULE          ATTEMPTS  STATE    NEXT-RETRY                LAST-ERROR",
        "3      FLAKY  my_pkg:Alarm  1         waiting  2025-11-21T09:00:01.120Z  ConnectionError: pager "
        "unreachable",
        "7      FLAKY  my_pkg:Alarm  5         parked   -                         boom",
    ]
    assert failure_json(waiting)["next_retry"] == "2025-11-21T09:00:01.120Z"
    assert (failure_json(parked)["next_retry_ms"], failure_json(parked)["last_attempt"]) == (
        None, "2025-11-21T09:00:00Z"
    )


def test_counters_sorted_by_name() -> None:
    assert (format_stats({"got": 2, "added": 10, "expired.get": 1})
            == "added        10\nexpired.get  1\ngot          2")

"""Rules bound by name: discovery, validation, persistence, broken plugins, all hooks."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from edgeq import Int32, Int64, ManualClock, Message, QueueManager
from edgeq.errors import DuplicateMessage, RuleConfigError, RuleLoadError, RuleNotFound
from edgeq.rules.registry import installed_rules, load_rule_class
from tests.rulekit import read_events


def test_builtins_are_installed_with_package_and_summary() -> None:
    rules = {r.name: r for r in installed_rules()}
    assert {"dead-letter", "expiry-report", "log", "counters"} <= set(rules)
    assert rules["dead-letter"].package == "edgeq"
    assert "dead-letter queue" in rules["dead-letter"].summary


def test_unknown_rule_and_bad_dotted_path_are_clear() -> None:
    with pytest.raises(RuleNotFound, match=r"no rule named 'nope' is installed.*dead-letter"):
        load_rule_class("nope")
    with pytest.raises(RuleLoadError, match="could not be loaded: ModuleNotFoundError"):
        load_rule_class("no_such_module:Rule")
    with pytest.raises(RuleLoadError, match="not a subclass"):
        load_rule_class("json:dumps")


def test_bindings_persist_and_are_reattached_on_reopen(
    open_qm: Callable[..., QueueManager], tmp_path: Path, clock: ManualClock
) -> None:
    log = tmp_path / "events.jsonl"
    qm = open_qm()
    qm.define_queue("DLQ")
    qm.define_queue("Q", rules=[("tests.rulekit:FileRecorder", {"path": str(log)}),
                                ("dead-letter", {"queue": "DLQ"})])
    assert [(b.name, b.persisted) for b in qm.queue_bindings("Q")] == [
        ("tests.rulekit:FileRecorder", True), ("dead-letter", True)
    ]
    qm.close()
    qm2 = open_qm()
    assert [b.config for b in qm2.queue_bindings("Q")] == [{"path": str(log)}, {"queue": "DLQ"}]
    uid = qm2.put("Q", Message(b"x", expiry=Int32(10)))
    clock.advance(10)
    assert qm2.depth("Q") == 0
    expired = [e for e in read_events(log) if e["kind"] == "expired"]
    assert expired == [{"id": expired[0]["id"], "kind": "expired", "queue": "Q", "uid": str(uid),
                        "where": "depth", "reason": None, "depth": None}]
    assert isinstance(expired[0]["id"], int)
    dead = qm2.get("DLQ")
    assert dead is not None and dead.uid == uid


@pytest.mark.parametrize(
    ("rules", "error", "text"),
    [
        ([("dead-letter", {})], RuleConfigError, "queue"),
        ([("dead-letter", {"queue": "NOWHERE"})], Exception, "not defined"),
        ([("dead-letter", {"queue": "DLQ", "reasons": ["melted"]})], RuleConfigError, "reasons"),
        ([("log", {"level": "loud"})], RuleConfigError, "level"),
        ([("log", {"colour": "red"})], RuleConfigError, "colour"),
        (["nope"], RuleNotFound, "nope"),
        ([("log", "not-a-dict")], RuleConfigError, "dict"),
        ([("log", {"x": object()})], RuleConfigError, "JSON"),
    ],
)
def test_bad_bindings_are_refused_and_nothing_is_defined(
    qm: QueueManager, rules: list[object], error: type, text: str
) -> None:
    qm.define_queue("DLQ")
    with pytest.raises(error, match=text):
        qm.define_queue("Q", rules=rules)  # type: ignore[arg-type]
    assert qm.queue_names() == ["DLQ"]


def test_alter_queue_replaces_bindings(qm: QueueManager) -> None:
    qm.define_queue("Q", rules=["log"])
    qm.alter_queue("Q", rules=["counters", "log"])
    assert [b.name for b in qm.queue_bindings("Q")] == ["counters", "log"]
    with pytest.raises(RuleNotFound):
        qm.alter_queue("Q", rules=["nope"])
    assert [b.name for b in qm.queue_bindings("Q")] == ["counters", "log"]
    qm.alter_queue("Q", rules=[])
    assert qm.queue_bindings("Q") == []


def test_broken_plugin_is_reported_and_other_queues_keep_working(
    open_qm: Callable[..., QueueManager], tmp_path: Path, caplog: pytest.LogCaptureFixture,
    clock: ManualClock, monkeypatch: pytest.MonkeyPatch,
) -> None:
    plugin_dir = tmp_path / "plugins"
    plugin_dir.mkdir()
    (plugin_dir / "fragile_rule.py").write_text(
        "from edgeq.rules import QueueRule\nclass Fragile(QueueRule):\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(plugin_dir))
    qm = open_qm()
    qm.define_queue("A", rules=["fragile_rule:Fragile"])
    qm.define_queue("B", rules=["counters"])
    qm.close()
    (plugin_dir / "fragile_rule.py").write_text("raise ImportError('fragile_rule is broken')\n")
    monkeypatch.delitem(sys.modules, "fragile_rule")
    with caplog.at_level(logging.ERROR, logger="edgeq.rules"):
        qm2 = open_qm()
    assert "fragile_rule:Fragile" in caplog.text and "fragile_rule is broken" in caplog.text
    (binding,) = qm2.queue_bindings("A")
    assert binding.error is not None and "fragile_rule is broken" in binding.error
    qm2.put("A", Message(b"still works", expiry=Int32(5)))
    qm2.put("B", Message(b"b"))
    assert qm2.queue_stats("B") == {"added": 1}
    clock.advance(5)
    assert qm2.depth("A") == 0  # the expiry happened; the event waits for the rule
    (failure,) = qm2.rule_failures()
    assert failure.rule == "fragile_rule:Fragile" and "not loaded" in failure.last_error


def test_duplicate_threshold_and_closed_hooks(open_qm: Callable[..., QueueManager], tmp_path: Path) -> None:
    log = tmp_path / "events.jsonl"
    qm = open_qm()
    qm.define_queue("Q", depth_threshold=2, rules=[("tests.rulekit:FileRecorder", {"path": str(log)})])
    uid = qm.put("Q", Message(b"1"))
    qm.put("Q", Message(b"2"))
    qm.put("Q", Message(b"3"))  # already above: no second threshold event
    got = qm.get("Q")
    assert got is not None and got.uid == uid
    qm.put("Q", Message(b"4"))  # back up to 3 from 2: not a crossing of 2
    with pytest.raises(DuplicateMessage):
        qm.put("Q", Message(b"dup", uid=qm.browse("Q")[0].uid))
    qm.close()
    kinds = [(e["kind"], e["depth"]) for e in read_events(log)]
    assert kinds.count(("threshold", 2)) == 1
    assert ("duplicate", None) in kinds and kinds[-1] == ("closed", None)


def test_in_process_rule_events_have_no_id_persisted_ones_do(
    qm: QueueManager, tmp_path: Path, rule: object
) -> None:
    from tests.conftest import Recorder

    assert isinstance(rule, Recorder)
    log = tmp_path / "e.jsonl"
    qm.define_queue("Q", rules=[("tests.rulekit:FileRecorder", {"path": str(log)})])
    qm.add_rule("Q", rule)
    qm.put("Q", Message(b"x", expiry=Int64(1)))
    (expired,) = [e for e in rule.events if e.kind == "expired"]
    assert expired.id is not None  # the queue has persisted rules: the event was recorded
    assert [e["id"] for e in read_events(log) if e["kind"] == "expired"] == [expired.id]

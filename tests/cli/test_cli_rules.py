"""The command line for rules: `rules list/failures/retry`, `queue define/alter --rule`,
bindings in `queue show`, and `queue stats`; end to end on a real SQLite file per test."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from edgeq import Int64, ManualClock, Message, QueueManager
from edgeq.cli import cli
from edgeq.cli.format import format_rule_spec, parse_rule_spec
from tests.cli.test_cli import FUTURE_MS, PAST, Run, fail, ok

FAILING = "tests.rulekit:Failing"


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "dev.db"


@pytest.fixture
def run(db: Path) -> Run:
    """Invoke the CLI with ``--db`` set to the test's store (and no EDGEQ_* from outside)."""

    def _run(*args: str, db_opt: bool = True) -> Result:
        argv = (["--db", str(db)] if db_opt else []) + list(args)
        env: dict[str, str | None] = {"EDGEQ_DB": None, "EDGEQ_NAME": None}
        return CliRunner().invoke(cli, argv, env=env, catch_exceptions=False)

    return _run


@pytest.fixture
def store(run: Run) -> Run:
    """A store (queue manager DEV1) with a dead-letter queue DLQ defined."""
    ok(run("--name", "DEV1", "queue", "define", "DLQ"))
    return run


def bindings(db: Path, queue: str) -> list[tuple[str, dict[str, object]]]:
    with QueueManager(db) as qm:
        return [(b.name, b.config) for b in qm.queue_bindings(queue)]


def failing_store(db: Path, tmp_path: Path, *, now: int, limit: int) -> tuple[Path, int]:
    """Queue Q with a rule that fails on every expiry while its switch file exists, and one
    failed delivery (an expired message); return the switch and the event id."""
    switch = tmp_path / "fail"
    switch.touch()
    with QueueManager(db, name="DEV1", clock=ManualClock(now), rule_retry_limit=limit) as qm:
        qm.define_queue("Q", rules=[(FAILING, {"switch": str(switch)})])
        qm.put("Q", Message(b"late", expiry=Int64(1)))  # expired on arrival: an event the rule refuses
        (failure,) = qm.rule_failures()
    return switch, failure.event_id


# -- help ---------------------------------------------------------------------------------------

COMMANDS = [["rules"], ["rules", "list"], ["rules", "failures"], ["rules", "retry"], ["queue", "stats"]]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_new_command_has_help_with_an_example(run: Run, command: list[str]) -> None:
    out = ok(run(*command, "--help", db_opt=False))
    assert "Usage: edgeq" in out
    assert "edgeq " in out.split("Example", 1)[1]


def test_define_and_alter_help_show_rule_options(run: Run) -> None:
    out = ok(run("queue", "define", "--help", db_opt=False))
    assert "--rule NAME[:JSON]" in out and "--depth-threshold" in out
    out = ok(run("queue", "alter", "--help", db_opt=False))
    assert "--rule NAME[:JSON]" in out and "--no-rules" in out


# -- the --rule syntax ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("counters", ("counters", {})),
        ('dead-letter:{"queue": "DLQ"}', ("dead-letter", {"queue": "DLQ"})),
        ('dead-letter : {"queue":"DLQ","reasons":["expired","got"]}',
         ("dead-letter", {"queue": "DLQ", "reasons": ["expired", "got"]})),
        ("tests.rulekit:Failing", ("tests.rulekit:Failing", {})),
        ('tests.rulekit:Failing:{"switch": "x:y"}', ("tests.rulekit:Failing", {"switch": "x:y"})),
        ("log:{}", ("log", {})),
    ],
)
def test_parse_rule_spec(text: str, expected: tuple[str, dict[str, object]]) -> None:
    assert parse_rule_spec(text) == expected
    assert parse_rule_spec(format_rule_spec(*expected)) == expected  # printed specs paste back


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("dead-letter:queue=DLQ", "config after ':' is a JSON object"),
        ("dead-letter:DLQ", "config after ':' is a JSON object"),
        ("log:[1]", "config after ':' is a JSON object"),
        ('dead-letter:{"queue": DLQ}', "is not a valid JSON object"),
        ('log:{"level": "info"} extra', "is not a valid JSON object"),
        ('{"queue": "DLQ"}', "has no rule name"),
        ('dead-letter{"queue": "DLQ"}', "is not NAME or NAME:JSON"),
        ("", "has no rule name"),
    ],
)
def test_parse_rule_spec_errors(text: str, needle: str) -> None:
    with pytest.raises(ValueError, match=needle.replace("(", r"\(")):
        parse_rule_spec(text)


# -- queue define / alter --rule ----------------------------------------------------------------------


def test_define_binds_rules_in_order_and_persists_them(store: Run, db: Path) -> None:
    out = ok(store("queue", "define", "ORDERS", "--depth-threshold", "50",
                   "--rule", "counters", "--rule", 'dead-letter:{"queue":"DLQ"}', "--rule",
                   FAILING + ':{"switch": "x"}'))
    assert out == (
        "Defined queue ORDERS on DEV1, with rules (run in this order):\n"
        "  1. counters\n"
        '  2. dead-letter:{"queue": "DLQ"}\n'
        '  3. tests.rulekit:Failing:{"switch": "x"}\n'
    )
    assert (bindings(db, "ORDERS")
            == [("counters", {}), ("dead-letter", {"queue": "DLQ"}), (FAILING, {"switch": "x"})])
    with QueueManager(db) as qm:
        assert qm.queue_attributes("ORDERS").depth_threshold == 50


def test_define_with_rules_json(store: Run) -> None:
    data = json.loads(ok(store("--json", "queue", "define", "Q", "--rule", "log:{\"level\": \"debug\"}")))
    assert data["name"] == "Q" and data["depth"] == 0
    assert data["rules"] == [{"name": "log", "config": {"level": "debug"}, "persisted": True, "error": None}]
    plain = json.loads(ok(store("queue", "define", "P", "--json")))
    assert plain["rules"] == [] and plain["depth_threshold"] is None


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("countres", "no rule named 'countres' is installed (installed: counters, dead-letter"),
        ('dead-letter:{"queue": "NOWHERE"}', "dead-letter queue 'NOWHERE' is not defined"),
        ('dead-letter:{"queue": "Q"}', "cannot be its own dead-letter queue"),
        ("dead-letter", "rule 'dead-letter' refused its config {}"),
        ('log:{"level": "loud"}', "level must be one of"),
        ("no_such_module:Rule", "could not be loaded: ModuleNotFoundError"),
        ("json:dumps", "not a subclass of edgeq.rules.QueueRule"),
    ],
)
def test_define_with_a_bad_rule_defines_nothing(store: Run, db: Path, spec: str, needle: str) -> None:
    fail(store("queue", "define", "Q", "--rule", "counters", "--rule", spec), 1, needle)
    with QueueManager(db) as qm:
        assert qm.queue_names() == ["DLQ"]


@pytest.mark.parametrize("spec", ["dead-letter:queue=DLQ", 'log:{"level": }', ':{"a": 1}'])
def test_define_with_a_malformed_rule_is_a_usage_error(store: Run, db: Path, spec: str) -> None:
    result = store("queue", "define", "Q", "--rule", spec)
    assert result.exit_code == 2 and "Invalid value for '--rule'" in result.stderr, result.stderr
    assert "Traceback" not in result.output
    with QueueManager(db) as qm:
        assert qm.queue_names() == ["DLQ"]


def test_a_rule_typo_does_not_create_a_store(run: Run, db: Path) -> None:
    fail(run("--name", "DEV1", "queue", "define", "Q", "--rule", "countres"), 1, "no rule named 'countres'")
    assert not db.exists()


def test_alter_replaces_and_clears_bindings(store: Run, db: Path) -> None:
    ok(store("queue", "define", "Q", "--rule", "log"))
    out = ok(store("queue", "alter", "Q", "--rule", 'dead-letter:{"queue": "DLQ", "reasons": ["got"]}',
                   "--rule", "counters"))
    assert out == (
        "Replaced the rules of Q; now (run in this order):\n"
        '  1. dead-letter:{"queue": "DLQ", "reasons": ["got"]}\n'
        "  2. counters\n"
    )
    assert bindings(db, "Q") == [("dead-letter", {"queue": "DLQ", "reasons": ["got"]}), ("counters", {})]
    out = ok(store("queue", "alter", "Q", "--depth-threshold", "10", "--no-rules"))
    assert out == "Altered queue Q: depth_threshold 10.\nRemoved every rule binding from Q.\n"
    assert bindings(db, "Q") == []
    out = ok(store("queue", "alter", "Q", "--depth-threshold", "none"))
    assert out == "Altered queue Q: depth_threshold none.\n"  # no rules option: bindings untouched
    with QueueManager(db) as qm:
        assert qm.queue_attributes("Q").depth_threshold is None


def test_alter_json_shows_the_new_bindings(store: Run) -> None:
    ok(store("queue", "define", "Q"))
    data = json.loads(ok(store("--json", "queue", "alter", "Q", "--rule", "counters", "--depth-threshold",
                               "3")))
    assert data["depth_threshold"] == 3
    assert data["rules"] == [{"name": "counters", "config": {}, "persisted": True, "error": None}]


def test_alter_errors(store: Run, db: Path) -> None:
    ok(store("queue", "define", "Q", "--rule", "counters"))
    result = store("queue", "alter", "Q", "--rule", "log", "--no-rules")
    assert result.exit_code == 2 and "not both" in result.stderr
    result = store("queue", "alter", "Q")
    assert result.exit_code == 2 and "nothing to change" in result.stderr and "--rule" in result.stderr
    fail(store("queue", "alter", "Q", "--rule", "nope"), 1, "no rule named 'nope'")
    fail(store("queue", "alter", "Q", "--max-depth", "5", "--rule", 'dead-letter:{"queue": "X"}'), 1,
         "dead-letter queue 'X' is not defined")
    fail(store("queue", "alter", "NOPE", "--rule", "counters"), 1, "no queue 'NOPE'")
    assert bindings(db, "Q") == [("counters", {})]  # every failed alter left the queue as it was
    with QueueManager(db) as qm:
        assert qm.queue_attributes("Q").max_depth is None


# -- queue show ---------------------------------------------------------------------------------------


def test_show_lists_bindings_in_order_and_the_depth_threshold(store: Run) -> None:
    ok(store("queue", "define", "Q", "--depth-threshold", "7", "--rule", 'dead-letter:{"queue":"DLQ"}',
             "--rule", "counters"))
    out = ok(store("queue", "show", "Q"))
    assert "depth_threshold    7\n" in out
    assert out.endswith(
        'rules              1. dead-letter:{"queue": "DLQ"}\n'
        "                   2. counters\n"
    )
    data = json.loads(ok(store("queue", "show", "Q", "--json")))
    assert data["depth_threshold"] == 7
    assert [(r["name"], r["config"], r["error"]) for r in data["rules"]] == [
        ("dead-letter", {"queue": "DLQ"}, None), ("counters", {}, None)
    ]
    assert ok(store("queue", "show", "DLQ")).endswith("rules              none\n")
    listed = json.loads(ok(store("queue", "list", "--json")))
    assert [(q["name"], [r["name"] for r in q["rules"]]) for q in listed] == [
        ("DLQ", []), ("Q", ["dead-letter", "counters"])
    ]


def test_show_marks_a_binding_whose_plugin_fails_to_load(
    store: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    module = plugins / "edgeq_cli_fragile.py"
    module.write_text("from edgeq.rules import QueueRule\n\nclass Fragile(QueueRule):\n    pass\n")
    monkeypatch.syspath_prepend(str(plugins))
    ok(store("queue", "define", "Q", "--rule", "counters", "--rule", "edgeq_cli_fragile:Fragile"))
    module.write_text("raise ImportError('the fragile plugin is broken')\n")
    monkeypatch.delitem(sys.modules, "edgeq_cli_fragile")
    result = store("queue", "show", "Q")
    out = ok(result)
    assert "rules              1. counters\n" in out
    assert ("                   2. edgeq_cli_fragile:Fragile  BROKEN: RuleLoadError: rule "
            "'edgeq_cli_fragile:Fragile' could not be loaded: "
            "ImportError: the fragile plugin is broken") in out
    # the failed load is one warning line on stderr, never a traceback
    assert "Warning: rule 'edgeq_cli_fragile:Fragile' bound to queue Q could not be loaded" in result.stderr
    assert "Traceback" not in result.stderr
    (broken,) = [r for r in json.loads(ok(store("queue", "show", "Q", "--json")))["rules"] if r["error"]]
    assert broken["name"] == "edgeq_cli_fragile:Fragile" and "the fragile plugin is broken" in broken["error"]


# -- queue stats --------------------------------------------------------------------------------------


def test_queue_stats(store: Run, db: Path) -> None:
    ok(store("queue", "define", "Q", "--rule", "counters", "--rule", 'dead-letter:{"queue":"DLQ"}'))
    assert ok(store("queue", "stats", "Q")) == (
        "Q holds 0 message(s), 0 byte(s).\n"
        "No counters on Q yet: nothing has happened since the counters rule was bound.\n"
    )
    ok(store("put", "Q", "a"))
    ok(store("put", "Q", "b"))
    # The CLI refuses a put already expired (nothing stored); through the API it meets the add check.
    fail(store("put", "Q", "late", "--expire-at", "2020-01-01T00:00:00Z"), 1, "nothing was stored")
    with QueueManager(db) as qm:
        qm.put("Q", Message(b"late", expiry=Int64(1)))
    ok(store("get", "Q"))
    assert ok(store("queue", "stats", "Q")) == (
        "Q holds 1 message(s), 1 byte(s).\n"
        "added          2\n"
        "dead_lettered  1\n"
        "expired        1\n"
        "expired.add    1\n"
        "got            1\n"
    )
    assert json.loads(ok(store("--json", "queue", "stats", "Q"))) == {
        "queue": "Q",
        "depth": 1,
        "bytes": 1,
        "counters": {"added": 2, "dead_lettered": 1, "expired": 1, "expired.add": 1, "got": 1},
    }


def test_queue_stats_without_counters_and_errors(store: Run, run: Run, tmp_path: Path) -> None:
    out = ok(store("queue", "stats", "DLQ"))
    assert out.startswith("DLQ holds 0 message(s), 0 byte(s).\nNo counters on DLQ: bind the counters rule")
    assert "--rule counters" in out
    assert json.loads(ok(store("queue", "stats", "DLQ", "--json"))) == {
        "queue": "DLQ", "depth": 0, "bytes": 0, "counters": {}}
    fail(store("queue", "stats", "NOPE"), 1, "no queue 'NOPE' on queue manager DEV1")
    fail(run("queue", "stats", "Q", db_opt=False), 1, "no store given")
    missing = CliRunner().invoke(cli, ["--db", str(tmp_path / "missing.db"), "queue", "stats", "Q"])
    fail(missing, 1, "does not exist")


# -- rules list --------------------------------------------------------------------------------------


def test_rules_list_needs_no_store(run: Run) -> None:
    lines = ok(run("rules", "list", db_opt=False)).splitlines()
    assert lines[0].split() == ["RULE", "PACKAGE", "SUMMARY"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert {"counters", "dead-letter", "expiry-report", "log"} <= set(rows)
    assert rows["dead-letter"].split()[1] == "edgeq"
    assert "Copies expired (or otherwise deleted) messages to a dead-letter queue" in rows["dead-letter"]
    data = {r["name"]: r for r in json.loads(ok(run("--json", "rules", "list", db_opt=False)))}
    assert data["counters"] == {
        "name": "counters", "package": "edgeq",
        "summary": "Counts what happens on a queue, durably, for qm.queue_stats.",
        "target": "edgeq.rules.counters:CountersRule",
    }


def test_rules_list_shows_other_packages_and_broken_plugins(
    run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site"
    dist = site / "edgeq_cli_plugin-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: edgeq-cli-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[edgeq.rules]\nzz-broken = edgeq_cli_no_such_module:Rule\nzz-failing = tests.rulekit:Failing\n"
    )
    monkeypatch.syspath_prepend(str(site))
    rows = {line.split()[0]: line.split(None, 2)
            for line in ok(run("rules", "list", db_opt=False)).splitlines()}
    assert (rows["zz-failing"]
            == ["zz-failing", "edgeq-cli-plugin", "Raises on every expiry while switch (a file) exists."])
    assert rows["zz-broken"][:2] == ["zz-broken", "edgeq-cli-plugin"]
    assert rows["zz-broken"][2].startswith(
        "BROKEN: ModuleNotFoundError: No module named 'edgeq_cli_no_such_module'")
    data = {r["name"]: r for r in json.loads(ok(run("rules", "list", "--json", db_opt=False)))}
    assert data["zz-broken"]["target"] == "edgeq_cli_no_such_module:Rule"


# -- rules failures ------------------------------------------------------------------------------------


def test_rules_failures_none(store: Run) -> None:
    assert ok(store("rules", "failures")) == "No rule failures.\n"
    assert ok(store("rules", "failures", "--parked")) == "No parked rule failures.\n"
    assert ok(store("rules", "failures", "--waiting")) == "No rule failures waiting for a retry.\n"
    assert json.loads(ok(store("rules", "failures", "--json"))) == []


def test_rules_failures_parked(run: Run, db: Path, tmp_path: Path) -> None:
    _, event_id = failing_store(db, tmp_path, now=PAST, limit=1)  # one attempt: parked at once
    lines = ok(run("rules", "failures")).splitlines()
    assert lines[0].split() == ["EVENT", "QUEUE", "RULE", "ATTEMPTS", "STATE", "NEXT-RETRY", "LAST-ERROR"]
    assert lines[1].split(None, 6) == [
        str(event_id), "Q", FAILING, "1", "parked", "-",
        f"RuntimeError: failing on purpose for event {event_id}",
    ]
    assert ok(run("rules", "failures", "--parked")).splitlines() == lines
    assert ok(run("rules", "failures", "--waiting")) == "No rule failures waiting for a retry.\n"
    (data,) = json.loads(ok(run("--json", "rules", "failures", "--parked")))
    assert data == {
        "event_id": event_id, "queue": "Q", "rule": FAILING, "binding": data["binding"], "attempts": 1,
        "parked": True, "last_error": f"RuntimeError: failing on purpose for event {event_id}",
        "last_attempt_ms": PAST, "last_attempt": "2020-09-13T12:26:40Z", "next_retry_ms": None,
        "next_retry": None,
    }


def test_rules_failures_waiting(run: Run, db: Path, tmp_path: Path) -> None:
    # Made with a clock far ahead, so its next retry has not come when the CLI opens the store.
    _, event_id = failing_store(db, tmp_path, now=FUTURE_MS, limit=5)
    (row,) = ok(run("rules", "failures", "--waiting")).splitlines()[1:]
    assert row.split()[:6] == [str(event_id), "Q", FAILING, "1", "waiting", "2099-01-01T00:00:01Z"]
    assert ok(run("rules", "failures", "--parked")) == "No parked rule failures.\n"
    (data,) = json.loads(ok(run("rules", "failures", "--json")))
    assert (data["parked"], data["next_retry_ms"], data["next_retry"]) == (False, FUTURE_MS + 1000,
                                                                           "2099-01-01T00:00:01Z")


def test_rules_failures_errors(run: Run) -> None:
    fail(run("rules", "failures", db_opt=False), 1, "no store given")
    result = run("rules", "failures", "--parked", "--waiting", db_opt=False)
    assert result.exit_code == 2 and "not both" in result.stderr


# -- rules retry --------------------------------------------------------------------------------------


def test_rules_retry_parked_after_the_rule_is_fixed(run: Run, db: Path, tmp_path: Path) -> None:
    switch, _ = failing_store(db, tmp_path, now=PAST, limit=1)
    result = run("rules", "retry")  # parked deliveries wait for --parked
    assert (ok(result)
            == "Retried: 0 deliveries succeeded.\nStill failing: 0 waiting, 1 parked (see `edgeq rules "
               "failures`).\n")
    switch.unlink()  # "fix" the rule
    assert (ok(run("rules", "retry", "--parked"))
            == "Retried: 1 delivery succeeded.\nNo rule failures are left.\n")
    assert ok(run("rules", "failures")) == "No rule failures.\n"


def test_rules_retry_when_the_rule_still_fails(run: Run, db: Path, tmp_path: Path) -> None:
    _, event_id = failing_store(db, tmp_path, now=PAST, limit=1)
    result = run("--json", "rules", "retry", "--parked", "--event", str(event_id))
    assert json.loads(ok(result)) == {"succeeded": 0, "waiting": 1, "parked": 0}
    # the rule's exception is one warning line on stderr, never a traceback
    assert (f"Warning: rule {FAILING} (b1) failed in on_expired on queue Q, event id {event_id}: "
            f"RuntimeError: failing on purpose for event {event_id}") in result.stderr
    assert "Traceback" not in result.stderr
    (failure,) = json.loads(ok(run("rules", "failures", "--json")))
    assert (failure["attempts"], failure["parked"]) == (1, False)  # a fresh round: attempt 1 of 5


def test_rules_retry_retries_waiting_ones_now(run: Run, db: Path, tmp_path: Path) -> None:
    switch, _ = failing_store(db, tmp_path, now=FUTURE_MS, limit=5)  # its retry is not due yet
    switch.unlink()
    result = run("rules", "retry")
    assert ok(result) == "Retried: 1 delivery succeeded.\nNo rule failures are left.\n"
    switch2, _ = failing_store(tmp_path / "due.db", tmp_path, now=PAST, limit=5)
    switch2.unlink()
    due = CliRunner().invoke(cli, ["--db", str(tmp_path / "due.db"), "rules", "retry"])
    assert due.exit_code == 0, due.output
    assert due.stdout.endswith("No rule failures are left.\n")
    assert (ok(CliRunner().invoke(cli, ["--db", str(tmp_path / "due.db"), "rules", "failures"]))
            == "No rule failures.\n")


def test_rules_retry_errors(run: Run, db: Path, tmp_path: Path) -> None:
    result = run("rules", "retry", "--parked", "--event", "0", db_opt=False)
    assert result.exit_code == 2 and "--event" in result.stderr
    fail(run("rules", "retry", db_opt=False), 1, "no store given")
    _, event_id = failing_store(db, tmp_path, now=PAST, limit=1)
    fail(run("rules", "retry", "--parked", "--event", str(event_id + 1)), 1,
         f"no rule failure for event {event_id + 1}", "edgeq rules failures")
    fail(run("rules", "retry", "--event", str(event_id)), 1, "add --parked for parked ones")


def test_queue_define_encrypted_and_show(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from edgeq.crypto import StoreKeys

    key = tmp_path / "store.key"
    StoreKeys.generate().save(key)
    db = tmp_path / "enc.db"
    monkeypatch.setenv("EDGEQ_STORE_KEY_FILE", str(key))
    runner = CliRunner()
    result = runner.invoke(cli, ["--db", str(db), "--name", "DEV1", "queue", "define", "PAY", "--encryption",
                                 "aes-256-gcm"])
    assert result.exit_code == 0, result.output
    shown = runner.invoke(cli, ["--db", str(db), "queue", "show", "PAY"])
    assert shown.exit_code == 0 and "aes-256-gcm" in shown.stdout
    monkeypatch.delenv("EDGEQ_STORE_KEY_FILE")
    refused = runner.invoke(cli, ["--db", str(db), "queue", "define", "PAY2", "--encryption", "aes-256-gcm"])
    assert refused.exit_code == 1 and "needs a store key" in refused.stderr

"""edgeq.cli.queue: every kind of queue the Python API defines (local, remote, home-server),
the flash budget options (--max-bytes, --on-full) and --refusal-limit, end to end on a real
store; what queue show, list and stats say of them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from edgeq import Message, QueueManager
from edgeq.cli import cli
from tests.cli.test_cli import Run, fail, ok


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "dev.db"


@pytest.fixture
def run(db: Path) -> Run:
    """The CLI on the test's store (queue manager DEV1, no queues yet)."""
    QueueManager(db, name="DEV1").close()

    def _run(*args: str) -> Result:
        return CliRunner().invoke(cli, ["--db", str(db), *args], env={"EDGEQ_DB": None, "EDGEQ_NAME": None},
                                  catch_exceptions=False)

    return _run


def attrs(db: Path, name: str) -> dict[str, object]:
    with QueueManager(db) as qm:
        return qm.queue_attributes(name).as_dict()


# -- remote and home-server queues ---------------------------------------------------------------


def test_define_a_remote_queue_with_everything_the_api_takes(run: Run, db: Path) -> None:
    out = ok(run("queue", "define", "OUT", "--remote", "--target-qmgr", "HOME", "--target-queue", "ORDERS",
                 "--mode", "sync", "--refusal-limit", "5", "--max-bytes", "1MiB", "--on-full",
                 "discard-oldest", "--expiry-ms", "1h", "--max-depth", "100", "--default-priority", "6",
                 "--depth-threshold", "50"))
    assert out == "Defined remote queue OUT on DEV1, transmitted to HOME/ORDERS (sync).\n"
    a = attrs(db, "OUT")
    assert (a["kind"], a["target_qmgr"], a["target_queue"], a["mode"]) == ("remote", "HOME", "ORDERS", "sync")
    assert (a["refusal_limit"], a["max_bytes"], a["on_full"]) == (5, 1_048_576, "discard-oldest")
    assert ((a["expiry_ms"], a["max_depth"], a["default_priority"], a["depth_threshold"])
            == (3_600_000, 100, 6, 50))


def test_a_remote_queue_defaults_to_async_and_its_own_name(run: Run, db: Path) -> None:
    data = json.loads(ok(run("queue", "define", "ORDERS", "--remote", "--target-qmgr", "HOME", "--json")))
    assert (data["kind"], data["target_queue"], data["mode"], data["refusal_limit"]) == (
        "remote", "ORDERS", "async", None)
    assert (data["depth"], data["bytes"], data["ordering"]) == (0, 0, "priority")


def test_define_a_home_server_queue(run: Run, db: Path) -> None:
    out = ok(run("queue", "define", "INBOX", "--home-server", "HOME", "--max-bytes", "64KiB", "--rule",
                 "counters"))
    assert out == ("Defined home-server queue INBOX on DEV1, filled from HOME, "
                   "with rules (run in this order):\n"
                   "  1. counters\n")
    a = attrs(db, "INBOX")
    assert (a["kind"], a["server"], a["max_bytes"]) == ("home", "HOME", 65_536)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--target-qmgr", "HOME"], "--target-qmgr: only for remote queues (add --remote)"),
        (["--mode", "sync", "--refusal-limit", "3"], "--mode, --refusal-limit: only for remote queues"),
        (["--remote"], "--remote needs --target-qmgr"),
        (["--remote", "--target-qmgr", "HOME", "--home-server", "HOME"], "not both"),
        (["--remote", "--target-qmgr", "HOME", "--ordering", "fifo"], "always priority-ordered"),
        (["--remote", "--target-qmgr", "bad name"], "queue manager name 'bad name'"),
        (["--remote", "--target-qmgr", "HOME", "--mode", "later"], "'later' is not one of"),
        (["--remote", "--target-qmgr", "HOME", "--refusal-limit", "0"], "must be positive"),
        (["--max-bytes", "lots"], "is not a size"),
        (["--max-bytes", "0"], "must be positive"),
        (["--on-full", "drop"], "'drop' is not one of"),
    ],
)
def test_bad_kind_and_budget_options_are_usage_errors(
    run: Run, db: Path, args: list[str], needle: str
) -> None:
    result = run("queue", "define", "Q", *args)
    assert result.exit_code == 2 and needle in result.stderr, result.stderr
    assert "Traceback" not in result.output
    with QueueManager(db) as qm:
        assert qm.queue_names() == []


# -- the budget ----------------------------------------------------------------------------------


def test_budget_options_define_alter_and_show(run: Run, db: Path) -> None:
    ok(run("queue", "define", "RING", "--max-bytes", "2KiB", "--max-depth", "3", "--on-full",
           "discard-oldest",
           "--rule", "counters"))
    for n in range(5):
        ok(run("put", "RING", f"m{n}"))
    show = ok(run("queue", "show", "RING"))
    assert "depth              3\nbytes              6\n" in show
    assert "max_bytes          2048 (2.0 KiB)\non_full            discard-oldest\n" in show
    assert "refusal_limit" not in show
    stats = ok(run("queue", "stats", "RING"))
    assert stats.splitlines()[0] == "RING holds 3 message(s), 6 byte(s) (of max_depth 3, max_bytes 2048; " \
                                    "on_full discard-oldest)."
    assert "overflow  2" in stats
    assert json.loads(ok(run("queue", "stats", "RING", "--json")))["counters"]["overflow"] == 2
    out = ok(run("queue", "alter", "RING", "--max-bytes", "none", "--on-full", "discard-lowest-priority"))
    assert out == "Altered queue RING: max_bytes none, on_full discard-lowest-priority.\n"
    assert ok(run("queue", "alter", "RING", "--max-bytes", "1MiB")) == (
        "Altered queue RING: max_bytes 1048576 (1.0 MiB).\n")
    listed = {q["name"]: q for q in json.loads(ok(run("queue", "list", "--json")))}
    assert (listed["RING"]["bytes"], listed["RING"]["max_bytes"], listed["RING"]["on_full"]) == (
        6, 1_048_576, "discard-lowest-priority")


def test_a_full_queue_is_a_clear_error(run: Run) -> None:
    ok(run("queue", "define", "Q", "--max-bytes", "4"))
    ok(run("put", "Q", "abcd"))
    fail(run("put", "Q", "e"), 1, "queue 'Q' is full", "max_bytes 4", "on_full='discard-oldest'")
    fail(run("put", "Q", "toolong"), 1, "can never fit")


def test_refusal_limit_is_altered_on_remote_queues_only(run: Run, db: Path) -> None:
    ok(run("queue", "define", "OUT", "--remote", "--target-qmgr", "HOME", "--refusal-limit", "2"))
    assert ok(run("queue", "alter", "OUT", "--refusal-limit", "9")) == "Altered queue OUT: refusal_limit 9.\n"
    assert "refusal_limit      9" in ok(run("queue", "show", "OUT"))
    assert ok(run("queue", "alter", "OUT", "--refusal-limit", "none")) == (
        "Altered queue OUT: refusal_limit default.\n")
    assert attrs(db, "OUT")["refusal_limit"] is None
    ok(run("queue", "define", "LOCAL"))
    fail(run("queue", "alter", "LOCAL", "--refusal-limit", "3"), 1,
         "refusal_limit applies to remote queues only")


def test_list_shows_every_kind(run: Run, db: Path) -> None:
    ok(run("queue", "define", "OUT", "--remote", "--target-qmgr", "HOME", "--target-queue", "ORDERS"))
    ok(run("queue", "define", "INBOX", "--home-server", "HOME"))
    ok(run("queue", "define", "LOCAL", "--max-bytes", "100"))
    with QueueManager(db) as qm:
        qm.put("OUT", Message(b"12345678"))
    kinds = {line.split()[0]: line.split(None, 9)[9] for line in ok(run("queue", "list")).splitlines()[1:]}
    assert kinds == {"INBOX": "home HOME", "LOCAL": "local", "OUT": "remote HOME/ORDERS (async)"}
    rows = {line.split()[0]: line.split()[1:3] for line in ok(run("queue", "list")).splitlines()[1:]}
    assert rows["OUT"] == ["1", "8"]
    assert "kind               home: HOME" in ok(run("queue", "show", "INBOX"))


# -- backout threshold and queue -----------------------------------------------------------------


def test_backout_options_define_alter_show_and_stop(run: Run, db: Path) -> None:
    ok(run("queue", "define", "BOQ"))
    ok(run("queue", "define", "BOQ2"))
    out = ok(run("queue", "define", "JOBS", "--backout-threshold", "3", "--backout-queue", "BOQ"))
    assert out == "Defined queue JOBS on DEV1.\n"
    assert (attrs(db, "JOBS")["backout_threshold"], attrs(db, "JOBS")["backout_queue"]) == (3, "BOQ")
    assert "backout            to BOQ at 3 undone gets" in ok(run("queue", "show", "JOBS"))
    data = json.loads(ok(run("queue", "show", "JOBS", "--json")))
    assert (data["backout_threshold"], data["backout_queue"]) == (3, "BOQ")
    assert (ok(run("queue", "alter", "JOBS", "--backout-queue", "BOQ2"))
            == "Altered queue JOBS: backout_queue BOQ2.\n")
    assert ok(run("queue", "alter", "JOBS", "--no-backout")) == (
        "Altered queue JOBS: backout_threshold none, backout_queue none.\n")
    assert "backout" not in ok(run("queue", "show", "JOBS"))
    ok(run("queue", "delete", "BOQ2"))  # no longer in use


def test_a_poison_message_moves_through_the_command_line(run: Run, db: Path) -> None:
    ok(run("queue", "define", "BOQ"))
    ok(run("queue", "define", "JOBS", "--backout-threshold", "1", "--backout-queue", "BOQ"))
    ok(run("put", "JOBS", "poison"))
    with QueueManager(db) as qm:
        assert qm.get("JOBS", confirm_id=1) is not None
        qm.undo("JOBS", 1)
    assert ok(run("depth", "JOBS")) == "0\n"
    assert ok(run("get", "BOQ", "--raw")) == "poison"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--backout-threshold", "3"], "together"),
        (["--backout-queue", "BOQ"], "together"),
        (["--backout-threshold", "0", "--backout-queue", "BOQ"], "must be positive"),
        (["--backout-threshold", "many", "--backout-queue", "BOQ"], "not a whole number"),
        (["--backout-threshold", "2", "--backout-queue", "bad name"], "queue name 'bad name'"),
        (["--remote", "--target-qmgr", "HOME", "--backout-threshold", "2", "--backout-queue", "BOQ"],
         "not for remote queues"),
        (["--remote", "--target-qmgr", "HOME", "--backout-threshold", "none"], "not for remote queues"),
    ],
)
def test_bad_backout_options_are_usage_errors(run: Run, db: Path, args: list[str], needle: str) -> None:
    ok(run("queue", "define", "BOQ"))
    result = run("queue", "define", "Q", *args)
    assert result.exit_code == 2 and needle in result.stderr, result.stderr
    assert "Traceback" not in result.output
    with QueueManager(db) as qm:
        assert qm.queue_names() == ["BOQ"]


def test_backout_errors_from_the_queue_manager(run: Run) -> None:
    ok(run("queue", "define", "BOQ"))
    fail(run("queue", "define", "Q", "--backout-threshold", "2", "--backout-queue", "NOPE"), 1,
         "backout queue 'NOPE' is not defined")
    ok(run("queue", "define", "Q", "--backout-threshold", "2", "--backout-queue", "BOQ"))
    fail(run("queue", "alter", "Q", "--backout-threshold", "none"), 1,
         "backout_queue needs a backout_threshold")
    fail(run("queue", "delete", "BOQ"), 1, "backout queue of 'Q'")
    result = run("queue", "alter", "Q", "--no-backout", "--backout-threshold", "4")
    assert result.exit_code == 2 and "not both" in result.stderr


# -- compression ---------------------------------------------------------------------------------


def test_compression_is_defined_altered_and_shown(run: Run, db: Path) -> None:
    ok(run("queue", "define", "OUT", "--remote", "--target-qmgr", "HOME", "--compression", "zstd"))
    ok(run("queue", "define", "INBOX", "--home-server", "HOME", "--compression", "zlib"))
    assert "compression        zstd" in ok(run("queue", "show", "OUT"))
    assert json.loads(ok(run("queue", "show", "INBOX", "--json")))["compression"] == "zlib"
    assert (ok(run("queue", "alter", "OUT", "--compression", "zlib"))
            == "Altered queue OUT: compression zlib.\n")
    assert (ok(run("queue", "alter", "INBOX", "--compression", "none"))
            == "Altered queue INBOX: compression none.\n")
    assert (attrs(db, "OUT")["compression"], attrs(db, "INBOX")["compression"]) == ("zlib", None)
    assert "compression" not in ok(run("queue", "show", "INBOX"))


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--compression", "zstd"], "only for remote and home-server queues"),
        (["--remote", "--target-qmgr", "HOME", "--compression", "gzip"],
         "'gzip' is not one of 'zstd', 'zlib', 'none'"),
    ],
)
def test_bad_compression_options_are_usage_errors(run: Run, db: Path, args: list[str], needle: str) -> None:
    result = run("queue", "define", "Q", *args)
    assert result.exit_code == 2 and needle in result.stderr, result.stderr
    with QueueManager(db) as qm:
        assert qm.queue_names() == []


def test_zstd_without_its_package_says_how_to_install(
    run: Run, db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "zstandard", None)
    result = run("queue", "define", "OUT", "--remote", "--target-qmgr", "HOME", "--compression", "zstd")
    assert result.exit_code == 2 and "pip install 'edgeq[zstd]'" in result.stderr, result.stderr
    ok(run("queue", "define", "OUT", "--remote", "--target-qmgr", "HOME", "--compression", "zlib"))
    result = run("queue", "alter", "OUT", "--compression", "zstd")
    assert result.exit_code == 2 and "zstandard package" in result.stderr, result.stderr
    assert attrs(db, "OUT")["compression"] == "zlib"


def test_compression_on_a_local_queue_is_refused_by_alter(run: Run) -> None:
    ok(run("queue", "define", "LOCAL"))
    fail(run("queue", "alter", "LOCAL", "--compression", "zlib"), 1,
         "compression applies to remote and home-server")

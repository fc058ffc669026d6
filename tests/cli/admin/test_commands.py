"""edgeq.cli.admin (and adminviews): the operator's command line on a real home store.

Each device command sends the request it should (action, target, params, decoded from the
message queued for the device); replies are carried from a real device queue manager as the
sync agent would (tests/sync/server/admin/test_client.py's ``carry``), then shown by ``show``, ``replies``
and ``pending``; bad values exit 2. The commands end to end over real agents are in
tests/sync/test_admin_e2e.py."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from edgeq import ManualClock, Message, QueueManager
from edgeq.admin.wire import AdminRequest, as_python
from edgeq.cli import cli
from edgeq.clock import system_clock
from edgeq.sync.server.admin.client import AdminClient, OperatorKey
from tests.cli.test_cli import fail, ok
from tests.sync.server.admin.test_client import carry, device

Run = Callable[..., Result]


@pytest.fixture
def home_db(tmp_path: Path) -> Path:
    path = tmp_path / "home.db"
    with QueueManager(path, name="HOME") as qm:
        qm.register_device("DEV1", bytes(32))
        qm.register_device("DEV2", bytes([2]) * 32)  # a key of its own
    return path


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "operator.key"
    result = CliRunner().invoke(cli, ["admin", "keygen", "--out", str(path)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return path


@pytest.fixture
def run(home_db: Path, key_file: Path) -> Run:
    """``edgeq admin --db HOME --key KEY ARGS...`` (``key=False``: without --key)."""

    def _run(*args: str, key: bool = True) -> Result:
        argv = ["admin", "--db", str(home_db), *(["--key", str(key_file)] if key else []), *args]
        return CliRunner().invoke(cli, argv, env={"EDGEQ_DB": None, "EDGEQ_ADMIN_KEY": None},
                                  catch_exceptions=False)

    return _run


@pytest.fixture
def home(home_db: Path) -> Iterator[QueueManager]:
    with QueueManager(home_db) as qm:
        yield qm


@pytest.fixture
def dev1(tmp_path: Path, key_file: Path) -> Iterator[QueueManager]:
    # The device's clock reads as the operator's (the command line's is the system clock).
    with device(tmp_path, "DEV1", OperatorKey.load(key_file).private_key, ManualClock(system_clock())) as qm:
        yield qm


def queued(home: QueueManager, device_name: str = "DEV1") -> list[AdminRequest]:
    """The requests waiting for ``device_name`` on the home server."""
    return [AdminRequest.from_bytes(m.data) for m in home.browse(f"{device_name}.SYSTEM.ADMIN")]


def request_id(result: Result) -> str:
    """The id in ``Sent ... to DEV: request ID``."""
    return ok(result).strip().rsplit(" ", 1)[1]


# -- keygen -----------------------------------------------------------------------------------


def test_keygen_writes_a_key_pair_and_prints_its_id(tmp_path: Path) -> None:
    out = tmp_path / "ops.key"
    text = ok(CliRunner().invoke(cli, ["admin", "keygen", "--out", str(out)]))
    key_id = OperatorKey.load(out).key_id
    assert f"key id: {key_id}" in text and str(tmp_path / "ops.pub") in text
    assert f"edgeq keys trust-admin --db DEVICE.db {key_id} {tmp_path / 'ops.pub'}" in text
    assert os.stat(out).st_mode & 0o077 == 0
    fail(CliRunner().invoke(cli, ["admin", "keygen", "--out", str(out)]), 1, "exists")
    shown = json.loads(ok(CliRunner().invoke(cli,
                                             ["admin", "keygen", "--out", str(out), "--force", "--json"])))
    assert (shown["key_id"] == OperatorKey.load(out).key_id != key_id
            and shown["fingerprint"].startswith("SHA256:"))


# -- the requests each command sends -------------------------------------------------------------

SENT = [
    (["queue", "list"], "inquire-all", None, {}),
    (["queue", "show", "ORDERS"], "inquire-queue", "ORDERS", {}),
    (["queue", "depth", "ORDERS"], "inquire-queue", "ORDERS", {}),
    (["queue", "define", "ALERTS", "--expiry-ms", "60000", "--max-depth", "100", "--ordering", "fifo",
      "--rule", "counters", "--rule", 'dead-letter:{"queue":"DLQ"}'],
     "define-queue", "ALERTS",
     {"expiry_ms": 60_000, "max_depth": 100, "ordering": "fifo",
      "rules": ["counters", ["dead-letter", {"queue": "DLQ"}]]}),
    (["queue", "define", "OUT", "--remote", "--target-qmgr", "HOME", "--refusal-limit", "5"],
     "define-queue", "OUT", {"kind": "remote", "target_qmgr": "HOME", "refusal_limit": 5}),
    (["queue", "define", "INBOX", "--home-server", "HOME", "--max-bytes", "1KiB"],
     "define-queue", "INBOX", {"kind": "home", "server": "HOME", "max_bytes": 1024}),
    (["queue", "alter", "ORDERS", "--expiry-ms", "none", "--max-depth", "5"],
     "alter-queue", "ORDERS", {"expiry_ms": None, "max_depth": 5}),
    (["queue", "alter", "ORDERS", "--no-rules", "--no-backout"], "alter-queue", "ORDERS",
     {"rules": [], "backout_threshold": None, "backout_queue": None}),
    (["queue", "delete", "ORDERS"], "delete-queue", "ORDERS", {}),
    (["queue", "purge", "ORDERS"], "purge", "ORDERS", {}),
    (["purge", "ORDERS"], "purge", "ORDERS", {}),
    (["sweep"], "sweep", None, {}),
    (["sweep", "ORDERS"], "sweep", "ORDERS", {}),
    (["rules", "list", "ORDERS"], "inquire-rules", "ORDERS", {}),
    (["rules", "retry", "--parked", "--event-id", "7"], "retry-rules", None, {"parked": True, "event_id": 7}),
    (["sync-status"], "inquire-sync", None, {}),
]


@pytest.mark.parametrize(("args", "action", "target", "params"), SENT, ids=lambda v: " ".join(v)
                         if isinstance(v, list) else None)
def test_each_command_sends_its_request(
    run: Run, home: QueueManager, args: list[str], action: str, target: str | None, params: dict[str, object]
) -> None:
    rid = request_id(run("DEV1", *args))
    (request,) = queued(home)
    assert (request.request_id, request.action, request.target) == (rid, action, target)
    assert as_python(request.params) == params


def test_all_devices_sends_one_request_each_and_expires(run: Run, home: QueueManager) -> None:
    shown = json.loads(ok(run("--all-devices", "--expires", "10m", "queue", "depth", "ORDERS", "--json")))
    assert [(r["device"], r["status"], r["action"]) for r in shown] == [
        ("DEV1", "pending", "inquire-queue"), ("DEV2", "pending", "inquire-queue")]
    for record, name in zip(shown, ("DEV1", "DEV2"), strict=True):
        (request,) = queued(home, name)
        assert request.request_id == record["request_id"]
        assert (request.expires_ms == record["expires_ms"]
                and 0 < request.expires_ms - request.created_ms <= 600_000)


# -- replies -------------------------------------------------------------------------------------


def test_show_waits_for_the_reply_and_renders_it(run: Run, home: QueueManager, dev1: QueueManager) -> None:
    dev1.define_queue("ORDERS")
    dev1.put("ORDERS", Message(b"x"))
    rid = request_id(run("DEV1", "queue", "list"))
    pending = ok(run("pending", key=False))
    assert rid in pending and "pending" in pending
    carry(home, dev1)
    text = ok(run("show", rid, "--wait", "5s", key=False))
    lines = text.splitlines()
    assert lines[0] == f"DEV1 inquire-all: replied: success (request {rid}): inquire-all: done"
    assert lines[1].split() == ["OBJECT", "RC", "KIND", "DEPTH", "BYTES"]
    assert ["ORDERS", "success", "local", "1", "1"] in [line.split() for line in lines[2:]]
    replies = ok(run("replies", key=False)).splitlines()
    assert replies[1].split()[:3] == [rid, "DEV1", "inquire-all"] and "success" in replies[1]
    shown = json.loads(ok(run("replies", "--json", "--device", "DEV1", key=False)))
    assert shown[0]["reply"]["results"][0]["object"] == "ORDERS"
    assert ok(run("pending", key=False)).strip() == "No admin request is waiting for a reply."


def test_a_depth_and_a_failed_reply(run: Run, home: QueueManager, dev1: QueueManager) -> None:
    dev1.define_queue("ORDERS")
    dev1.put_many("ORDERS", [Message(b"a"), Message(b"b")])
    depth = request_id(run("DEV1", "queue", "depth", "ORDERS"))
    delete = request_id(run("DEV1", "queue", "delete", "ORDERS"))
    carry(home, dev1)
    result = run("show", delete, "--json", key=False)
    assert result.exit_code == 1  # a failed reply
    reply = json.loads(result.stdout)["reply"]
    assert reply["results"][0]["rc"] == "failed" and reply["results"][0]["depth"] == 2
    assert ok(run("show", depth, key=False)).startswith(
        f"DEV1 inquire-queue ORDERS: replied: success (request {depth})")
    shown = json.loads(ok(run("show", depth, "--json", key=False)))  # nested values (the attributes) as JSON
    assert shown["reply"]["results"][0]["attributes"]["name"] == "ORDERS" and shown["status"] == "replied"


def test_resend_puts_the_same_request_again_and_is_answered_from_memory(
        run: Run, home: QueueManager, dev1: QueueManager) -> None:
    dev1.define_queue("LOGS")
    dev1.put_many("LOGS", [Message(b"a"), Message(b"b")])
    rid = request_id(run("DEV1", "queue", "purge", "LOGS"))
    carry(home, dev1)
    dev1.put("LOGS", Message(b"later"))
    again = ok(run("resend", rid, key=False))
    assert again == f"Re-sent purge LOGS to DEV1: request {rid} (replied: success)\n"
    assert [r.request_id for r in queued(home)] == [rid]  # the same signed request, queued again
    assert carry(home, dev1) == 1 and dev1.depth("LOGS") == 1  # answered from memory: not purged twice
    unknown = run("resend", "ab" * 16, key=False)
    assert unknown.exit_code == 1 and "no admin request" in unknown.stderr


def test_waiting_in_vain_exits_1_and_says_pending(run: Run) -> None:
    result = run("DEV1", "sync-status", "--wait", "0")
    assert result.exit_code == 1 and result.stdout.startswith("DEV1 inquire-sync: pending (request ")
    fan = run("--all-devices", "--wait", "0", "queue", "list")
    assert fan.exit_code == 1
    assert [line.split()[:2] for line in fan.stdout.splitlines()] == [
        ["DEVICE", "STATUS"], ["DEV1", "pending"], ["DEV2", "pending"]]


def test_a_device_named_like_a_command(run: Run, home: QueueManager) -> None:
    home.register_device("pending", bytes([3]) * 32)
    request_id(run("--device", "pending", "queue", "list"))
    assert len(queued(home, "pending")) == 1


# -- mistakes ------------------------------------------------------------------------------------


def test_usage_mistakes_exit_2(run: Run, tmp_path: Path, home_db: Path) -> None:
    fail(run("DEV1", "queue", "list", key=False), 2, "--key FILE")
    bad_key = tmp_path / "bad.key"
    bad_key.write_text("not a key")
    bad_key.chmod(0o600)
    cases = [
        (["--key", str(bad_key), "DEV1", "queue", "list"], "not an unencrypted PEM private key"),
        (["--key-id", "no spaces", "DEV1", "queue", "list"], "admin key id"),
        (["DEV.1", "queue", "list"], "has a '.'"),
        (["queue", "list"], "name the device first"),
        (["DEV1"], "give a command after the device"),
        (["--all-devices", "--device", "DEV1", "queue", "list"], "not both"),
        (["DEV1", "queue", "list", "--wait", "soon"], "is not a duration"),
        (["DEV1", "queue", "define", "X", "--expiry-ms", "-5"], "is not a duration"),
        (["DEV1", "queue", "define", "X", "--target-qmgr", "HOME"], "only for remote queues"),
        (["DEV1", "queue", "define", "X", "--backout-threshold", "3"], "together"),
        (["DEV1", "queue", "alter", "X"], "nothing to change"),
        (["DEV1", "queue", "alter", "X", "--rule", "log", "--no-rules"], "not both"),
        (["DEV1", "queue", "alter", "X", "--no-backout", "--backout-queue", "Q"], "not both"),
        (["DEV1", "rules", "retry", "--event-id", "0"], "0"),
        (["DEV1", "reboot"], "No such command"),
        (["show", "feedbeef"], "no admin request 'feedbeef'"),
        (["replies", "--limit", "0"], "0"),
    ]
    for args, needle in cases:
        result = run(*args)
        assert result.exit_code == 2, (args, result.output)
        assert needle in result.stderr, (args, result.stderr)
    with AdminClient(home_db) as client:  # none of them sent anything
        assert client.pending() == [] and client.replies() == []
        assert "DEV1.SYSTEM.ADMIN" not in client.qm.queue_names()


def test_errors_exit_1(run: Run, tmp_path: Path, key_file: Path) -> None:
    fail(run("DEV9", "queue", "list"), 1, "no device 'DEV9' is known here")
    missing = CliRunner().invoke(cli, ["admin", "--db", str(tmp_path / "none.db"), "pending"])
    fail(missing, 1, "does not exist")


def test_every_admin_command_has_help_with_an_example(run: Run) -> None:
    commands = [["keygen"], ["pending"], ["replies"], ["show"], ["queue", "list"], ["queue", "show"],
                ["queue", "depth"], ["queue", "define"], ["queue", "alter"], ["queue", "delete"],
                ["queue", "purge"], ["purge"], ["sweep"], ["rules", "list"], ["rules", "retry"],
                ["sync-status"]]
    for command in commands:
        out = ok(CliRunner().invoke(cli, ["admin", *command, "--help"]))
        assert "Example" in out and "edgeq admin" in out.split("Example", 1)[1], command

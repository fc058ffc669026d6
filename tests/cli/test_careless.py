"""Careless input on the command line (issue 29): each guard rail, with ``edgeq`` run as a real process.

A new user's first hour: a duration without a unit, an expiry already passed, an empty
stdin, a public key where the private one is wanted, a port in use, swapped TLS files, a
store that is not there, a queue name in the wrong case, a fleet-wide delete. Each is
refused with one line that says what was wrong and what to do, and nothing is stored.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from edgeq import Int64, Message, QueueManager
from tests.cli.stores import clean_env

BOUND = 60.0


def edgeq(*args: str, stdin: int | None = subprocess.DEVNULL,
          env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``edgeq ARGS`` as a real process, stdin /dev/null (as under cron) unless told otherwise."""
    return subprocess.run([sys.executable, "-m", "edgeq.cli", *args], stdin=stdin, capture_output=True,
                          text=True, env={**clean_env(), **(env or {})}, timeout=BOUND)


def refused(result: subprocess.CompletedProcess[str], code: int, *needles: str) -> str:
    """Assert the command failed with ``code`` and its stderr holds every needle; return stderr."""
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    for needle in needles:
        assert needle in result.stderr, (needle, result.stderr)
    assert "Traceback" not in result.stderr and "Errno" not in result.stderr, result.stderr
    return result.stderr


@pytest.fixture
def dev(tmp_path: Path) -> Path:
    """A device store (DEV1) with queue ORDERS."""
    path = tmp_path / "dev.db"
    with QueueManager(path, name="DEV1") as qm:
        qm.define_queue("ORDERS")
    return path


def depth(db: Path, queue: str = "ORDERS") -> int:
    with QueueManager(db) as qm:
        return qm.depth(queue)


# -- durations: one rule everywhere, and a unit where the unit is ambiguous -------------------


def test_a_bare_number_as_a_duration_is_refused_with_the_fix(dev: Path) -> None:
    err = refused(edgeq("--db", str(dev), "put", "ORDERS", "hi", "--expire-after", "30"), 2, "--expire-after")
    assert "30s" in err and "30ms" in err, err
    assert depth(dev) == 0
    kept = edgeq("--db", str(dev), "put", "ORDERS", "hi", "--expire-after", "30ms")
    assert kept.returncode == 0, kept.stderr


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A home store (HOME) knowing device DEV1, and an operator key beside it."""
    path = tmp_path / "home.db"
    with QueueManager(path, name="HOME") as qm:
        qm.register_device("DEV1", bytes(32))
        qm.register_device("DEV2", bytes([2]) * 32)  # a key of its own
    made = edgeq("admin", "keygen", "--out", str(tmp_path / "operator.key"))
    assert made.returncode == 0, made.stderr
    return path


def admin_requests(home: Path) -> int:
    with QueueManager(home) as qm:
        return sum(qm.depth(f"{device}.SYSTEM.ADMIN") for device in ("DEV1", "DEV2")
                   if f"{device}.SYSTEM.ADMIN" in qm.queue_names())


@pytest.mark.parametrize("value", ["0", "0s"])
def test_admin_expires_zero_is_refused_as_put_expire_after_zero_is(home: Path, value: str) -> None:
    key = str(home.with_name("operator.key"))
    put_err = refused(edgeq("--db", str(home), "put", "Q", "x", "--expire-after", value), 2, "--expire-after")
    admin_err = refused(edgeq("admin", "--db", str(home), "--key", key, "DEV1", "queue", "list", "--expires",
                              value),
                        2, "--expires")
    assert "out of range" in put_err and "out of range" in admin_err, (put_err, admin_err)
    assert admin_requests(home) == 0


def test_a_bare_number_for_expires_is_refused_too(home: Path) -> None:
    key = str(home.with_name("operator.key"))
    refused(edgeq("admin", "--db", str(home), "--key", key, "DEV1", "queue", "list", "--expires", "600"),
            2, "--expires", "600s")


# -- put: an expiry already passed, an empty body -----------------------------------------------


def test_put_with_an_expire_at_in_the_past_fails_and_stores_nothing(dev: Path) -> None:
    result = edgeq("--db", str(dev), "put", "ORDERS", "late", "--expire-at", "2020-01-01T00:00:00Z")
    refused(result, 1, "2020-01-01T00:00:00Z", "nothing was stored")
    assert result.stdout == ""
    assert depth(dev) == 0


def test_put_from_an_empty_stdin_is_refused_unless_allowed(dev: Path) -> None:
    refused(edgeq("--db", str(dev), "put", "ORDERS"), 2, "empty", "--allow-empty")
    refused(edgeq("--db", str(dev), "put", "ORDERS", ""), 2, "empty", "--allow-empty")
    assert depth(dev) == 0
    allowed = edgeq("--db", str(dev), "put", "ORDERS", "--allow-empty")
    assert allowed.returncode == 0, allowed.stderr
    with QueueManager(dev) as qm:
        [message] = qm.browse("ORDERS")
        assert message.data == b""


# -- keys -------------------------------------------------------------------------------------


def test_a_public_key_given_as_the_device_key_is_named_so(dev: Path, tmp_path: Path) -> None:
    made = edgeq("keys", "new", "--out", str(tmp_path / "dev1" / "device.key"))
    refused(made, 1, "directory")
    (tmp_path / "dev1").mkdir()
    assert edgeq("keys", "new", "--out", str(tmp_path / "dev1" / "device.key")).returncode == 0
    public = tmp_path / "dev1" / "device.pub"
    err = refused(edgeq("sync", "--db", str(dev), "--server", "http://127.0.0.1:9", "--once", "--key",
                        str(public)),
                  2, f"{public} is a public key",
                  f"give the private key file, e.g. {tmp_path / 'dev1' / 'device.key'}")
    assert "chmod" not in err, err


def test_a_public_key_given_as_the_operator_key_is_named_so(home: Path) -> None:
    public = home.with_name("operator.pub")
    err = refused(edgeq("admin", "--db", str(home), "--key", str(public), "DEV1", "queue", "list"),
                  2, f"{public} is a public key", f"e.g. {home.with_name('operator.key')}")
    assert "device key" not in err, err
    missing = home.with_name("nope.key")
    err = refused(edgeq("admin", "--db", str(home), "--key", str(missing), "DEV1", "queue", "list"),
                  2, "the operator key")
    assert "device key" not in err, err


def test_keys_new_into_a_missing_directory_says_so(tmp_path: Path) -> None:
    out = tmp_path / "nonexistent" / "dir" / "k.key"
    refused(edgeq("keys", "new", "--out", str(out)), 1, f"directory {out.parent} does not exist")
    refused(edgeq("admin", "keygen", "--out", str(out)), 1, f"directory {out.parent} does not exist")
    assert not out.parent.exists()


def test_the_ca_file_has_an_environment_variable(dev: Path, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-ca.crt"
    result = edgeq("sync", "--db", str(dev), "--server", "https://127.0.0.1:9", "--once",
                   env={"EDGEQ_CA_FILE": str(missing)})
    refused(result, 2, "--ca-file", str(missing))
    assert "EDGEQ_CA_FILE" in edgeq("sync", "--help").stdout


# -- edgeq serve: a port in use, swapped or unreadable TLS files ---------------------------------


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_serve_on_a_port_in_use_names_the_address(tmp_path: Path, taken_port: int) -> None:
    result = edgeq("serve", "--db", str(tmp_path / "home.db"), "--name", "HOME", "--port", str(taken_port))
    refused(result, 1, f"127.0.0.1:{taken_port}", "in use")
    assert "serving" not in result.stderr, result.stderr


def test_serve_with_the_certificate_and_key_swapped_names_the_file(tmp_path: Path) -> None:
    from tests.sync.agent.test_tls import make_pki

    pki = make_pki(tmp_path / "pki", "swapped")
    db = str(tmp_path / "home.db")
    refused(edgeq("serve", "--db", db, "--name", "HOME", "--port", "0", "--tls-cert", str(pki.key),
                  "--tls-key", str(pki.cert)), 2, f"{pki.key} holds a private key", "--tls-cert")
    garbage = tmp_path / "garbage.key"
    garbage.write_text("not a key\n")
    refused(edgeq("serve", "--db", db, "--name", "HOME", "--port", "0", "--tls-cert", str(pki.cert),
                  "--tls-key", str(garbage)), 2, str(garbage), "--tls-key")


def test_serve_refuses_an_admin_key_others_may_read_or_without_the_console(tmp_path: Path) -> None:
    from edgeq.sync.server.admin.client import new_operator_key

    pair, _ = new_operator_key(tmp_path / "operator.key")
    serve = ("serve", "--db", str(tmp_path / "home.db"), "--name", "HOME", "--port", "0")
    refused(edgeq(*serve, "--admin-key", str(pair.private_path)),
            2, "--admin-key signs the management API's admin requests: give --console too")
    pair.private_path.chmod(0o644)
    refused(edgeq(*serve, "--console", "--admin-key", str(pair.private_path)),
            2, "is readable by others (mode 644): run chmod 600", "--admin-key")
    refused(edgeq(*serve, "--console", "--admin-key", str(pair.public_path)),
            2, "is a public key; give the private key file")
    assert not (tmp_path / "home.db").exists()  # refused before anything was made


# -- stores and queues ---------------------------------------------------------------------------


def test_get_for_a_queue_in_the_wrong_case_suggests_the_right_one(dev: Path) -> None:
    err = refused(edgeq("--db", str(dev), "get", "orders"), 1, "did you mean ORDERS?")
    assert "queue define orders" not in err, err


def test_sync_refuses_an_unknown_store_rather_than_make_one(tmp_path: Path) -> None:
    typo = tmp_path / "typo.db"
    refused(edgeq("sync", "--db", str(typo), "--name", "DEV1", "--server", "http://127.0.0.1:9", "--once"),
            1, f"{typo} does not exist", "queue define")
    assert not typo.exists()


# -- export -----------------------------------------------------------------------------------


@pytest.fixture
def journaled(tmp_path: Path) -> Path:
    """A home store whose journal holds a few accepted puts."""
    path = tmp_path / "home.db"
    with QueueManager(path, name="HOME", journal="server") as qm:
        qm.define_queue("Q")
        for n in range(3):
            uid = qm.put("Q", Message(b"x"), confirm_id=n + 1)
            qm.confirm_put("Q", uid)
    return path


def journal_rows(db: Path) -> int:
    with QueueManager(db) as qm:
        return len(qm.journal_since())


def test_export_refuses_a_prune_that_would_wipe_the_journal_unless_told_yes(journaled: Path,
                                                                             tmp_path: Path) -> None:
    rows = journal_rows(journaled)
    out = str(tmp_path / "journal")
    refused(edgeq("export", "--db", str(journaled), "--out", out, "--prune-after", "0"), 2, "--prune-after",
            "--yes", "console")
    refused(edgeq("export", "--db", str(journaled), "--out", out, "--prune-after", "59m"), 2, "--prune-after")
    assert journal_rows(journaled) == rows
    assert "console" in edgeq("export", "--help").stdout
    done = edgeq("export", "--db", str(journaled), "--out", out, "--prune-after", "0", "--yes")
    assert done.returncode == 0, done.stderr
    assert journal_rows(journaled) == 0


def test_export_of_a_device_store_says_one_consistent_thing(tmp_path: Path) -> None:
    path = tmp_path / "dev.db"
    with QueueManager(path, name="DEV1", journal="device") as qm:
        qm.define_queue("Q")
        for _ in range(4):
            qm.put("Q", Message(b"x", expiry=Int64(qm.now_ms() - 1)))  # expired on arrival: journaled
        reported = qm.journal_since()
        assert reported, "the device journaled nothing"
        qm.exchange.journal_trim(reported[-1].id)  # as the agent does once the server has them
    result = edgeq("export", "--db", str(path), "--out", str(tmp_path / "journal"))
    refused(result, 1, "device", "home server")
    assert "exporting journal ids" not in result.stderr and "up to date" not in result.stdout


# -- a remote delete on every device --------------------------------------------------------------


def test_a_remote_queue_delete_on_all_devices_asks_first(home: Path) -> None:
    key = str(home.with_name("operator.key"))
    base = ("admin", "--db", str(home), "--key", key, "--all-devices")
    refused(edgeq(*base, "queue", "delete", "OLD"), 1, "--yes")
    assert admin_requests(home) == 0
    sent = edgeq(*base, "queue", "delete", "OLD", "--yes", "--json")
    assert sent.returncode == 0, sent.stderr
    assert sorted(r["device"] for r in json.loads(sent.stdout)) == ["DEV1", "DEV2"]
    assert admin_requests(home) == 2
    one = edgeq("admin", "--db", str(home), "--key", key, "DEV1", "queue", "delete", "OLD")
    assert one.returncode == 0, one.stderr

"""``edgeq keys`` and ``edgeq server devices``: device key files and the server's registry."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from edgeq import QueueManager
from edgeq.cli import cli
from edgeq.sync.keys import KeyFileError, fingerprint, load_private_key, load_public_key, public_bytes


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), env={"EDGEQ_DB": None, "EDGEQ_NAME": None},
                              catch_exceptions=False)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home.db"
    with QueueManager(path, name="HOME") as qm:
        qm.define_queue("ORDERS")
    return path


def test_keys_new_writes_a_private_key_only_its_owner_reads_and_a_public_key(tmp_path: Path) -> None:
    out = tmp_path / "device.key"
    result = run("keys", "new", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert out.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")  # PKCS#8 PEM
    pub = tmp_path / "device.pub"
    assert pub.read_bytes().startswith(b"-----BEGIN PUBLIC KEY-----")
    raw = load_public_key(pub)
    assert public_bytes(load_private_key(out)) == raw
    assert result.output.splitlines()[-1] == fingerprint(raw)
    assert run("keys", "fingerprint", str(out)).output.strip() == fingerprint(raw)
    assert run("keys", "fingerprint", str(pub)).output.strip() == fingerprint(raw)


def test_keys_new_never_overwrites_unless_forced(tmp_path: Path) -> None:
    out = tmp_path / "device.key"
    first = json.loads(run("keys", "new", "--out", str(out), "--json").output)
    again = run("keys", "new", "--out", str(out))
    assert again.exit_code == 1 and "refusing to overwrite" in again.output
    assert fingerprint(load_public_key(tmp_path / "device.pub")) == first["fingerprint"]
    forced = json.loads(run("keys", "new", "--out", str(out), "--force", "--json").output)
    assert forced["fingerprint"] != first["fingerprint"]
    assert stat.S_IMODE(out.stat().st_mode) == 0o600


@pytest.mark.skipif(os.name != "posix", reason="file modes")
def test_a_private_key_readable_by_others_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "device.key"
    run("keys", "new", "--out", str(out))
    out.chmod(0o644)
    with pytest.raises(KeyFileError, match="chmod 600"):
        load_private_key(out)


def test_key_files_of_the_wrong_kind_are_refused(tmp_path: Path) -> None:
    junk = tmp_path / "junk.pub"
    junk.write_text("hello")
    with pytest.raises(KeyFileError, match="not a PEM public key"):
        load_public_key(junk)
    key = tmp_path / "device.pub"
    key.write_bytes(Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    with pytest.raises(KeyFileError, match="not a PEM public key"):
        load_public_key(key)
    with pytest.raises(KeyFileError, match="cannot read"):
        load_private_key(tmp_path / "missing.key")


def test_devices_add_list_revoke(tmp_path: Path, home: Path) -> None:
    run("keys", "new", "--out", str(tmp_path / "dev1.key"))
    pub = tmp_path / "dev1.pub"
    added = run("server", "devices", "add", "DEV1", "--public-key", str(pub), "--queues", "ORDERS,TELEMETRY",
                "--db", str(home))
    assert added.exit_code == 0, added.output
    assert "may push to ORDERS, TELEMETRY" in added.output
    with QueueManager(home) as qm:
        record = qm.device("DEV1")
        assert record is not None and record.registered
        assert record.public_key == load_public_key(pub) and record.queues == ("ORDERS", "TELEMETRY")

    listed = run("--db", str(home), "server", "devices", "list")
    assert ("DEV1" in listed.output and "registered" in listed.output
            and fingerprint(load_public_key(pub)) in listed.output)
    revoked = run("server", "devices", "revoke", "DEV1", "--db", str(home))
    assert revoked.exit_code == 0
    (entry,) = json.loads(run("server", "devices", "list", "--db", str(home), "--json").output)
    assert entry["name"] == "DEV1" and entry["registered"] is False and entry["revoked_ms"] is not None
    assert run("server", "devices", "add", "DEV1", "--public-key", str(pub), "--db", str(home)).exit_code == 0
    (entry,) = json.loads(run("server", "devices", "list", "--db", str(home), "--json").output)
    assert entry["registered"] is True and entry["queues"] is None


def test_devices_errors_are_clear(tmp_path: Path, home: Path) -> None:
    run("keys", "new", "--out", str(tmp_path / "d.key"))
    pub = str(tmp_path / "d.pub")
    dotted = run("server", "devices", "add", "DEV.1", "--public-key", pub, "--db", str(home))
    assert dotted.exit_code == 2 and "has a '.'" in dotted.output  # a bad value: a usage error
    unknown = run("server", "devices", "revoke", "NOPE", "--db", str(home))
    assert unknown.exit_code == 1 and "no device 'NOPE'" in unknown.output
    missing = run("server", "devices", "list", "--db", str(tmp_path / "absent.db"))
    assert missing.exit_code == 1 and "does not exist" in missing.output
    assert not (tmp_path / "absent.db").exists()
    bad_name = run("server", "devices", "add", "no spaces", "--public-key", pub, "--db", str(home))
    assert bad_name.exit_code == 2 and "not valid" in bad_name.output
    assert run("server", "devices", "list", "--db", str(home)).output.strip() == "No devices."


def test_store_key_commands_make_and_rotate_keys(tmp_path: Path) -> None:
    from edgeq import Message, QueueManager
    from edgeq.cli import cli
    from edgeq.crypto import StoreKeys

    key = tmp_path / "store.key"
    runner = CliRunner()
    made = runner.invoke(cli, ["keys", "new-store-key", "--out", str(key)])
    assert made.exit_code == 0, made.output
    assert oct(key.stat().st_mode & 0o777) == "0o600"
    again = runner.invoke(cli, ["keys", "new-store-key", "--out", str(key)])
    assert again.exit_code == 1 and "--force" in again.stderr
    db = tmp_path / "d.db"
    with QueueManager(db, name="DEV1", keys=key) as qm:
        qm.define_queue("PAY", encryption="aes-256-gcm")
        qm.put_many("PAY", [Message(b"%d" % i) for i in range(7)])
    rotated = runner.invoke(cli, ["keys", "rotate", "--db", str(db), "--key-file", str(key), "--new-key",
                                  "--batch", "3"])
    assert rotated.exit_code == 0, rotated.output
    assert "Added key k2" in rotated.stdout and "Re-sealed 7 message(s) under key k2" in rotated.stdout
    assert StoreKeys.load(key).current == "k2"
    with QueueManager(db, keys=key) as qm:
        assert [m.data for m in qm.browse("PAY")] == [b"%d" % i for i in range(7)]


def test_the_public_key_file_takes_the_private_keys_name_with_pub_for_its_suffix(tmp_path: Path) -> None:
    """As docs/cli.md says: dev1.key -> dev1.pub (not dev1.key.pub); no suffix: .pub added."""
    assert run("keys", "new", "--out", str(tmp_path / "dev1.key")).exit_code == 0
    assert run("keys", "new", "--out", str(tmp_path / "plain")).exit_code == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dev1.key", "dev1.pub", "plain", "plain.pub"]


def test_a_bad_key_file_or_queue_name_is_a_usage_error(tmp_path: Path, home: Path) -> None:
    junk = tmp_path / "junk.key"
    junk.write_text("hello")
    junk.chmod(0o600)
    printed = run("keys", "fingerprint", str(junk))
    assert printed.exit_code == 2 and "Invalid value for 'PATH'" in printed.output
    rotated = CliRunner().invoke(cli, ["keys", "rotate", "--db", str(home), "--key-file", str(junk)])
    assert rotated.exit_code == 2 and "is not an edgeq store key file" in rotated.output
    run("keys", "new-store-key", "--out", str(tmp_path / "store.key"))
    queue = CliRunner().invoke(cli, ["keys", "rotate", "--db", str(home), "--key-file",
                                     str(tmp_path / "store.key"),
                                     "--queue", "no spaces"])
    assert queue.exit_code == 2 and "queue name 'no spaces' is not valid" in queue.output

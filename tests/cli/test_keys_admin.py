"""``edgeq keys trust-admin | admin-list | untrust-admin``: the operator keys a device trusts
for admin requests (bad values exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from cryptography.hazmat.primitives import serialization

from edgeq import QueueManager
from edgeq.admin.wire import INQUIRE_ACTIONS
from edgeq.cli import cli
from tests.adminkit import OPERATOR, signed


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), env={"EDGEQ_DB": None, "EDGEQ_NAME": None})


@pytest.fixture
def device(tmp_path: Path) -> Path:
    path = tmp_path / "device.db"
    with QueueManager(path, name="DEV1") as qm:
        qm.define_queue("ORDERS")
    return path


@pytest.fixture
def pub(tmp_path: Path) -> Path:
    """An operator's public key file, as `edgeq keys new` writes one."""
    assert run("keys", "new", "--out", str(tmp_path / "ops.key")).exit_code == 0
    return tmp_path / "ops.pub"


def test_a_trusted_key_is_listed_and_its_requests_run_until_it_is_untrusted(
    device: Path, tmp_path: Path
) -> None:
    operator_pub = tmp_path / "operator.pub"
    operator_pub.write_bytes(OPERATOR.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    trusted = run("keys", "trust-admin", "--db", str(device), "ops", str(operator_pub))
    assert trusted.exit_code == 0, trusted.output
    assert (trusted.output.startswith("Trusted admin key ops (SHA256:")
            and "for every action." in trusted.output)
    listed = run("keys", "admin-list", "--db", str(device))
    assert listed.output.splitlines()[0].split() == ["KEY", "FINGERPRINT", "ACTIONS", "ADDED"]
    assert listed.output.splitlines()[1].split()[::2] == ["ops", "*"]
    with QueueManager(device) as qm:
        assert qm.execute_admin(signed(qm, "purge", "ORDERS").to_bytes()).rc == "success"
    gone = run("keys", "untrust-admin", "--db", str(device), "ops")
    assert gone.exit_code == 0 and "no longer trusted" in gone.output
    with QueueManager(device) as qm:
        assert "is not trusted" in qm.execute_admin(signed(qm, "purge", "ORDERS").to_bytes()).message
    assert "No admin keys" in run("keys", "admin-list", "--db", str(device)).output


def test_actions_are_restricted_by_list_or_to_inquiries(device: Path, pub: Path) -> None:
    assert run("keys", "trust-admin", "--db", str(device), "noc", str(pub), "--inquire-only").exit_code == 0
    chosen = run("keys", "trust-admin", "--db", str(device), "deploy", str(pub), "--actions",
                  "define-queue, alter-queue", "--json")
    assert chosen.exit_code == 0, chosen.output
    assert json.loads(chosen.output)["actions"] == ["define-queue", "alter-queue"]
    listed = {k["key_id"]: k
              for k in json.loads(run("keys", "admin-list", "--db", str(device), "--json").output)}
    assert listed["noc"]["actions"] == list(INQUIRE_ACTIONS)
    assert listed["deploy"]["fingerprint"] == listed["noc"]["fingerprint"]
    assert set(listed["noc"]) == {"key_id", "fingerprint", "actions", "added_ms", "added"}


@pytest.mark.parametrize(("args", "message"), [
    (["bad id", "{pub}"], "admin key id"),
    (["ops", "{pub}", "--actions", "reboot"], "unknown action(s) reboot"),
    (["ops", "{pub}", "--actions", ","], "unknown action(s) (none given)"),
    (["ops", "{pub}", "--actions", "purge", "--inquire-only"], "not both"),
    (["ops", "{key}"], "not an Ed25519 public key"),
    (["ops", "{missing}"], "does not exist"),
])
def test_bad_values_exit_2(device: Path, pub: Path, args: list[str], message: str) -> None:
    paths = {"pub": str(pub), "key": str(pub.with_suffix(".key")), "missing": str(pub.with_name("none.pub"))}
    result = run("keys", "trust-admin", "--db", str(device), *[a.format(**paths) for a in args])
    assert result.exit_code == 2, result.output
    assert message in result.output
    with QueueManager(device) as qm:
        assert qm.admin_keys() == []


def test_untrusting_an_unknown_key_says_which_are_trusted(device: Path, pub: Path) -> None:
    run("keys", "trust-admin", "--db", str(device), "ops", str(pub))
    result = run("keys", "untrust-admin", "--db", str(device), "opz")
    assert result.exit_code == 1 and "admin key opz is not trusted here (trusted: ops)" in result.output
    assert run("keys", "untrust-admin", "--db", str(device), "bad id").exit_code == 2


def test_a_missing_store_is_an_error_not_created(tmp_path: Path, pub: Path) -> None:
    result = run("keys", "admin-list", "--db", str(tmp_path / "nope.db"))
    assert result.exit_code == 1 and "does not exist" in result.output
    assert not (tmp_path / "nope.db").exists()

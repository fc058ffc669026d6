"""``edgeq server token`` and ``set-console-password --role``, as real CLI subprocesses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from edgeq import QueueManager
from edgeq.sync.server.api.tokens import find_token
from edgeq.sync.server.console.auth import load_credential

EDGEQ = [sys.executable, "-m", "edgeq"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*EDGEQ, *args], capture_output=True, text=True, timeout=60)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    QueueManager(tmp_path / "home.db", name="HOME").close()
    return tmp_path / "home.db"


def test_a_token_is_printed_once_listed_and_revoked_once(home: Path) -> None:
    made = run("server", "token", "create", "--name", "grafana", "--role", "viewer", "--db", str(home))
    assert made.returncode == 0 and "shown this once" in made.stderr
    found = find_token(home, made.stdout.strip())
    assert found is not None and (found.name, found.role) == ("grafana", "viewer")
    listed = run("server", "token", "list", "--db", str(home)).stdout
    assert "grafana" in listed and "viewer" in listed and made.stdout.strip() not in listed
    revoke = ("server", "token", "revoke", "grafana", "--db", str(home))
    assert run(*revoke).stdout == "Revoked token 'grafana'.\n"
    assert "already revoked; nothing changed" in run(*revoke).stdout
    assert find_token(home, made.stdout.strip()) is None
    unknown = run("server", "token", "revoke", "nobody", "--db", str(home))
    assert unknown.returncode == 1 and "there is no token named 'nobody'" in unknown.stderr


def test_a_bad_name_is_refused_and_nothing_made(home: Path) -> None:
    bad = run("server", "token", "create", "--name", "no good", "--db", str(home))
    assert bad.returncode == 1 and "is not a token name" in bad.stderr
    assert "No tokens" in run("server", "token", "list", "--db", str(home)).stdout


def test_the_console_password_can_be_a_viewer_s(home: Path, tmp_path: Path) -> None:
    (tmp_path / "pw").write_text("viewer-pass-1\n")
    done = run("server", "set-console-password", "--password-file", str(tmp_path / "pw"), "--role", "viewer",
               "--db", str(home))
    assert done.returncode == 0 and "account 'viewer' (viewer)" in done.stdout
    cred = load_credential(home, account="viewer")
    assert cred is not None and cred.role == "viewer"


def test_console_accounts_are_added_listed_and_removed(home: Path, tmp_path: Path) -> None:
    (tmp_path / "pw").write_text("alice-pass-1\n")
    for name, role in (("alice", "operator"), ("bob", "viewer")):
        done = run("server", "console-user", "add", name, "--role", role, "--password-file",
                   str(tmp_path / "pw"), "--db", str(home))
        assert done.returncode == 0 and f"Console account '{name}' ({role}) added" in done.stdout, done.stderr
    again = run("server", "console-user", "add", "alice", "--password-file", str(tmp_path / "pw"), "--db",
                str(home))
    assert again.returncode == 1 and "exists already" in again.stderr
    listed = run("server", "console-user", "list", "--json", "--db", str(home))
    assert json.loads(listed.stdout) == [{"name": "alice", "role": "operator"},
                                         {"name": "bob", "role": "viewer"}]
    assert "alice-pass-1" not in listed.stdout
    assert run("server", "console-user", "remove", "bob", "--db", str(home)).returncode == 0
    gone = run("server", "console-user", "remove", "bob", "--db", str(home))
    assert gone.returncode == 1 and "no console account named 'bob'" in gone.stderr
    cred = load_credential(home, account="alice")
    assert cred is not None and cred.verify("alice-pass-1") and load_credential(home, account="bob") is None

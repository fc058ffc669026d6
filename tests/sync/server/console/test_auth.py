"""edgeq.sync.server.console.auth: named accounts, a password and a role each; their sessions; a store's
one password from before accounts still signing in."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest

from edgeq import QueueManager
from edgeq.errors import EdgeqError
from edgeq.sync.server.console.auth import (
    ACCOUNT_PREFIX,
    PASSWORD_KEY,
    ROLE_KEY,
    SECRET_KEY,
    Account,
    AccountExists,
    add_account,
    list_accounts,
    load_credential,
    remove_account,
    set_password,
)

NOW = 1_700_000_000_000


@pytest.fixture
def home(tmp_path: Path) -> Path:
    QueueManager(tmp_path / "home.db", name="HOME").close()
    return tmp_path / "home.db"


def legacy_password(path: Path, password: str, role: str | None = None) -> None:
    """Store ``password`` as edgeq did before accounts: one hash, one secret, maybe a role."""
    salt = bytes(range(16))
    digest = hashlib.scrypt(password.encode(), salt=salt, n=2**14, r=8, p=1, maxmem=2**26, dklen=32)
    rows = [(PASSWORD_KEY, f"scrypt$16384$8$1${salt.hex()}${digest.hex()}"), (SECRET_KEY, "ab" * 32)]
    with sqlite3.connect(path) as conn:
        conn.executemany("INSERT INTO edgeq_meta (key, value) VALUES (?, ?)",
                         rows + ([(ROLE_KEY, role)] if role else []))


def _session(path: Path, name: str) -> str:
    cred = load_credential(path, account=name)
    assert cred is not None
    return cred.new_session(now_ms=NOW)


def _valid(path: Path, token: str) -> bool:
    cred = load_credential(path, token)
    return cred is not None and cred.session_valid(token, now_ms=NOW + 1)


def test_each_account_has_its_own_password_role_and_sessions(home: Path) -> None:
    add_account(home, "alice", "alice-pass-1", "operator")
    add_account(home, "bob", "bob-pass-12", "viewer")
    assert list_accounts(home) == [Account("alice", "operator"), Account("bob", "viewer")]
    alice, bob = load_credential(home, account="alice"), load_credential(home, account="bob")
    assert alice is not None and bob is not None
    assert alice.verify("alice-pass-1") and not alice.verify("bob-pass-12") and bob.verify("bob-pass-12")
    assert (alice.role, bob.role) == ("operator", "viewer")
    a, b = _session(home, "alice"), _session(home, "bob")
    assert _valid(home, a) and _valid(home, b)
    assert not bob.session_valid(a, now_ms=NOW + 1)  # alice's session is not bob's
    forged = "bob:" + a.partition(":")[2]  # alice's token, renamed: bob's secret did not sign it
    assert not _valid(home, forged)
    assert load_credential(home, account="carol") is None


def test_an_account_is_added_once_and_a_new_password_ends_its_sessions(home: Path) -> None:
    add_account(home, "alice", "alice-pass-1", "operator")
    token = _session(home, "alice")
    with pytest.raises(AccountExists, match="named 'alice' exists already"):
        add_account(home, "alice", "other-pass-1", "viewer")
    assert _valid(home, token)  # the refused add changed nothing
    add_account(home, "alice", "other-pass-1", "viewer", replace=True)
    cred = load_credential(home, account="alice")
    assert cred is not None and cred.verify("other-pass-1") and cred.role == "viewer"
    assert not _valid(home, token)


def test_a_removed_accounts_sessions_stop_working(home: Path) -> None:
    add_account(home, "alice", "alice-pass-1", "operator")
    add_account(home, "bob", "bob-pass-12", "viewer")
    alice, bob = _session(home, "alice"), _session(home, "bob")
    assert remove_account(home, "alice") and not remove_account(home, "alice")
    assert not _valid(home, alice) and _valid(home, bob)
    assert list_accounts(home) == [Account("bob", "viewer")]


def test_names_passwords_and_roles_are_checked(home: Path) -> None:
    with pytest.raises(EdgeqError, match="is not an account name"):
        add_account(home, "a:b", "long-enough-1", "viewer")
    with pytest.raises(EdgeqError, match="at least 8 characters"):
        add_account(home, "alice", "short", "viewer")
    with pytest.raises(EdgeqError, match="role must be one of viewer, operator, not 'admin'"):
        add_account(home, "alice", "long-enough-1", "admin")  # type: ignore[arg-type]
    assert list_accounts(home) == []


def test_set_console_password_sets_the_account_named_after_its_role(home: Path) -> None:
    set_password(home, "password-1")
    set_password(home, "password-2", "viewer")
    assert list_accounts(home) == [Account("operator", "operator"), Account("viewer", "viewer")]
    cred = load_credential(home, account="operator")
    assert cred is not None and cred.verify("password-1")


@pytest.mark.parametrize(("role", "name"), [(None, "operator"), ("viewer", "viewer")])
def test_a_password_from_before_accounts_signs_in_as_the_account_its_role_names(
    home: Path, role: str | None, name: str
) -> None:
    legacy_password(home, "an-old-password", role)
    assert list_accounts(home) == [Account(name, "viewer" if role else "operator")]
    cred = load_credential(home, account=name)
    assert cred is not None and cred.verify("an-old-password")
    token = _session(home, name)
    assert _valid(home, token)
    add_account(home, name, "a-new-password", "operator", replace=True)  # it becomes an account like others
    with sqlite3.connect(home) as conn:
        assert conn.execute("SELECT count(*) FROM edgeq_meta WHERE key IN (?, ?, ?)",
                            (PASSWORD_KEY, SECRET_KEY, ROLE_KEY)).fetchone() == (0,)
    assert not _valid(home, token) and list_accounts(home) == [Account(name, "operator")]
    assert remove_account(home, name) and list_accounts(home) == []


def test_a_role_edgeq_never_writes_reads_as_damage(home: Path) -> None:
    add_account(home, "alice", "password-1", "operator")
    with sqlite3.connect(home) as conn:
        conn.execute("UPDATE edgeq_meta SET value = replace(value, 'operator', 'root') WHERE key = ?",
                     (ACCOUNT_PREFIX + "alice",))
    with pytest.raises(EdgeqError, match="'alice' stored in the server's store is damaged: set its password"):
        load_credential(home, account="alice")

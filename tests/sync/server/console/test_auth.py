"""edgeq.sync.server.console.auth: the console's password has a role, the operator's unless said."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from edgeq import QueueManager
from edgeq.errors import EdgeqError
from edgeq.sync.server.console.auth import ROLE_KEY, load_credential, set_password


@pytest.fixture
def home(tmp_path: Path) -> Path:
    QueueManager(tmp_path / "home.db", name="HOME").close()
    return tmp_path / "home.db"


def test_a_password_is_the_operators_unless_given_another_role(home: Path) -> None:
    set_password(home, "password-1")
    assert (cred := load_credential(home)) is not None and cred.role == "operator"
    set_password(home, "password-2", "viewer")
    assert (cred := load_credential(home)) is not None and cred.role == "viewer"
    with pytest.raises(EdgeqError, match="role must be one of viewer, operator, not 'admin'"):
        set_password(home, "password-3", "admin")  # type: ignore[arg-type]


def test_a_role_edgeq_never_writes_reads_as_damage(home: Path) -> None:
    set_password(home, "password-1")
    with sqlite3.connect(home) as conn:
        conn.execute("UPDATE edgeq_meta SET value = 'root' WHERE key = ?", (ROLE_KEY,))
    with pytest.raises(EdgeqError, match="is damaged: set it again"):
        load_credential(home)

"""API tokens: ``edgeq_<id>_<secret>``, a role each; the store keeps the secret's sha256, never the
secret (docs/security.md, "API tokens").

>>> import tempfile, os
>>> from edgeq import QueueManager
>>> path = os.path.join(tempfile.mkdtemp(), "home.db")
>>> QueueManager(path, name="HOME").close()
>>> token, text = create_token(path, "grafana", "viewer", now_ms=1_000)
>>> find_token(path, text) == token, find_token(path, text[:-1] + "x")
(True, None)
>>> revoke_token(path, "grafana", now_ms=2_000), find_token(path, text)
(True, None)
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from edgeq.errors import EdgeqError
from edgeq.store.opening import connect
from edgeq.sync.server.console.auth import ROLES, Role

__all__ = ["ApiToken", "TokenExists", "create_token", "find_token", "list_tokens", "revoke_token"]

_TOKEN = re.compile(r"edgeq_([0-9a-f]{16})_([0-9a-f]{64})")
_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")
_COLS = "id, name, role, created_ms, revoked_ms"


class TokenExists(EdgeqError):
    """A token of that name exists already (revoked or not: a name says who acted, in the record)."""


@dataclass(frozen=True, slots=True)
class ApiToken:
    """A token as stored, without its secret."""

    id: str
    name: str
    role: Role
    created_ms: int
    revoked_ms: int | None = None


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def create_token(path: str | Path, name: str, role: Role, *, now_ms: int) -> tuple[ApiToken, str]:
    """A new token named ``name`` with ``role`` in the store at ``path``: it and its text (shown once)."""
    if not _NAME.fullmatch(name):
        raise EdgeqError(f"{name!r} is not a token name: 1 to 64 letters, digits, '.', '_' or '-', "
                         "e.g. grafana")
    if role not in ROLES:
        raise EdgeqError(f"a token's role is one of {', '.join(ROLES)}, not {role!r}")
    token_id, secret = secrets.token_hex(8), secrets.token_hex(32)
    with closing(connect(path)) as conn:
        done = conn.execute(
            "INSERT INTO api_tokens (id, name, role, digest, created_ms) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT DO NOTHING", (token_id, name, role, _digest(secret), now_ms))
    if not done.rowcount:
        raise TokenExists(f"a token named {name!r} exists already: give another --name (see edgeq server "
                          "token list)")
    return ApiToken(token_id, name, role, now_ms), f"edgeq_{token_id}_{secret}"


def list_tokens(path: str | Path) -> list[ApiToken]:
    """Every token of the store at ``path``, revoked ones too, by name."""
    with closing(connect(path, read_only=True)) as conn:
        return [ApiToken(*row) for row in conn.execute(f"SELECT {_COLS} FROM api_tokens ORDER BY name")]


def revoke_token(path: str | Path, name: str, *, now_ms: int) -> bool:
    """Revoke the token named ``name``: False if there is none, or it was revoked already."""
    with closing(connect(path)) as conn:
        return conn.execute("UPDATE api_tokens SET revoked_ms = ? WHERE name = ? AND revoked_ms IS NULL",
                            (now_ms, name)).rowcount > 0


def find_token(path: str | Path, text: str) -> ApiToken | None:
    """The unrevoked token ``text`` is (its secret compared in constant time), or None."""
    match = _TOKEN.fullmatch(text)
    if match is None:
        return None
    with closing(connect(path, read_only=True)) as conn:
        row = conn.execute(f"SELECT {_COLS}, digest FROM api_tokens WHERE id = ? AND revoked_ms IS NULL",
                           (match[1],)).fetchone()
    if row is None or not hmac.compare_digest(_digest(match[2]), str(row[5])):
        return None
    return ApiToken(*row[:5])

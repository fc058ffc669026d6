"""The operator console's credential and sessions, kept in the server's own store.

The password is stored as a salted scrypt hash under ``console.password`` in
``edgeq_meta`` (key/value: no migration), beside ``console.secret``, the key that
signs session cookies. Both live in the store, not in process memory, so every
``edgeq serve --workers N`` process accepts the same sessions, and setting a new
password (a new secret) logs every session out.

>>> import tempfile, os
>>> from edgeq import QueueManager
>>> path = os.path.join(tempfile.mkdtemp(), "home.db")
>>> QueueManager(path, name="HOME").close()
>>> load_credential(path) is None
True
>>> set_password(path, "correct horse")
>>> cred = load_credential(path)
>>> cred.verify("correct horse"), cred.verify("wrong")
(True, False)
>>> token = cred.new_session(now_ms=1_000)
>>> cred.session_valid(token, now_ms=2_000), cred.session_valid(token + "x", now_ms=2_000)
(True, False)
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from edgeq.errors import EdgeqError

__all__ = ["ConsoleCredential", "NoConsolePassword", "load_credential", "set_password"]

PASSWORD_KEY, SECRET_KEY = "console.password", "console.secret"
#: scrypt's cost: ~16 MiB and tens of ms per check, dear for a guesser, cheap for a login
_N, _R, _P = 2**14, 8, 1
#: how long a login lasts
SESSION_MS = 12 * 3600 * 1000
MIN_PASSWORD_CHARS = 8


class NoConsolePassword(EdgeqError):
    """The console was asked for, but no operator password is set in the store."""


def _hash(password: str, salt: bytes, n: int = _N, r: int = _R, p: int = _P) -> bytes:
    return hashlib.scrypt(password.encode(), salt=salt, n=n, r=r, p=p, maxmem=64 * 1024 * 1024, dklen=32)


def set_password(path: str | Path, password: str) -> None:
    """Store ``password``'s salted scrypt hash in the store at ``path``, and a new
    session secret (so sessions signed with the old one end)."""
    if len(password) < MIN_PASSWORD_CHARS:
        raise EdgeqError(f"the console password must have at least {MIN_PASSWORD_CHARS} characters")
    salt = os.urandom(16)
    stored = f"scrypt${_N}${_R}${_P}${salt.hex()}${_hash(password, salt).hex()}"
    with _connect(path) as conn:
        for key, value in ((PASSWORD_KEY, stored), (SECRET_KEY, secrets.token_hex(32))):
            conn.execute("INSERT INTO edgeq_meta (key, value) VALUES (?, ?) "
                         "ON CONFLICT (key) DO UPDATE SET value = excluded.value", (key, value))
    conn.close()


def load_credential(path: str | Path) -> ConsoleCredential | None:
    """The console credential stored at ``path``, or None if no password was set."""
    conn = _connect(path)
    try:
        rows = dict(conn.execute("SELECT key, value FROM edgeq_meta WHERE key IN (?, ?)",
                                 (PASSWORD_KEY, SECRET_KEY)).fetchall())
    finally:
        conn.close()
    if PASSWORD_KEY not in rows or SECRET_KEY not in rows:
        return None
    try:
        scheme, n, r, p, salt, digest = str(rows[PASSWORD_KEY]).split("$")
        if scheme != "scrypt":
            raise ValueError(scheme)
        return ConsoleCredential(int(n), int(r), int(p), bytes.fromhex(salt), bytes.fromhex(digest),
                                 bytes.fromhex(str(rows[SECRET_KEY])))
    except ValueError:
        raise EdgeqError(f"the console password stored in {path} is damaged: set it again with "
                         f"`edgeq server set-console-password --db {path}`") from None


def _connect(path: str | Path) -> sqlite3.Connection:
    return sqlite3.connect(path, timeout=10)


@dataclass(frozen=True)
class ConsoleCredential:
    """The operator's password hash and the session-signing secret."""

    n: int
    r: int
    p: int
    salt: bytes
    digest: bytes
    secret: bytes

    def verify(self, password: str) -> bool:
        """Whether ``password`` is the operator's (constant-time comparison)."""
        return hmac.compare_digest(_hash(password, self.salt, self.n, self.r, self.p), self.digest)

    def _sign(self, text: str) -> str:
        return hmac.new(self.secret, text.encode(), hashlib.sha256).hexdigest()

    def new_session(self, *, now_ms: int) -> str:
        """A signed session token, valid for :data:`SESSION_MS` from ``now_ms``."""
        body = f"{now_ms + SESSION_MS}.{secrets.token_hex(16)}"
        return f"{body}.{self._sign(body)}"

    def session_valid(self, token: str | None, *, now_ms: int) -> bool:
        """Whether ``token`` is a session this secret signed and that has not ended."""
        if not token or token.count(".") != 2:
            return False
        body, _, mac = token.rpartition(".")
        if not hmac.compare_digest(self._sign(body), mac):
            return False
        expires = body.partition(".")[0]
        return expires.isdigit() and int(expires) > now_ms

    def csrf_token(self, session: str) -> str:
        """The CSRF token a form posted within ``session`` must carry."""
        return self._sign("csrf:" + session)

"""The operator console's credential and sessions, in the server's store so every process shares
them (docs/console.md, "Sign-in").

>>> import tempfile, os
>>> from edgeq import QueueManager
>>> path = os.path.join(tempfile.mkdtemp(), "home.db")
>>> QueueManager(path, name="HOME").close()
>>> set_password(path, "correct horse")
>>> cred = load_credential(path)
>>> token = cred.new_session(now_ms=1_000)
>>> cred.verify("wrong"), cred.session_valid(token, now_ms=2_000)
(False, True)
>>> revoke_session(path, token, now_ms=2_000); load_credential(path, token).session_valid(token, now_ms=2_000)
False
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal, TypeAlias, get_args

from edgeq.errors import EdgeqError
from edgeq.store.opening import connect

__all__ = ["ROLES", "ConsoleCredential", "NoConsolePassword", "Role", "load_credential", "revoke_session",
           "set_password"]

#: What a person or script may do: a ``viewer`` reads, an ``operator`` reads and acts (docs/security.md).
Role: TypeAlias = Literal["viewer", "operator"]
ROLES: Final[tuple[Role, ...]] = get_args(Role)
PASSWORD_KEY, SECRET_KEY, ROLE_KEY = "console.password", "console.secret", "console.role"
#: the prefix of a revoked session's key in ``edgeq_meta`` (its value: when it would have ended)
REVOKED_PREFIX = "console.revoked."
#: scrypt's cost: ~16 MiB and tens of ms per check, dear for a guesser, cheap for a login
_N, _R, _P = 2**14, 8, 1
#: how long a login lasts
SESSION_MS = 12 * 3600 * 1000
MIN_PASSWORD_CHARS = 8


class NoConsolePassword(EdgeqError):
    """The console was asked for, but no operator password is set in the store."""


def _hash(password: str, salt: bytes, n: int = _N, r: int = _R, p: int = _P) -> bytes:
    return hashlib.scrypt(password.encode(), salt=salt, n=n, r=r, p=p, maxmem=64 * 1024 * 1024, dklen=32)


def set_password(path: str | Path, password: str, role: Role = "operator") -> None:
    """Store ``password``'s salted scrypt hash and its ``role`` in the store at ``path``, and a new
    session secret (so sessions signed with the old one end)."""
    if len(password) < MIN_PASSWORD_CHARS:
        raise EdgeqError(f"the console password must have at least {MIN_PASSWORD_CHARS} characters")
    if role not in ROLES:
        raise EdgeqError(f"the console's role must be one of {', '.join(ROLES)}, not {role!r}")
    salt = os.urandom(16)
    stored = f"scrypt${_N}${_R}${_P}${salt.hex()}${_hash(password, salt).hex()}"
    with closing(connect(path)) as conn:  # one statement: both or neither
        conn.execute("INSERT INTO edgeq_meta (key, value) VALUES (?, ?), (?, ?), (?, ?) "
                     "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                     (PASSWORD_KEY, stored, SECRET_KEY, secrets.token_hex(32), ROLE_KEY, role))


def load_credential(path: str | Path, session: str | None = None) -> ConsoleCredential | None:
    """The console credential stored at ``path``, or None if no password was set; with the
    ``session`` token a request carries, whether it was revoked (``revoked``), in the same query.
    A password set before roles existed is the operator's."""
    revoked = REVOKED_PREFIX + _session_id(session)
    with closing(connect(path)) as conn:
        rows = dict(conn.execute("SELECT key, value FROM edgeq_meta WHERE key IN (?, ?, ?, ?)",
                                 (PASSWORD_KEY, SECRET_KEY, ROLE_KEY, revoked)).fetchall())
    if PASSWORD_KEY not in rows or SECRET_KEY not in rows:
        return None
    try:
        scheme, n, r, p, salt, digest = str(rows[PASSWORD_KEY]).split("$")
        role = rows.get(ROLE_KEY, "operator")
        if scheme != "scrypt" or role not in ROLES:
            raise ValueError(scheme)
        return ConsoleCredential(int(n), int(r), int(p), bytes.fromhex(salt), bytes.fromhex(digest),
                                 bytes.fromhex(str(rows[SECRET_KEY])), revoked in rows, role)
    except ValueError:
        raise EdgeqError(f"the console password stored in {path} is damaged: set it again with "
                         f"`edgeq server set-console-password --db {path}`") from None


def revoke_session(path: str | Path, session: str, *, now_ms: int) -> None:
    """Revoke ``session`` (a token :meth:`ConsoleCredential.new_session` made) until it would
    have ended, and forget the revocations of sessions that have ended since."""
    expires = session.partition(".")[0]
    with closing(connect(path)) as conn:
        conn.execute("INSERT INTO edgeq_meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO NOTHING",
                     (REVOKED_PREFIX + _session_id(session), expires))
        conn.execute("DELETE FROM edgeq_meta WHERE key >= ? AND key < ? AND CAST(value AS INTEGER) <= ?",
                     (REVOKED_PREFIX, REVOKED_PREFIX[:-1] + "/", now_ms))


def _session_id(session: str | None) -> str:
    """The random part of a session token (``expires.id.mac``): what a revocation names."""
    return (session or "").split(".")[1] if (session or "").count(".") == 2 else ""


@dataclass(frozen=True)
class ConsoleCredential:
    """The operator's password hash and the session-signing secret."""

    n: int
    r: int
    p: int
    salt: bytes
    digest: bytes
    secret: bytes
    #: whether the session :func:`load_credential` was asked about was signed out
    revoked: bool = False
    role: Role = "operator"

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
        """Whether ``token`` is a session this secret signed and that has not ended (nor been
        signed out: ``revoked``, for the token :func:`load_credential` was given)."""
        if not token or token.count(".") != 2 or self.revoked:
            return False
        body, _, mac = token.rpartition(".")
        if not hmac.compare_digest(self._sign(body), mac):
            return False
        expires = body.partition(".")[0]
        return expires.isdigit() and int(expires) > now_ms

    def csrf_token(self, session: str) -> str:
        """The CSRF token a form posted within ``session`` must carry."""
        return self._sign("csrf:" + session)

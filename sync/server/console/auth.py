"""The operator console's accounts (a name, a password, a role each) and their sessions, in the server's
store so every process shares them (docs/console.md, "Accounts").

>>> import tempfile, os
>>> from edgeq import QueueManager
>>> path = os.path.join(tempfile.mkdtemp(), "home.db")
>>> QueueManager(path, name="HOME").close()
>>> add_account(path, "alice", "correct horse", "viewer")
>>> cred = load_credential(path, account="alice")
>>> token = cred.new_session(now_ms=1_000)
>>> cred.verify("wrong"), cred.session_valid(token, now_ms=2_000), account_of(token)
(False, True, 'alice')
>>> revoke_session(path, token, now_ms=2_000); load_credential(path, token).session_valid(token, now_ms=2_000)
False
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal, TypeAlias, get_args

from edgeq.errors import EdgeqError
from edgeq.store.opening import connect

__all__ = ["COOKIE", "ROLES", "Account", "AccountExists", "ConsoleCredential", "Role", "account_of",
           "add_account", "dummy_verify", "has_accounts", "list_accounts", "load_credential",
           "remove_account", "revoke_session", "set_password"]

#: What a person or script may do: a ``viewer`` reads, an ``operator`` reads and acts (docs/security.md).
Role: TypeAlias = Literal["viewer", "operator"]
ROLES: Final[tuple[Role, ...]] = get_args(Role)
#: the session cookie's name
COOKIE: Final = "edgeq_console"
#: an account's key in ``edgeq_meta`` is this prefix and its name; its value: role, password hash, secret
ACCOUNT_PREFIX = "console.account."
#: the one password of a store from before accounts: the account named after its role (docs/console.md)
PASSWORD_KEY, SECRET_KEY, ROLE_KEY = "console.password", "console.secret", "console.role"
#: the prefix of a revoked session's key in ``edgeq_meta`` (its value: when it would have ended)
REVOKED_PREFIX = "console.revoked."
#: scrypt's cost: ~16 MiB and tens of ms per check, dear for a guesser, cheap for a login
_N, _R, _P = 2**14, 8, 1
#: how long a login lasts
SESSION_MS = 12 * 3600 * 1000
MIN_PASSWORD_CHARS = 8
_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")


class AccountExists(EdgeqError):
    """A console account of that name exists already."""


@dataclass(frozen=True, slots=True)
class Account:
    """A console account as listed: its name and role (never its password)."""

    name: str
    role: Role


def _hash(password: str, salt: bytes, n: int = _N, r: int = _R, p: int = _P) -> bytes:
    return hashlib.scrypt(password.encode(), salt=salt, n=n, r=r, p=p, maxmem=64 * 1024 * 1024, dklen=32)


def _key(name: str) -> str:
    return ACCOUNT_PREFIX + name


@contextmanager
def _writing(path: str | Path) -> Iterator[sqlite3.Connection]:
    """A connection to the store at ``path`` in one write transaction: all of it or nothing."""
    with closing(connect(path)) as conn:
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")


def add_account(path: str | Path, name: str, password: str, role: Role, *, replace: bool = False) -> None:
    """Store account ``name`` (``password``'s salted scrypt hash, ``role``, a new session secret) at
    ``path``; ``replace``: a new password for an existing one (its sessions end)."""
    if not _NAME.fullmatch(name):
        raise EdgeqError(f"{name[:80]!r} is not an account name: 1 to 64 letters, digits, '.', '_' or '-'")
    if len(password) < MIN_PASSWORD_CHARS:
        raise EdgeqError(f"the console password must have at least {MIN_PASSWORD_CHARS} characters")
    if role not in ROLES:
        raise EdgeqError(f"the console's role must be one of {', '.join(ROLES)}, not {role!r}")
    salt = os.urandom(16)
    hashed = f"scrypt${_N}${_R}${_P}${salt.hex()}${_hash(password, salt).hex()}"
    value = json.dumps({"role": role, "password": hashed, "secret": secrets.token_hex(32)})
    with _writing(path) as conn:
        if not replace and _read(conn, name) is not None:
            raise AccountExists(f"a console account named {name!r} exists already: remove it first, or give "
                                "another name (edgeq server console-user list)")
        _forget_legacy(conn, name)
        conn.execute("INSERT INTO edgeq_meta (key, value) VALUES (?, ?) "
                     "ON CONFLICT (key) DO UPDATE SET value = excluded.value", (_key(name), value))


def set_password(path: str | Path, password: str, role: Role = "operator") -> None:
    """``edgeq server set-console-password``: the password of the account named after ``role``."""
    add_account(path, role, password, role, replace=True)


def remove_account(path: str | Path, name: str) -> bool:
    """Remove account ``name`` (its sessions end at their next request); False if there was none."""
    with _writing(path) as conn:
        gone = conn.execute("DELETE FROM edgeq_meta WHERE key = ?", (_key(name),)).rowcount > 0
        return _forget_legacy(conn, name) or gone


def list_accounts(path: str | Path) -> list[Account]:
    """The store's console accounts, by name."""
    with closing(connect(path, read_only=True)) as conn:
        names = [str(k)[len(ACCOUNT_PREFIX):] for (k,) in conn.execute(
            "SELECT key FROM edgeq_meta WHERE key >= ? AND key < ?",
            (ACCOUNT_PREFIX, ACCOUNT_PREFIX[:-1] + "/"))]
        legacy = _legacy_name(conn)
        found = [_read(conn, n) for n in sorted({*names, *([legacy] if legacy else [])})]
    return [Account(c.name, c.role) for c in found if c is not None]


def has_accounts(path: str | Path) -> bool:
    """Whether anyone can sign in to the console of the store at ``path``."""
    return bool(list_accounts(path))


def load_credential(path: str | Path, session: str | None = None, *,
                    account: str | None = None) -> ConsoleCredential | None:
    """The credential of ``account`` (or of the account ``session`` names), or None if there is no such
    account; with ``session``, whether it was revoked (``revoked``)."""
    name = account if account is not None else account_of(session)
    if name is None:
        return None
    with closing(connect(path, read_only=True)) as conn:
        cred = _read(conn, name)
        revoked = conn.execute("SELECT 1 FROM edgeq_meta WHERE key = ?",
                               (REVOKED_PREFIX + _session_id(session),)).fetchone() is not None
    if cred is None:
        return None
    return ConsoleCredential(cred.name, cred.n, cred.r, cred.p, cred.salt, cred.digest, cred.secret, revoked,
                             cred.role)


def _read(conn: sqlite3.Connection, name: str) -> ConsoleCredential | None:
    """Account ``name`` as stored (a password from before accounts: that of the account its role names)."""
    rows = dict(conn.execute("SELECT key, value FROM edgeq_meta WHERE key IN (?, ?, ?, ?)",
                             (_key(name), PASSWORD_KEY, SECRET_KEY, ROLE_KEY)).fetchall())
    try:
        if _key(name) in rows:
            stored = json.loads(str(rows[_key(name)]))
            password, secret, role = str(stored["password"]), str(stored["secret"]), stored["role"]
        elif _legacy_name(conn) == name:
            password, secret, role = str(rows[PASSWORD_KEY]), str(rows[SECRET_KEY]), name
        else:
            return None
        scheme, n, r, p, salt, digest = password.split("$")
        if scheme != "scrypt" or role not in ROLES:
            raise ValueError(scheme)
        return ConsoleCredential(name, int(n), int(r), int(p), bytes.fromhex(salt), bytes.fromhex(digest),
                                 bytes.fromhex(secret), False, role)
    except (ValueError, KeyError, TypeError):
        raise EdgeqError(f"the console account {name!r} stored in the server's store is damaged: set its "
                         f"password again with `edgeq server console-user add {name} --replace`") from None


def _legacy_name(conn: sqlite3.Connection) -> str | None:
    """The account a password from before accounts is (named after its role: operator unless said)."""
    rows = dict(conn.execute("SELECT key, value FROM edgeq_meta WHERE key IN (?, ?)",
                             (PASSWORD_KEY, ROLE_KEY)).fetchall())
    return None if PASSWORD_KEY not in rows else str(rows.get(ROLE_KEY, "operator"))


def _forget_legacy(conn: sqlite3.Connection, name: str) -> bool:
    """Delete the password from before accounts if it is account ``name``'s; whether it was."""
    if _legacy_name(conn) != name:
        return False
    conn.execute("DELETE FROM edgeq_meta WHERE key IN (?, ?, ?)", (PASSWORD_KEY, SECRET_KEY, ROLE_KEY))
    return True


def revoke_session(path: str | Path, session: str, *, now_ms: int) -> None:
    """Revoke ``session`` (a token :meth:`ConsoleCredential.new_session` made) until it would
    have ended, and forget the revocations of sessions that have ended since."""
    expires = session.partition(":")[2].partition(".")[0]
    with closing(connect(path)) as conn:
        conn.execute("INSERT INTO edgeq_meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO NOTHING",
                     (REVOKED_PREFIX + _session_id(session), expires))
        conn.execute("DELETE FROM edgeq_meta WHERE key >= ? AND key < ? AND CAST(value AS INTEGER) <= ?",
                     (REVOKED_PREFIX, REVOKED_PREFIX[:-1] + "/", now_ms))


def account_of(session: str | None) -> str | None:
    """The account a session token (``name:expires.id.mac``) names, or None if it is not one."""
    name, colon, rest = (session or "").partition(":")
    return name if colon and rest.count(".") == 2 and _NAME.fullmatch(name) else None


def _session_id(session: str | None) -> str:
    """The random part of a session token: what a revocation names."""
    return (session or "").split(".")[1] if account_of(session) else ""


def dummy_verify(password: str) -> bool:
    """A wrong-account sign-in costs what a wrong password does (no clue which names exist)."""
    _hash(password, bytes(16))
    return False


@dataclass(frozen=True)
class ConsoleCredential:
    """An account's password hash, role and session-signing secret."""

    name: str
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
        """Whether ``password`` is this account's (constant-time comparison)."""
        return hmac.compare_digest(_hash(password, self.salt, self.n, self.r, self.p), self.digest)

    def _sign(self, text: str) -> str:
        return hmac.new(self.secret, text.encode(), hashlib.sha256).hexdigest()

    def new_session(self, *, now_ms: int) -> str:
        """A signed session token of this account, valid for :data:`SESSION_MS` from ``now_ms``."""
        body = f"{self.name}:{now_ms + SESSION_MS}.{secrets.token_hex(16)}"
        return f"{body}.{self._sign(body)}"

    def session_valid(self, token: str | None, *, now_ms: int) -> bool:
        """Whether ``token`` is a session of this account its secret signed and that has not ended (nor
        been signed out: ``revoked``, for the token :func:`load_credential` was given)."""
        if account_of(token) != self.name or token is None or self.revoked:
            return False
        body, _, mac = token.rpartition(".")
        if not hmac.compare_digest(self._sign(body), mac):
            return False
        expires = body.partition(":")[2].partition(".")[0]
        return expires.isdigit() and int(expires) > now_ms

    def csrf_token(self, session: str) -> str:
        """The CSRF token a form posted within ``session`` must carry."""
        return self._sign("csrf:" + session)

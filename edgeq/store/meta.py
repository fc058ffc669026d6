"""A store's identity and settings in ``edgeq_meta``: the queue manager's name, the store's
incarnation (part of every uid it issues) and its journal mode. Read once at open."""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import sqlite3
from pathlib import Path

from edgeq.errors import InvalidArgument, NameMismatch, StoreError
from edgeq.names import INCARNATION_SEPARATOR
from edgeq.store.connection import ConnectionFactory
from edgeq.store.damage import damaged
from edgeq.store.journal import JournalSide
from edgeq.store.schema import SCHEMA_VERSION, migrate
from edgeq.types import Clock
from edgeq.uid import new_incarnation

__all__ = ["create_store", "journal_is_explicit", "journal_setting", "name_needed", "open_identity",
           "renew_incarnation"]

_NAME = re.compile(r"[A-Za-z0-9._-]{1,48}")
_INCARNATION = re.compile(r"[a-z0-9]{1,16}")
_JOURNALS = frozenset({"server", "device", "off"})


def name_needed(path: Path) -> InvalidArgument:
    """The error for a new store opened without a name."""
    return InvalidArgument(
        f"{path} is a new store: give the queue manager a name, "
        f"e.g. QueueManager({str(path)!r}, name='DEV1')"
    )


def create_store(path: Path, name: str, clock: Clock, *, timeout: float) -> None:
    """Make a new store named ``name`` at ``path``, whole or not at all (built beside it, then
    linked into place); if another process made ``path`` meanwhile, theirs is kept."""
    if not path.parent.is_dir():
        raise StoreError(
            f"{path}: cannot create the store: check that its directory exists and is writable"
        )
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.new")
    try:
        db = ConnectionFactory(tmp, timeout=timeout)
        try:
            open_identity(db, path, name, clock)
        finally:
            db.close()  # the last connection: SQLite folds its WAL into the file and removes it
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
        except OSError:  # no hard links (FAT): rename, unless one appeared meanwhile
            if not path.exists():
                os.replace(tmp, path)
    except OSError as exc:
        raise StoreError(f"{path}: cannot create the store ({exc.strerror or exc}); check that its "
                         "directory exists and is writable") from exc
    finally:
        for leftover in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm"), Path(f"{tmp}-journal")):
            leftover.unlink(missing_ok=True)


def open_identity(
    db: ConnectionFactory, path: Path, name: str | None, clock: Clock
) -> tuple[str, str]:
    """Migrate, and return the store's (name, origin), made for a new store (``name`` required),
    else checked; a damaged name, incarnation or schema is a damaged store."""
    conn = db.connection()
    (found,) = conn.execute("PRAGMA user_version").fetchone()
    if found > SCHEMA_VERSION:
        raise StoreError(
            f"{path} was written by a newer edgeq (schema {found}; this one knows "
            f"{SCHEMA_VERSION}): upgrade edgeq to open it"
        )
    migrated = migrate(conn) < SCHEMA_VERSION
    with db.write() as tx:
        meta = dict(tx.execute(
            "SELECT key, value FROM edgeq_meta WHERE key IN ('name', 'incarnation', 'schema')"
        ))
        stored = meta.get("name")
        if stored is None:
            if name is None:
                raise name_needed(path)
            tx.execute("INSERT INTO edgeq_meta (key, value) VALUES ('name', ?)", (name,))
            tx.execute("INSERT INTO edgeq_meta (key, value) VALUES ('created_ms', ?)", (str(clock()),))
            stored = name
        if "incarnation" not in meta:
            # Drawn once per store file (a store made by an older edgeq gets one on
            # first open): every uid it issues from now on carries it.
            meta["incarnation"] = new_incarnation()
            tx.execute(
                "INSERT INTO edgeq_meta (key, value) VALUES ('incarnation', ?)", (meta["incarnation"],)
            )
        _check_schema(tx, meta.get("schema"), renew=migrated)
    if not (isinstance(stored, str) and _NAME.fullmatch(stored)):
        raise damaged(f"its queue manager name {stored!r} is not a name edgeq writes", conn)
    incarnation = meta["incarnation"]
    if not (isinstance(incarnation, str) and _INCARNATION.fullmatch(incarnation)):
        raise damaged(
            f"its incarnation {incarnation!r} (part of every uid it issues) is unreadable", conn
        )
    if name is not None and name != stored:
        raise NameMismatch(
            f"{path} belongs to queue manager {stored!r}, not {name!r}: "
            f"open it with name={stored!r} (or name=None), or use another file"
        )
    return stored, f"{stored}{INCARNATION_SEPARATOR}{incarnation}"


def renew_incarnation(conn: sqlite3.Connection, name: str, above: int) -> str:
    """Draw a new incarnation, the stamp clock raised to at least ``above``; return the new origin.
    Processes that opened the store before keep the old one until they reopen it."""
    token = new_incarnation()
    conn.execute("UPDATE edgeq_meta SET value = ? WHERE key = 'incarnation'", (token,))
    conn.execute("UPDATE edgeq_clock SET stamp = max(stamp, ?) WHERE id = 1", (above,))
    return f"{name}{INCARNATION_SEPARATOR}{token}"


def _schema_digest(conn: sqlite3.Connection) -> str:
    """A digest of every table and index definition (not their place: a rebuilt index moves)."""
    rows = conn.execute(
        "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_stat%' "
        "ORDER BY type, name"
    ).fetchall()
    return hashlib.sha256(repr(rows).encode()).hexdigest()[:32]


def _check_schema(conn: sqlite3.Connection, kept: str | None, *, renew: bool) -> None:
    """Compare the schema with the digest kept since it was last migrated (or keep one)."""
    digest = _schema_digest(conn)
    if kept is None or renew:
        conn.execute("INSERT OR REPLACE INTO edgeq_meta (key, value) VALUES ('schema', ?)", (digest,))
    elif kept != digest:
        raise damaged(
            "its schema (the definitions of its tables and indexes) is not the one edgeq wrote", conn
        )


def journal_setting(db: ConnectionFactory, journal: str | None) -> JournalSide | None:
    """The store's journal mode, given once and kept; never given, ``"device"`` as soon as the
    store has a remote or home-server queue."""
    with db.write() as conn:
        if journal is not None:
            conn.execute(
                "INSERT OR REPLACE INTO edgeq_meta (key, value) VALUES ('journal', ?)", (journal,)
            )
            stored = journal
        else:
            row = conn.execute("SELECT value FROM edgeq_meta WHERE key = 'journal'").fetchone()
            if row is not None:
                stored = row[0]
            else:
                synced = conn.execute(
                    "SELECT 1 FROM queues WHERE kind IN ('remote', 'home') LIMIT 1"
                ).fetchone()
                stored = "off" if synced is None else "device"
        if stored not in _JOURNALS:
            raise damaged(f"its journal setting {stored!r} is not one edgeq writes", conn)
    return "server" if stored == "server" else "device" if stored == "device" else None


def journal_is_explicit(db: ConnectionFactory) -> bool:
    """Whether the store was given a journal setting (else it follows its queues)."""
    with db.read() as conn:
        return conn.execute("SELECT 1 FROM edgeq_meta WHERE key = 'journal'").fetchone() is not None

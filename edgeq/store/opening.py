"""Opening a store file: recognising it before anything is written, opening it read-only where this
user cannot write it, and sqlite3's errors in edgeq's words."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from edgeq.errors import StoreBusy, StoreError, StoreReadOnly
from edgeq.store.damage import damaged

__all__ = ["APPLICATION_ID", "check_foreign", "connect", "is_damage", "open_address", "store_error"]

#: ``PRAGMA application_id`` of every edgeq database: "EDGQ".
APPLICATION_ID = 0x45444751
_SQLITE_MAGIC = b"SQLite format 3\x00"

#: What SQLite says when the file's bytes are not what it wrote (and the sqlite3 module
#: when a text value is not UTF-8): damage, never a caller's mistake.
_DAMAGE = ("malformed", "not a database", "could not decode", "codec can't decode", "corrupt")


def is_damage(exc: BaseException) -> bool:
    """Whether a sqlite3 (or text decoding) error means the file is damaged.

    >>> is_damage(sqlite3.DatabaseError("database disk image is malformed"))
    True
    """
    text = str(exc).lower()
    return isinstance(exc, UnicodeDecodeError) or any(word in text for word in _DAMAGE)


def store_error(exc: sqlite3.Error | UnicodeDecodeError, path: str) -> StoreError:
    """Translate a sqlite3 error into edgeq's vocabulary."""
    text = str(exc)
    if is_damage(exc):
        return damaged(f"SQLite cannot read it ({text})", path=path)
    if "readonly" in text or "read-only" in text:
        return StoreReadOnly(
            f"{path} is read-only here ({read_only_reason(Path(path))}), and this needs to write to it: "
            "commands that only read it (depth, browse, queue list, sync status) work; to change it, run "
            "as a user who may write the file and its directory"
        )
    if "locked" in text or "busy" in text:
        return StoreBusy(
            f"{path}: the database stayed locked by another connection past the busy "
            f"timeout ({text}); retry, or raise QueueManager(timeout=...)"
        )
    return StoreError(f"{path}: the SQLite store failed: {text}")


def read_only_reason(path: Path) -> str:
    """Why this user cannot write the store at ``path``, in a few words."""
    try:
        if os.statvfs(path).f_flag & os.ST_RDONLY:
            return "its filesystem is mounted read-only"
        if not os.access(path, os.W_OK):
            return f"the file is not writable by this user (mode {path.stat().st_mode & 0o777:o})"
    except OSError as exc:
        return f"it cannot be examined: {exc.strerror or exc}"
    if not os.access(path.parent, os.W_OK | os.X_OK):
        return (f"its directory {path.parent} is not writable by this user, and SQLite keeps its write-ahead "
                f"log beside the file ({path.name}-wal, {path.name}-shm)")
    return "SQLite opened it read-only"


def open_address(path: str) -> tuple[str, bool]:
    """What to give ``sqlite3.connect`` for ``path``, and whether it is a read-only URI (not writable)."""
    file = Path(path)
    if not file.is_file() or (os.access(file, os.W_OK) and os.access(file.parent, os.W_OK | os.X_OK)):
        return path, False
    uri = f"{file.resolve().as_uri()}?mode=ro"
    wal, shm = Path(f"{path}-wal"), Path(f"{path}-shm")
    if not os.access(file.parent, os.W_OK | os.X_OK) and not wal.exists() and not shm.exists():
        uri += "&immutable=1"  # nobody writes it through a log: the file alone is the whole truth
    return uri, True


def connect(path: str | Path, *, read_only: bool = False, wal: bool = False,
            timeout: float = 10.0) -> sqlite3.Connection:
    """A connection outside a factory (the console, ``edgeq export``, the nonce file): autocommit;
    ``read_only`` by URI; ``wal``: WAL at ``synchronous=NORMAL``."""
    address = str(path)
    if read_only:  # where this user cannot write, open_address knows how SQLite may still read it
        found, unwritable = open_address(address)
        address = found if unwritable else f"{Path(path).resolve().as_uri()}?mode=ro"
    conn = sqlite3.connect(address, timeout=timeout, isolation_level=None, check_same_thread=False,
                           uri=read_only)
    if wal:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
        except BaseException:
            conn.close()
            raise
    return conn


def check_foreign(path: Path, *, newest: int | None = None) -> bool:
    """Refuse (:class:`StoreError`, file untouched) a file that is not SQLite, another application's,
    unreadable, or of a schema newer than ``newest``; True if it is a fresh database."""
    if not path.exists() or path.stat().st_size == 0:
        return True
    if path.is_dir():
        raise StoreError(f"{path} is a directory: give the path of a database file")
    with path.open("rb") as fh:
        header = fh.read(100)
    if header[: len(_SQLITE_MAGIC)] != _SQLITE_MAGIC:
        raise StoreError(
            f"{path} is not a SQLite database (it may be another kind of file); "
            "edgeq refuses to touch it: choose another path"
        )
    # Without a WAL the header is the whole truth, read without a connection (even a
    # read-only one leaves -wal and -shm files).
    app_id, version = int.from_bytes(header[68:72], "big"), int.from_bytes(header[60:64], "big")
    tables = -1
    if app_id != APPLICATION_ID or Path(f"{path}-wal").exists():
        try:
            conn = connect(path, read_only=True)
            try:
                app_id = conn.execute("PRAGMA application_id").fetchone()[0]
                version = conn.execute("PRAGMA user_version").fetchone()[0]
                tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
            finally:
                conn.close()
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:  # sqlite3 decodes damaged text too
            raise StoreError(
                f"{path} cannot be read as a SQLite database ({exc}); it may be corrupt. "
                "edgeq left it untouched: restore it from a backup or choose another path"
            ) from exc
    if app_id == APPLICATION_ID:
        if version == 0:
            raise damaged(
                "it is marked as an edgeq store but has no schema version (edgeq left it untouched)",
                path=str(path),
            )
        if newest is not None and version > newest:
            raise StoreError(
                f"{path} was written by a newer edgeq (schema {version}; this one knows "
                f"{newest}): upgrade edgeq to open it (it was left untouched)"
            )
        return False
    if tables == 0 and app_id == 0:
        return True  # an empty SQLite file: nothing to lose
    raise StoreError(
        f"{path} is a SQLite database of another application (application_id={app_id}, "
        f"{tables} schema objects); edgeq refuses to touch it: choose another path"
    )

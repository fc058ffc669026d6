"""A store's identity and settings, kept in its ``edgeq_meta`` table: the queue
manager's name, the store's incarnation (part of every uid it issues, see
:mod:`edgeq.uid`) and its journal mode. Read once when a store is opened."""

from __future__ import annotations

from pathlib import Path

from edgeq.connection import ConnectionFactory
from edgeq.errors import InvalidArgument, NameMismatch, StoreError
from edgeq.journal import JournalSide
from edgeq.names import INCARNATION_SEPARATOR, check_origin
from edgeq.schema import SCHEMA_VERSION, migrate
from edgeq.types import Clock
from edgeq.uid import new_incarnation

__all__ = ["journal_is_explicit", "journal_setting", "open_identity"]


def open_identity(db: ConnectionFactory, path: Path, name: str | None, clock: Clock) -> tuple[str, str]:
    """Bring the schema up to date and return the store's (name, origin), creating
    them for a new store (``name`` is then required) and checking ``name`` otherwise."""
    conn = db.connection()
    (found,) = conn.execute("PRAGMA user_version").fetchone()
    if found > SCHEMA_VERSION:
        raise StoreError(
            f"{path} was written by a newer edgeq (schema {found}; this one knows "
            f"{SCHEMA_VERSION}): upgrade edgeq to open it"
        )
    migrate(conn)
    with db.write() as tx:
        meta = dict(tx.execute("SELECT key, value FROM edgeq_meta WHERE key IN ('name', 'incarnation')"))
        stored = meta.get("name")
        if stored is None:
            if name is None:
                raise InvalidArgument(
                    f"{path} is a new store: give the queue manager a name, "
                    f"e.g. QueueManager({str(path)!r}, name='DEV1')"
                )
            tx.execute("INSERT INTO edgeq_meta (key, value) VALUES ('name', ?)", (name,))
            tx.execute("INSERT INTO edgeq_meta (key, value) VALUES ('created_ms', ?)", (str(clock()),))
            stored = name
        if "incarnation" not in meta:
            # Drawn once per store file (a store made by an older edgeq gets one on
            # first open): every uid it issues from now on carries it.
            meta["incarnation"] = new_incarnation()
            tx.execute("INSERT INTO edgeq_meta (key, value) VALUES ('incarnation', ?)", (meta["incarnation"],))
    if name is not None and name != stored:
        raise NameMismatch(
            f"{path} belongs to queue manager {stored!r}, not {name!r}: "
            f"open it with name={stored!r} (or name=None), or use another file"
        )
    origin = check_origin(f"{stored}{INCARNATION_SEPARATOR}{meta['incarnation']}", f"{path}: origin")
    return str(stored), origin


def journal_setting(db: ConnectionFactory, journal: str | None) -> JournalSide | None:
    """The journal mode is a property of the store: given once, kept for every later open.

    A store never given one journals its device-side expiries (``"device"``) as
    soon as it has a remote or home-server queue: they are reported at the next
    sync, whoever opened the store first.
    """
    with db.write() as conn:
        if journal is not None:
            conn.execute("INSERT OR REPLACE INTO edgeq_meta (key, value) VALUES ('journal', ?)", (journal,))
            stored = journal
        else:
            row = conn.execute("SELECT value FROM edgeq_meta WHERE key = 'journal'").fetchone()
            if row is not None:
                stored = str(row[0])
            else:
                synced = conn.execute("SELECT 1 FROM queues WHERE kind IN ('remote', 'home') LIMIT 1").fetchone()
                stored = "off" if synced is None else "device"
    return "server" if stored == "server" else "device" if stored == "device" else None


def journal_is_explicit(db: ConnectionFactory) -> bool:
    """Whether the store was given a journal setting (else it follows its queues)."""
    with db.read() as conn:
        return conn.execute("SELECT 1 FROM edgeq_meta WHERE key = 'journal'").fetchone() is not None

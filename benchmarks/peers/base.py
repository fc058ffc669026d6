"""The interface every library adapter implements, and the payloads they all share."""

from __future__ import annotations

import sqlite3
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

__all__ = ["QueueAdapter", "Unsupported", "make_payload", "payload_index", "read_pragmas"]

_FILLER = b"edgeq-benchmark-payload:"


class Unsupported(Exception):
    """The library has no API for this operation (reported as ``n/a``, not as an error)."""


def make_payload(index: int, size: int) -> bytes:
    """The ``index``-th message body: ASCII, ``size`` bytes, its index readable at the front.

    >>> make_payload(7, 32)
    b'00000007:edgeq-benchmark-payload'
    >>> payload_index(make_payload(123, 256))
    123
    """
    head = b"%08d:" % index
    body = (head + _FILLER * (size // len(_FILLER) + 1))[:size]
    return body if len(body) >= len(head) else head


def payload_index(payload: bytes | str) -> int:
    """The index :func:`make_payload` wrote at the front of a payload."""
    if isinstance(payload, str):
        payload = payload.encode("ascii")
    return int(payload[:8])


def read_pragmas(conn: sqlite3.Connection) -> dict[str, str]:
    """The durability-relevant settings of one live connection, as SQLite reports them."""
    sync_names = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
    (journal,) = conn.execute("PRAGMA journal_mode").fetchone()
    (sync,) = conn.execute("PRAGMA synchronous").fetchone()
    return {"journal_mode": str(journal).upper(), "synchronous": sync_names.get(int(sync), str(sync))}


class QueueAdapter(ABC):
    """One library's queue in one directory, driven the same way for every library.

    Adapters force WAL + ``synchronous=FULL`` on every connection the library
    opens (and :meth:`pragmas` reads back what SQLite actually uses), so every
    library is measured at the same durability.
    """

    key: ClassVar[str]
    label: ClassVar[str]
    #: Whether ``get_confirm`` is a real two-phase get (lock, then confirm/ack).
    two_phase: ClassVar[bool] = True

    def __init__(self, directory: Path, *, now_ms: int | None = None) -> None:
        self.directory = directory
        self.now_ms = now_ms

    @staticmethod
    @abstractmethod
    def version() -> str:
        """The library's version string."""

    @abstractmethod
    def connections(self) -> Sequence[sqlite3.Connection]:
        """The library's live SQLite connections (for reading back pragmas)."""

    def pragmas(self) -> dict[str, str]:
        """journal_mode and synchronous of every connection (they must all agree)."""
        found = {tuple(sorted(read_pragmas(c).items())) for c in self.connections()}
        if len(found) != 1:
            return {"journal_mode": "MIXED", "synchronous": repr(sorted(found))}
        return dict(found.pop())

    @abstractmethod
    def fill(self, payloads: Sequence[bytes]) -> None:
        """Store a backlog as fast as the library allows (untimed set-up)."""

    @abstractmethod
    def put(self, payload: bytes) -> None:
        """One durable put: committed (and fsynced) when it returns."""

    def put_batch(self, payloads: Sequence[bytes]) -> None:
        """Put many messages in one call / one transaction."""
        raise Unsupported(f"{self.label} has no batch put API")

    @abstractmethod
    def get_confirm(self) -> bytes | str | None:
        """Take the next message two-phase (get then confirm/ack); None when empty."""

    @abstractmethod
    def depth(self) -> int:
        """How many messages the queue holds, by the library's own size inquiry."""

    def stored(self) -> int:
        """Rows physically left in the store (checks a sweep without triggering another)."""
        return self.depth()

    def fill_expiring(self, payloads: Sequence[bytes], ttl_ms: int) -> None:
        """Store messages that expire ``ttl_ms`` after ``now_ms`` (untimed set-up)."""
        raise Unsupported(f"{self.label} has no message expiry")

    def sweep_expired(self) -> int:
        """Discard every message expired at ``now_ms``; return how many."""
        raise Unsupported(f"{self.label} has no message expiry")

    @abstractmethod
    def close(self) -> None:
        """Close the queue and its connections."""

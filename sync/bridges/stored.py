"""Where bridges keep what lasts: the store's ``edgeq_meta``, ``bridge.<name>`` for a definition and
``bridge-state.<name>`` for its status, written in short transactions of their own."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from edgeq.store.opening import connect
from edgeq.store.syncstate import SyncTx

__all__ = ["DEFINITION_PREFIX", "STATE_PREFIX", "meta", "read_meta"]

DEFINITION_PREFIX = "bridge."
STATE_PREFIX = "bridge-state."


@contextmanager
def meta(path: str | Path) -> Iterator[SyncTx]:
    """The store's ``edgeq_meta`` verbs in one write transaction of a short-lived connection."""
    conn = connect(path, wal=True)
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield SyncTx(conn)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
    finally:
        conn.close()


def read_meta(path: str | Path, prefix: str) -> dict[str, str]:
    """The ``edgeq_meta`` entries under ``prefix``, read without writing (a read-only store too)."""
    conn = connect(path, read_only=True)
    try:
        return SyncTx(conn).meta_items(prefix)
    finally:
        conn.close()

"""Replay defence: the nonces of signed requests, remembered while their timestamp is acceptable.

See docs/security.md, "Replay defence, across restarts".

>>> nonces, n = MemoryNonces(), "n" * 32
>>> [nonces.add("DEV1", n, exp, now) for exp, now in ((2_000, 1_000), (2_000, 1_500), (4_000, 3_000))]
[True, False, True]
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Literal, Protocol

from edgeq.errors import EdgeqError
from edgeq.store.commits import SyncBarrier, SyncStats
from edgeq.store.opening import connect

__all__ = ["MemoryNonces", "NonceStore", "NoncesFull", "SqliteNonces"]

_PURGE_EVERY = 1_000


class NoncesFull(EdgeqError):
    """More live nonces than the store's cap: refuse new requests until some age out."""


class NonceStore(Protocol):
    """Where a server remembers signed requests' nonces."""
    def add(self, device: str, nonce: str, expires_ms: int, now_ms: int) -> bool:
        """Remember ``(device, nonce)`` until ``expires_ms``; False if it is already remembered.
        Raises :class:`NoncesFull` at the cap."""
        ...

    def close(self) -> None:
        ...


class MemoryNonces:
    """Nonces in a dict, aged out through a heap of expiry times. Thread-safe."""

    def __init__(self, *, max_entries: int = 200_000) -> None:
        self.max_entries = max_entries
        self._live: dict[tuple[str, str], int] = {}
        self._heap: list[tuple[int, str, str]] = []
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._live)

    def add(self, device: str, nonce: str, expires_ms: int, now_ms: int) -> bool:
        with self._lock:
            while self._heap and self._heap[0][0] < now_ms:
                _, d, n = heapq.heappop(self._heap)
                self._live.pop((d, n), None)
            if (device, nonce) in self._live:
                return False
            if len(self._live) >= self.max_entries:
                raise NoncesFull(f"{len(self._live)} requests are within the replay window "
                                 f"(cap {self.max_entries})")
            self._live[device, nonce] = expires_ms
            heapq.heappush(self._heap, (expires_ms, device, nonce))
            return True

    def close(self) -> None:
        with self._lock:
            self._live.clear()
            self._heap.clear()


class SqliteNonces:
    """Nonces in their own SQLite file (WAL), so they outlive the server process; ``"FULL"``: a power
    loss too, flushes shared (group commit). ``flush`` replaces ``os.fdatasync`` in tests."""

    def __init__(self, path: Path, *, max_entries: int = 2_000_000,
                 synchronous: Literal["FULL", "NORMAL"] = "FULL",
                 flush: Callable[[int], None] | None = None) -> None:
        self.path = path
        self.max_entries = max_entries
        self._lock = threading.Lock()
        self._conn = connect(path, wal=True, timeout=30)
        self._barrier: SyncBarrier | None = None
        try:
            if synchronous == "FULL":
                # The name SQLite resolved for the database (symbolic links followed), plus "-wal".
                file = self._conn.execute("PRAGMA database_list").fetchone()[2]
                self._barrier = SyncBarrier(f"{file}-wal", flush=flush)
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS nonces (device TEXT NOT NULL, nonce TEXT NOT NULL, "
                "expires_ms INTEGER NOT NULL, PRIMARY KEY (device, nonce)) WITHOUT ROWID"
            )
            self._conn.execute("CREATE INDEX IF NOT EXISTS nonces_expiry ON nonces (expires_ms)")
            self._count = int(self._conn.execute("SELECT count(*) FROM nonces").fetchone()[0])
        except BaseException:
            self._conn.close()
            raise
        self._since_purge = _PURGE_EVERY  # purge on the first add

    def __len__(self) -> int:
        with self._lock:
            return self._count

    def _purge(self, now_ms: int) -> None:
        self._count -= self._conn.execute("DELETE FROM nonces WHERE expires_ms < ?", (now_ms,)).rowcount
        self._since_purge = 0

    def add(self, device: str, nonce: str, expires_ms: int, now_ms: int) -> bool:
        """As :meth:`NonceStore.add`; :class:`~edgeq.errors.StoreError` if the flush fails."""
        if not self._remember(device, nonce, expires_ms, now_ms):
            return False
        if self._barrier is not None:
            self._barrier.wait()  # durable before the request is served, the flush shared
        return True

    def sync_stats(self) -> SyncStats:
        """Nonces waited for and the flushes they shared (none at ``synchronous="NORMAL"``)."""
        return SyncStats(0, 0) if self._barrier is None else self._barrier.stats()

    def _remember(self, device: str, nonce: str, expires_ms: int, now_ms: int) -> bool:
        with self._lock:
            if self._since_purge >= _PURGE_EVERY or self._count >= self.max_entries:
                self._purge(now_ms)
            row = self._conn.execute(
                "SELECT expires_ms FROM nonces WHERE device = ? AND nonce = ?", (device, nonce)
            ).fetchone()
            if row is not None and row[0] >= now_ms:
                return False
            if row is None and self._count >= self.max_entries:
                raise NoncesFull(f"{self._count} requests are within the replay window "
                                 f"(cap {self.max_entries})")
            # One statement decides: another worker (process) on this file may have remembered
            # the nonce since the SELECT, and then the guarded upsert changes nothing.
            changed = self._conn.execute(
                "INSERT INTO nonces (device, nonce, expires_ms) VALUES (?, ?, ?) "
                "ON CONFLICT (device, nonce) DO UPDATE SET expires_ms = excluded.expires_ms "
                "WHERE nonces.expires_ms < ?",
                (device, nonce, expires_ms, now_ms),
            ).rowcount
            if changed == 0:
                return False
            self._count += row is None
            self._since_purge += 1
            return True

    def close(self) -> None:
        with self._lock:
            self._conn.close()
            if self._barrier is not None:
                self._barrier.close()

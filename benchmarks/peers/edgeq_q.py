"""edgeq: ``QueueManager`` at its default ``durability="full"`` (WAL + synchronous=FULL)."""

from __future__ import annotations

import itertools
import os
import sqlite3
from collections.abc import Sequence
from pathlib import Path

from benchmarks.peers.base import QueueAdapter

__all__ = ["EdgeqAdapter"]

_QUEUE = "BENCH.Q"
_CHUNK = 10_000  # messages per put_many while filling


class EdgeqAdapter(QueueAdapter):
    """One edgeq queue manager (``edgeq.db``) holding one queue.

    Durability needs no forcing: ``durability="full"`` is edgeq's default. Its
    connections commit at ``synchronous=NORMAL`` and every durable call then waits
    for an ``fdatasync`` of the WAL begun after its commit (group commit, see
    ``edgeq.store.commits``): FULL's guarantee, which :meth:`pragmas` reports as FULL only
    when SQLite reads back NORMAL *and* the manager is at full durability.
    """

    key = "edgeq"
    label = "edgeq"

    def __init__(self, directory: Path, *, now_ms: int | None = None) -> None:
        super().__init__(directory, now_ms=now_ms)
        from edgeq import ManualClock, QueueManager

        directory.mkdir(parents=True, exist_ok=True)
        clock = ManualClock(now_ms) if now_ms is not None else None
        self.qm = QueueManager(directory / "edgeq.db", name="BENCH", durability="full", clock=clock)
        if _QUEUE not in self.qm.queue_names():
            self.qm.define_queue(_QUEUE)
        # confirm ids unique across the processes of a drain
        self._ids = itertools.count((os.getpid() % (1 << 22)) << 32 | 1)

    @staticmethod
    def version() -> str:
        import edgeq

        return str(edgeq.__version__)

    def connections(self) -> Sequence[sqlite3.Connection]:
        return [self.qm._db.connection()]

    def pragmas(self) -> dict[str, str]:
        found = super().pragmas()
        if found.get("synchronous") == "NORMAL" and self.qm._db.durability == "full":
            found["synchronous"] = "FULL"  # NORMAL + a flush of the WAL before each durable call returns
        return found

    def fill(self, payloads: Sequence[bytes]) -> None:
        from edgeq import Message

        for start in range(0, len(payloads), _CHUNK):
            self.qm.put_many(_QUEUE, [Message(p) for p in payloads[start : start + _CHUNK]])

    def fill_expiring(self, payloads: Sequence[bytes], ttl_ms: int) -> None:
        from edgeq import Int32, Message

        expiry = Int32(ttl_ms)
        for start in range(0, len(payloads), _CHUNK):
            self.qm.put_many(_QUEUE, [Message(p, expiry=expiry) for p in payloads[start : start + _CHUNK]])

    def put(self, payload: bytes) -> None:
        from edgeq import Message

        self.qm.put(_QUEUE, Message(payload))

    def put_batch(self, payloads: Sequence[bytes]) -> None:
        from edgeq import Message

        self.qm.put_many(_QUEUE, [Message(p) for p in payloads])

    def get_confirm(self) -> bytes | None:
        message = self.qm.get(_QUEUE, confirm_id=next(self._ids))
        if message is None:
            return None
        assert message.uid is not None
        self.qm.confirm_get(_QUEUE, message.uid)
        return message.data

    def depth(self) -> int:
        return self.qm.depth(_QUEUE)

    def stored(self) -> int:
        # A plain count on the manager's connection: depth() would itself discard
        # expired messages and so hide a sweep that missed some.
        (count,) = self.qm._db.connection().execute("SELECT count(*) FROM messages").fetchone()
        return int(count)

    def sweep_expired(self) -> int:
        return self.qm.sweep_expired(_QUEUE)

    def close(self) -> None:
        self.qm.close()

"""The flash budget: how a put makes room under ``max_depth``, ``max_bytes`` and ``max_store_bytes``
by the queue's ``on_full``. See docs/storage.md, 'Flash budget'."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Generator

from edgeq.args import check_limit
from edgeq.errors import EdgeqError, MessageTooLarge, QueueFull, StoreFull
from edgeq.events.dispatch import Pending
from edgeq.events.sink import EventSink
from edgeq.store.records import MessageRow, QueueRow, stored_size
from edgeq.store.tx import Tx

__all__ = ["OverflowTally", "Room", "check_store_budget"]


class OverflowTally:
    """``on_full`` discards per queue since the queue manager opened, for metrics (thread-safe);
    the ``counters`` rule keeps the durable count."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def add(self, queue: str, count: int) -> None:
        if count:
            with self._lock:
                self._counts[queue] += count

    def get(self, queue: str) -> int:
        with self._lock:
            return self._counts[queue]

    def forget(self, queue: str) -> None:
        """A deleted queue: a queue later defined with its name counts afresh."""
        with self._lock:
            self._counts.pop(queue, None)


class Room:
    """The room one put transaction ``tx`` has on queue ``q`` (and in the store, with
    ``store_limit``); discard events go to ``events``."""

    def __init__(
        self, tx: Tx, q: QueueRow, store_limit: int | None, now: int, sink: EventSink, events: list[Pending],
        *, counters: tuple[int, int] | None = None,
    ) -> None:
        self.tx, self.q, self.now, self.sink, self.events = tx, q, now, sink, events
        self.depth, self.bytes = counters if counters is not None else (q.depth, q.bytes)
        self.store_limit = store_limit
        self.store = tx.store_bytes() if store_limit is not None else 0
        self.limited = q.max_depth is not None or q.max_bytes is not None or store_limit is not None
        #: the rows discarded to make room, to delete once the batch is decided
        self.discards: list[MessageRow] = []
        self._gone: set[int] = set()  # ids this transaction deleted already (expired, discarded)
        self._swept = False
        self._walk: Generator[MessageRow, None, None] | None = None
        self._back: list[MessageRow] = []  # candidates read but not (yet) discarded, in order

    # -- bookkeeping -----------------------------------------------------------------------

    def _held(self, replacing: MessageRow | None) -> tuple[int, int, int]:
        """Depth, queue bytes and store bytes once ``replacing`` (a resend's unconfirmed copy) is gone."""
        if replacing is None or replacing.id in self._gone:
            return self.depth, self.bytes, self.store
        size = stored_size(replacing)
        return self.depth - 1, self.bytes - size, self.store - size

    def _fits(self, size: int, depth: int, held: int, store: int) -> bool:
        q = self.q
        return (
            (q.max_depth is None or depth + 1 <= q.max_depth)
            and (q.max_bytes is None or held + size <= q.max_bytes)
            and (self.store_limit is None or store + size <= self.store_limit)
        )

    def _gone_rows(self, rows: list[MessageRow]) -> None:
        size = sum(map(stored_size, rows))
        self.depth -= len(rows)
        self.bytes -= size
        self.store -= size
        self._gone.update(row.id for row in rows)

    def _take(self, size: int, replacing: MessageRow | None) -> None:
        if replacing is not None and replacing.id not in self._gone:
            self._gone_rows([replacing])
        self.depth += 1
        self.bytes += size
        self.store += size

    # -- admitting a message -----------------------------------------------------------------

    def admit(self, size: int, priority: int, replacing: MessageRow | None = None) -> EdgeqError | None:
        """Count in a message of ``size`` bytes as stored, in place of ``replacing`` if given, making
        room by ``on_full``; or return why it cannot be stored, having discarded nothing for it."""
        if not self.limited or self._fits(size, *self._held(replacing)):
            self._take(size, replacing)
            return None
        too_large = self._too_large(size)
        if too_large is not None:
            return too_large
        if not self._swept:
            self._sweep()
            if self._fits(size, *self._held(replacing)):
                self._take(size, replacing)
                return None
        if self.q.on_full not in ("discard-oldest", "discard-lowest-priority"):
            return self._full(size, "its on_full is 'reject'")
        lowest = self.q.on_full == "discard-lowest-priority"
        depth, held, store = self._held(replacing)
        taken: list[MessageRow] = []
        freed = 0
        while not self._fits(size, depth - len(taken), held - freed, store - freed):
            candidate = self._next()
            if candidate is None or (lowest and candidate.priority > priority):
                # Not enough can go for this message: discard none of it for nothing.
                self._back[:0] = taken + ([candidate] if candidate is not None else [])
                return self._full(size, self._why_not(priority, lowest))
            taken.append(candidate)
            freed += stored_size(candidate)
        self._gone_rows(taken)
        self.discards += taken
        self.events.extend(self.sink.events(self.q.name, "removed", taken, self.now, reason="overflow"))
        self._take(size, replacing)
        return None

    def close(self) -> None:
        """Stop reading candidates (before the transaction writes again)."""
        walk, self._walk = self._walk, None
        if walk is not None:
            walk.close()

    def _next(self) -> MessageRow | None:
        if self._back:
            return self._back.pop(0)
        if self._walk is None:
            self._walk = self.tx.overflow_candidates(
                self.q.id, ranked=self.q.ordering == "priority",
                lowest_first=self.q.on_full == "discard-lowest-priority",
            )
        return next(self._walk, None)

    def _sweep(self) -> None:
        """Discard the queue's expired messages, any state (check point ``add``)."""
        self._swept = True
        rows = self.tx.delete(self.q.id, self.tx.expired_ids(self.q.id, self.now, max(self.q.depth, 1)))
        self._gone_rows(rows)
        self.events.extend(self.sink.events(self.q.name, "expired", rows, self.now, where="add"))

    # -- why not -------------------------------------------------------------------------------

    def _too_large(self, size: int) -> MessageTooLarge | None:
        q = self.q
        what = "data plus fields, sealed" if q.encryption else "data plus fields"
        if q.max_bytes is not None and size > q.max_bytes:
            return MessageTooLarge(
                f"message is {size} bytes as stored ({what}) "
                f"but queue {q.name!r} holds at most {q.max_bytes} "
                "(its max_bytes): it can never fit; split it, or raise max_bytes with alter_queue"
            )
        if self.store_limit is not None and size > self.store_limit:
            return MessageTooLarge(
                f"message is {size} bytes as stored ({what}) but this queue manager's max_store_bytes is "
                f"{self.store_limit}: it can never fit; "
                "split it, or open the store with a larger max_store_bytes"
            )
        return None

    def _why_not(self, priority: int, lowest: bool) -> str:
        kept = (
            "messages locked by assured puts and gets in flight are kept, "
            "and a batch never discards its own"
        )
        if lowest:
            return (
                "on_full='discard-lowest-priority' found too few ready messages "
                f"of priority {priority} or lower "
                f"to discard (a message lower than every one held is refused; {kept})"
            )
        return f"on_full='discard-oldest' found too few ready messages to discard ({kept})"

    def _full(self, size: int, why: str) -> QueueFull:
        q = self.q
        queue_full = (q.max_depth is not None and self.depth + 1 > q.max_depth) or (
            q.max_bytes is not None and self.bytes + size > q.max_bytes
        )
        if not queue_full and self.store_limit is not None:
            return StoreFull(
                f"the store is full: its queues hold {self.store} bytes "
                f"and this queue manager's max_store_bytes is {self.store_limit}, "
                f"so queue {q.name!r} cannot take a {size}-byte message and {why}: get or "
                "purge messages (on this queue or others), or open the store with a larger max_store_bytes"
            )
        limits = []
        if q.max_depth is not None:
            limits.append(f"{self.depth} of max_depth {q.max_depth} messages")
        if q.max_bytes is not None:
            limits.append(f"{self.bytes} of max_bytes {q.max_bytes} bytes")
        advice = "" if q.on_full != "reject" else ", or let it make room with on_full='discard-oldest'"
        return QueueFull(
            f"queue {q.name!r} is full ({'; '.join(limits)}) for a {size}-byte message and {why}: get some "
            f"messages, or raise its limits with alter_queue{advice}"
        )


def check_store_budget(max_store_bytes: object) -> int | None:
    """A queue manager's ``max_store_bytes``: a positive int, or None for no bound.

    >>> check_store_budget(64 * 1024 * 1024)
    67108864
    """
    return check_limit(max_store_bytes, "max_store_bytes")

"""Queue attributes (validated), what queues hold against their budget, and the one way every part
looks a queue up by name."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from edgeq.args import check_limit
from edgeq.encoding.compression import check_compression
from edgeq.errors import InvalidArgument, InvalidType, QueueNotFound
from edgeq.message import check_priority
from edgeq.names import check_name
from edgeq.store.records import QueueRow
from edgeq.store.tx import Tx
from edgeq.types import (
    DEFAULT_MAX_REDELIVERY_DELAY_MS,
    DEFAULT_REDELIVERY_DELAY_MS,
    MAX_REDELIVERY_DELAY_MS,
    ON_FULL,
    OnFull,
    Ordering,
    QueueKind,
)

__all__ = [
    "QueueAttributes", "QueueUsage", "StoreUsage", "check_attributes", "check_redelivery", "readable_queue",
    "require_queue",
]

_POSITIVE = (
    "expiry_ms", "cap_expiry_ms", "max_depth", "max_message_bytes", "depth_threshold", "max_bytes",
    "refusal_limit", "backout_threshold",
)
_DELAYS = ("redelivery_delay_ms", "max_redelivery_delay_ms")
ATTRIBUTE_NAMES = (
    *_POSITIVE, "default_priority", "ordering", "on_full", "backout_queue", "compression", *_DELAYS,
)
_MAX = 2**62  # far beyond any useful interval, and safe to add to an epoch ms


@dataclass(frozen=True, slots=True)
class QueueAttributes:
    """A queue's definition (``qm.queue_attributes("Q")``); meanings: docs/storage.md, 'Queue attributes'."""

    name: str
    expiry_ms: int | None
    cap_expiry_ms: int | None
    max_depth: int | None
    max_message_bytes: int | None
    default_priority: int
    ordering: Ordering
    created_ms: int
    depth_threshold: int | None = None
    #: ``"local"``; ``"remote"`` (puts are stored here and transmitted to
    #: ``target_qmgr``/``target_queue`` in ``mode`` async or sync); or ``"home"``
    #: (a local queue filled by pulling from home server ``server``)
    kind: QueueKind = "local"
    target_qmgr: str | None = None
    target_queue: str | None = None
    mode: str | None = None
    server: str | None = None
    #: ``"aes-256-gcm"`` if data and fields are sealed in the store, else None
    encryption: str | None = None
    max_bytes: int | None = None
    on_full: OnFull = "reject"
    refusal_limit: int | None = None
    backout_threshold: int | None = None
    backout_queue: str | None = None
    compression: str | None = None
    redelivery_delay_ms: int = DEFAULT_REDELIVERY_DELAY_MS
    max_redelivery_delay_ms: int = DEFAULT_MAX_REDELIVERY_DELAY_MS

    @classmethod
    def from_row(cls, row: QueueRow) -> QueueAttributes:
        ordering: Ordering = "fifo" if row.ordering == "fifo" else "priority"
        kind: QueueKind = "remote" if row.kind == "remote" else "home" if row.kind == "home" else "local"
        return cls(
            row.name, row.expiry_ms, row.cap_expiry_ms, row.max_depth, row.max_message_bytes,
            row.default_priority, ordering, row.created_ms, row.depth_threshold,
            kind, row.target_qmgr, row.target_queue, row.mode, row.server, row.encryption,
            row.max_bytes, _on_full(row.on_full), row.refusal_limit, row.backout_threshold, row.backout_queue,
            row.compression, row.redelivery_delay_ms, row.max_redelivery_delay_ms,
        )

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}


def _on_full(stored: str) -> OnFull:
    # A value this edgeq does not know (a newer one's) reads as the safe one.
    return cast(OnFull, stored) if stored in ON_FULL else "reject"


@dataclass(frozen=True, slots=True)
class QueueUsage:
    """What a queue holds against its budget, as ``qm.queue_usage("Q")`` returns it.

    ``bytes``: data plus fields as stored; ``overflowed``: ``on_full`` discards since this object opened."""

    name: str
    depth: int
    bytes: int
    max_depth: int | None
    max_bytes: int | None
    on_full: OnFull
    overflowed: int = 0

    @classmethod
    def from_row(cls, row: QueueRow, overflowed: int = 0) -> QueueUsage:
        return cls(
            row.name, row.depth, row.bytes, row.max_depth, row.max_bytes, _on_full(row.on_full), overflowed
        )


@dataclass(frozen=True, slots=True)
class StoreUsage:
    """What the whole store holds (``qm.store_usage()``): total ``bytes``, ``max_store_bytes``
    (``max_bytes``), and each queue's :class:`QueueUsage`."""

    bytes: int
    max_bytes: int | None
    queues: tuple[QueueUsage, ...]


def check_attributes(attrs: dict[str, Any]) -> dict[str, Any]:
    """Validate define/alter keywords; return them unchanged if all are valid.

    >>> check_attributes({"expiry_ms": 60_000, "ordering": "fifo"})
    {'expiry_ms': 60000, 'ordering': 'fifo'}
    """
    for key, value in attrs.items():
        if key in _POSITIVE:
            if check_limit(value, key) is not None and value > _MAX:
                raise InvalidArgument(f"{key} must be at most {_MAX}, not {value}")
        elif key == "default_priority":
            if value is None:
                raise InvalidArgument("default_priority must be an int from 0 to 9, not None")
            check_priority(value, "default_priority")
        elif key == "ordering":
            if value not in ("priority", "fifo"):
                raise InvalidArgument(f"ordering must be 'priority' or 'fifo', not {value!r}")
        elif key == "on_full":
            if value not in ON_FULL:
                raise InvalidArgument(
                    f"on_full must be one of {', '.join(map(repr, ON_FULL))}, not {value!r}"
                )
        elif key == "backout_queue":
            if value is not None:
                check_name(value, "backout queue name")
        elif key == "compression":
            check_compression(value)
        elif key in _DELAYS:
            low = 0 if key == "redelivery_delay_ms" else 1
            if isinstance(value, bool) or not isinstance(value, int):
                raise InvalidType(f"{key} must be an int of milliseconds, not {value!r}")
            if not low <= value <= MAX_REDELIVERY_DELAY_MS:
                raise InvalidArgument(
                    f"{key} must be from {low} to {MAX_REDELIVERY_DELAY_MS} ms (a day), not {value}"
                    + (" (0: a failed message is offered again at once)" if low == 0 else "")
                )
        else:
            raise InvalidArgument(
                f"unknown queue attribute {key!r}: use one of {', '.join(ATTRIBUTE_NAMES)}"
            )
    return attrs


def check_redelivery(first_ms: int, most_ms: int) -> None:
    """Refuse redelivery delays whose first is longer than the most it grows to.

    >>> check_redelivery(1_000, 300_000)
    """
    if first_ms > most_ms:
        raise InvalidArgument(
            f"redelivery_delay_ms ({first_ms}) is longer than max_redelivery_delay_ms ({most_ms}): the delay "
            "starts at the first and doubles up to the second; "
            "raise max_redelivery_delay_ms or lower the first"
        )


def require_queue(tx: Tx, qm_name: str, name: str, *, counted: bool = True) -> QueueRow:
    """The row of queue ``name``, or :class:`QueueNotFound` naming the queues that are defined
    (``counted=False``: its definition, whose ``depth`` and ``bytes`` may be stale: ``Tx.definition``)."""
    row = tx.queue(name) if counted else tx.definition(name)
    if row is None:
        known = [q.name for q in tx.queues()]
        hint = f" (defined: {', '.join(known[:10])})" if known else " (none are defined)"
        raise QueueNotFound(
            f"no queue {name!r} on queue manager {qm_name}{hint}: define it with define_queue({name!r})"
        )
    return row


def readable_queue(tx: Tx, qm_name: str, name: str, *, counted: bool = True) -> QueueRow:
    """The queue, if applications may get and browse it (not a remote queue)."""
    q = require_queue(tx, qm_name, name, counted=counted)
    if q.kind == "remote":
        raise InvalidArgument(
            f"{name!r} is a remote queue: messages put there are transmitted to queue manager "
            f"{q.target_qmgr}; get them there (MQe: applications cannot get or browse a remote queue)"
        )
    return q

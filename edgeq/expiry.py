"""Expiry arithmetic, in one place (docs/expiry.md): a *deadline* is the epoch ms from which
a message is expired."""

from __future__ import annotations

from datetime import datetime, timedelta

from edgeq.errors import ExpiryError, InvalidType
from edgeq.values import Int32, Int64

__all__ = [
    "EXPIRY_HELP",
    "absolute_ms",
    "check_expiry",
    "effective_deadline",
    "own_deadline",
    "relative_ms",
]

MAX_RELATIVE_MS = 2**31 - 1

EXPIRY_HELP = (
    "give expiry=Int32(ms) for a relative expiry (1 .. 2**31-1 milliseconds after "
    "the message is created) or expiry=Int64(epoch_ms) for an absolute one "
    "(Message.expire_after() and Message.expire_at() build either)"
)


def check_expiry(expiry: object) -> Int32 | Int64 | None:
    """Validate a message expiry and return it; raise :class:`ExpiryError` if bad."""
    if expiry is None:
        return None
    if isinstance(expiry, Int32):
        if not 1 <= expiry <= MAX_RELATIVE_MS:
            raise ExpiryError(f"relative expiry {int(expiry)} ms must be positive: {EXPIRY_HELP}")
        return expiry
    if isinstance(expiry, Int64):
        if expiry <= 0:
            raise ExpiryError(f"absolute expiry {int(expiry)} must be a positive epoch ms: {EXPIRY_HELP}")
        return expiry
    if isinstance(expiry, int) and not isinstance(expiry, bool):
        raise ExpiryError(f"a bare int ({expiry}) is ambiguous as an expiry: {EXPIRY_HELP}")
    raise ExpiryError(f"expiry must be Int32 or Int64, not {type(expiry).__name__}: {EXPIRY_HELP}")


def relative_ms(after: int | timedelta) -> Int32:
    """An ``Int32`` relative expiry from ms or a timedelta."""
    if isinstance(after, timedelta):
        ms = int(after.total_seconds() * 1000)
    elif isinstance(after, int) and not isinstance(after, bool):
        ms = int(after)
    else:
        raise InvalidType(f"expire_after takes ms (int) or a timedelta, not {after!r}")
    if not 1 <= ms <= MAX_RELATIVE_MS:
        raise ExpiryError(f"expire_after({ms} ms) is out of range: {EXPIRY_HELP}")
    return Int32(ms)


def absolute_ms(when: datetime | int) -> Int64:
    """An ``Int64`` absolute expiry from an aware datetime or epoch ms."""
    if isinstance(when, datetime):
        if when.tzinfo is None:
            raise ExpiryError(
                f"expire_at({when!r}) needs a timezone-aware datetime, "
                "e.g. datetime.now(timezone.utc) + timedelta(hours=1)"
            )
        ms = int(when.timestamp() * 1000)
    elif isinstance(when, int) and not isinstance(when, bool):
        ms = int(when)
    else:
        raise InvalidType(f"expire_at takes a datetime or epoch ms (int), not {when!r}")
    if ms <= 0:
        raise ExpiryError(f"expire_at({ms}) must be a positive epoch ms: {EXPIRY_HELP}")
    return Int64(ms)


def own_deadline(expiry: Int32 | Int64 | None, created_ms: int) -> int | None:
    """The deadline a message's own expiry sets, or None if it has none."""
    if expiry is None:
        return None
    if isinstance(expiry, Int32):
        return created_ms + int(expiry)
    return int(expiry)


def effective_deadline(
    own: int | None, arrived_ms: int, queue_expiry_ms: int | None, cap_at: int | None
) -> int | None:
    """The deadline of a message on a queue: its own expiry overrides the queue's interval; the
    put-time cap bounds either.

    >>> effective_deadline(None, 1_000, 50, None), effective_deadline(9_000, 1_000, 50, 2_000)
    (1050, 2000)
    """
    deadline = own if own is not None else None if queue_expiry_ms is None else arrived_ms + queue_expiry_ms
    if cap_at is None:
        return deadline
    return cap_at if deadline is None else min(deadline, cap_at)

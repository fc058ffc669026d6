"""Checks of the arguments edgeq's verbs share (counts and other positive ints, ids, ages,
seconds, uids, confirm ids, stamps): one place, one wording. A bool is never a number here."""

from __future__ import annotations

from edgeq.errors import InvalidArgument, InvalidType
from edgeq.types import MAX_CONFIRM_ID, MAX_STAMP
from edgeq.uid import MessageUID

__all__ = [
    "check_confirm_id", "check_int", "check_limit", "check_non_negative", "check_positive", "check_seconds",
    "check_stamp", "check_uid",
]


def check_confirm_id(confirm_id: object) -> int:
    """A confirm id: a positive 64-bit int.

    >>> check_confirm_id(7)
    7
    """
    if isinstance(confirm_id, bool) or not isinstance(confirm_id, int):
        raise InvalidType(f"confirm_id must be a positive int, not {confirm_id!r}")
    if not 0 < confirm_id <= MAX_CONFIRM_ID:
        raise InvalidArgument(f"confirm_id must be a positive 64-bit int, not {confirm_id}")
    return int(confirm_id)


def check_positive(value: object, what: str) -> int:
    """A positive int: a count of messages or rows, a bound, a number of threads.

    >>> check_positive(500, "count")
    500
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidType(f"{what} must be a positive int, not {value!r}")
    if value < 1:
        raise InvalidArgument(f"{what} must be a positive int, not {value}")
    return int(value)


def check_non_negative(value: object, what: str) -> int:
    """An int of 0 or more: an id to read after, an age in milliseconds.

    >>> check_non_negative(0, "after_id")
    0
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidType(f"{what} must be an int of 0 or more, not {value!r}")
    if value < 0:
        raise InvalidArgument(f"{what} must be an int of 0 or more, not {value}")
    return int(value)


def check_int(value: object, what: str) -> int:
    """Any int (an offset, an id), but not a bool.

    >>> check_int(-250, "clock_offset_ms")
    -250
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidType(f"{what} must be an int, not {value!r}")
    return int(value)


def check_seconds(value: object, what: str) -> float:
    """A positive number of seconds (an int or a float): a timeout, an interval.

    >>> check_seconds(5, "interval_s")
    5.0
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise InvalidArgument(f"{what} must be a positive number of seconds, not {value!r}")
    return float(value)


def check_uid(uid: object) -> MessageUID:
    """A :class:`MessageUID`, or its string form parsed.

    >>> str(check_uid("DEV1.42"))
    'DEV1.42'
    """
    if isinstance(uid, str):
        return MessageUID.parse(uid)
    if not isinstance(uid, MessageUID):
        raise InvalidType(f"uid must be a MessageUID (or its string form), not {type(uid).__name__}")
    return uid


def check_stamp(value: object, what: str) -> int:
    """A uid stamp or low-water mark: an int from 0 to 2**63-1.

    >>> check_stamp(5, "below")
    5
    """
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_STAMP:
        raise InvalidArgument(f"{what} must be a stamp (an int from 0 to 2**63-1), not {value!r}")
    return value


def check_limit(value: object, what: str) -> int | None:
    """A bound given as a positive int, or None for no bound.

    >>> check_limit(64 * 1024 * 1024, "max_store_bytes"), check_limit(None, "max_store_bytes")
    (67108864, None)
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidType(f"{what} must be a positive int or None, not {value!r}")
    if value < 1:
        raise InvalidArgument(f"{what} must be a positive int (or None for no bound), not {value}")
    return int(value)

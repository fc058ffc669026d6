"""The checks of arguments edgeq's verbs share: one place, one wording; a bool is never a number."""

from __future__ import annotations

from edgeq.errors import InvalidArgument, InvalidType
from edgeq.types import MAX_CONFIRM_ID, MAX_STAMP
from edgeq.uid import MessageUID

__all__ = [
    "check_confirm_id", "check_int", "check_limit", "check_non_negative", "check_positive", "check_seconds",
    "check_stamp", "check_uid",
]


def check_confirm_id(confirm_id: object) -> int:
    """A confirm id: a positive 64-bit int."""
    if isinstance(confirm_id, bool) or not isinstance(confirm_id, int):
        raise InvalidType(f"confirm_id must be a positive int, not {confirm_id!r}")
    if not 0 < confirm_id <= MAX_CONFIRM_ID:
        raise InvalidArgument(f"confirm_id must be a positive 64-bit int, not {confirm_id}")
    return int(confirm_id)


def check_positive(value: object, what: str) -> int:
    """A positive int: a count of messages or rows, a bound, a number of threads."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidType(f"{what} must be a positive int, not {value!r}")
    if value < 1:
        raise InvalidArgument(f"{what} must be a positive int, not {value}")
    return int(value)


def check_non_negative(value: object, what: str) -> int:
    """An int of 0 or more: an id to read after, an age in milliseconds."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidType(f"{what} must be an int of 0 or more, not {value!r}")
    if value < 0:
        raise InvalidArgument(f"{what} must be an int of 0 or more, not {value}")
    return int(value)


def check_int(value: object, what: str) -> int:
    """Any int (an offset, an id), but not a bool."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidType(f"{what} must be an int, not {value!r}")
    return int(value)


def check_seconds(value: object, what: str) -> float:
    """A positive number of seconds (an int or a float), as a float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise InvalidArgument(f"{what} must be a positive number of seconds, not {value!r}")
    return float(value)


def check_uid(uid: object) -> MessageUID:
    """``uid`` as a :class:`MessageUID` (parsed from ``ORIGIN.STAMP`` text), or InvalidArgument."""
    if isinstance(uid, str):
        return MessageUID.parse(uid)
    if not isinstance(uid, MessageUID):
        raise InvalidType(f"uid must be a MessageUID (or its string form), not {type(uid).__name__}")
    return uid


def check_stamp(value: object, what: str) -> int:
    """A uid stamp or low-water mark: an int from 0 to 2**63-1."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_STAMP:
        raise InvalidArgument(f"{what} must be a stamp (an int from 0 to 2**63-1), not {value!r}")
    return value


def check_limit(value: object, what: str) -> int | None:
    """A bound: a positive int, or None for no bound."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidType(f"{what} must be a positive int or None, not {value!r}")
    if value < 1:
        raise InvalidArgument(f"{what} must be a positive int (or None for no bound), not {value}")
    return int(value)

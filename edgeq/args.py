"""Checks of the arguments the queue manager's verbs share (counts, uids, confirm ids,
stamps): one place, one wording."""

from __future__ import annotations

from edgeq.errors import InvalidArgument, InvalidType
from edgeq.types import MAX_CONFIRM_ID, MAX_STAMP
from edgeq.uid import MessageUID

__all__ = ["check_confirm_id", "check_count", "check_limit", "check_stamp", "check_uid"]


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


def check_count(count: object) -> int:
    """A count of messages (or rows): a positive int.

    >>> check_count(500)
    500
    """
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise InvalidArgument(f"count must be a positive int, not {count!r}")
    return int(count)


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

"""Validation of queue manager and queue names (one rule for both), and of message origins."""

from __future__ import annotations

import re

from edgeq.errors import InvalidArgument, InvalidType

__all__ = ["INCARNATION_SEPARATOR", "check_name", "check_origin", "origin_qmgr"]

_NAME = re.compile(r"[A-Za-z0-9._-]{1,48}")
#: Separates a name from its store's incarnation in a uid's origin; names cannot contain it.
INCARNATION_SEPARATOR = ":"
_ORIGIN = re.compile(r"[A-Za-z0-9._-]{1,48}(?::[a-z0-9]{1,16})?")


def check_name(value: object, what: str) -> str:
    """Return ``value`` if it is a valid name (``what`` names it in the error)."""
    return _check(value, what, _NAME, "use 1 to 48 characters from A-Z, a-z, 0-9, '.', '_' and '-'")


def check_origin(value: object, what: str = "MessageUID origin") -> str:
    """Return ``value`` if it is a valid message origin: a queue manager name, optionally
    followed by ``:`` and its store's incarnation (older stores have none)."""
    return _check(
        value, what, _ORIGIN,
        "a queue manager name (1 to 48 of A-Z, a-z, 0-9, '.', '_', '-'), optionally followed by ':' "
        "and an incarnation of 1 to 16 of a-z, 0-9, e.g. 'DEV1:k3x9qam2pa'",
    )


def _check(value: object, what: str, pattern: re.Pattern[str], rule: str) -> str:
    if not isinstance(value, str):
        raise InvalidType(f"{what} must be a str, not {type(value).__name__} {value!r}")
    if not pattern.fullmatch(value):
        raise InvalidArgument(f"{what} {value!r} is not valid: {rule}")
    return value


def origin_qmgr(origin: str) -> str:
    """The queue manager name in a uid's origin (the origin less its incarnation)."""
    return origin.partition(INCARNATION_SEPARATOR)[0]

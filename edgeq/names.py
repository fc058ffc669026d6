"""Validation of queue manager and queue names (one rule for both), and of message
origins: a queue manager name with, for stores made since edgeq 0.2, the store's
incarnation (``DEV1:k3x9qam2pa``)."""

from __future__ import annotations

import re

from edgeq.errors import InvalidArgument, InvalidType

__all__ = ["INCARNATION_SEPARATOR", "check_name", "check_origin", "origin_qmgr"]

_NAME = re.compile(r"[A-Za-z0-9._-]{1,48}")
#: Separates a queue manager's name from its store's incarnation in a uid's origin.
#: Names cannot contain it, so ``DEV1:k3x9qam2pa`` splits one way only.
INCARNATION_SEPARATOR = ":"
_ORIGIN = re.compile(r"[A-Za-z0-9._-]{1,48}(?::[a-z0-9]{1,16})?")


def check_name(value: object, what: str) -> str:
    """Return ``value`` if it is a valid name, else raise a clear error.

    >>> check_name("ORDERS.EU", "queue name")
    'ORDERS.EU'
    """
    return _check(value, what, _NAME, "use 1 to 48 characters from A-Z, a-z, 0-9, '.', '_' and '-'")


def check_origin(value: object, what: str = "MessageUID origin") -> str:
    """Return ``value`` if it is a valid message origin: a queue manager name, optionally
    followed by ``:`` and its store's incarnation (1-16 of ``a-z0-9``).

    >>> check_origin("DEV1:k3x9qam2pa")
    'DEV1:k3x9qam2pa'
    >>> check_origin("HOME.SRV")
    'HOME.SRV'
    """
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
    """The queue manager name in a uid's origin (the origin less its incarnation).

    >>> origin_qmgr("DEV1:k3x9qam2pa"), origin_qmgr("HOME.SRV")
    ('DEV1', 'HOME.SRV')
    """
    return origin.partition(INCARNATION_SEPARATOR)[0]

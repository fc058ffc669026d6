"""Validation of queue manager and queue names (one rule for both)."""

from __future__ import annotations

import re

from edgeq.errors import InvalidArgument, InvalidType

__all__ = ["check_name"]

_NAME = re.compile(r"[A-Za-z0-9._-]{1,48}")


def check_name(value: object, what: str) -> str:
    """Return ``value`` if it is a valid name, else raise a clear error.

    >>> check_name("ORDERS.EU", "queue name")
    'ORDERS.EU'
    """
    if not isinstance(value, str):
        raise InvalidType(f"{what} must be a str, not {type(value).__name__} {value!r}")
    if not _NAME.fullmatch(value):
        raise InvalidArgument(
            f"{what} {value!r} is not valid: use 1 to 48 characters from "
            "A-Z, a-z, 0-9, '.', '_' and '-'"
        )
    return value

"""Typed integers, as MQe's ``int`` and ``long`` fields: Python has one ``int``, and MQe tells a
relative expiry from an absolute one by the width."""

from __future__ import annotations

from typing import Any, Self

from edgeq.errors import InvalidArgument, InvalidType

__all__ = ["Int32", "Int64"]


class _TypedInt(int):
    bits: int = 64

    def __new__(cls, value: Any) -> Self:
        # bool is an int subclass; True as a field value is a bool, never 1.
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidType(
                f"{cls.__name__} takes an int, not {type(value).__name__} {value!r}"
            )
        low, high = -(2 ** (cls.bits - 1)), 2 ** (cls.bits - 1) - 1
        if not low <= value <= high:
            raise InvalidArgument(
                f"{cls.__name__}({value}) is out of range: it must lie in "
                f"{low} .. {high}"
            )
        return super().__new__(cls, value)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({int(self)})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (int(self),))


class Int32(_TypedInt):
    """A 32-bit signed integer; as a message expiry, milliseconds after creation."""

    bits = 32


class Int64(_TypedInt):
    """A 64-bit signed integer; as a message expiry, an absolute epoch time in ms."""

    bits = 64

"""The click parameter types over :mod:`edgeq.cli.format`'s parsers: a bad value is a usage error (exit 2)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

from edgeq.cli.format import (
    check_duration_range,
    parse_duration,
    parse_field,
    parse_ms,
    parse_rule_spec,
    parse_size,
    parse_time,
)
from edgeq.errors import EdgeqError
from edgeq.expiry import MAX_RELATIVE_MS
from edgeq.names import check_name

__all__ = ["BYTES_LIMIT", "DEVICE_NAME", "DURATION", "DURATION_LIMIT", "EXPIRE_AT", "FIELD", "HOLD", "LIMIT",
           "QM_NAME", "QUEUE_NAME", "QUEUE_NAMES", "RELATIVE_EXPIRY", "REQUEST_EXPIRY", "RULE", "Limit",
           "Parsed", "parse_device_name", "parse_queue_names"]


if TYPE_CHECKING:
    _ParamType = click.ParamType[Any]  # generic in click >= 8.2 only
else:
    _ParamType = click.ParamType


class Parsed(_ParamType):
    """A click type from a parse function that raises ValueError on bad input."""

    def __init__(self, name: str, parse: Callable[[str], Any]) -> None:
        self.name = name
        self._parse = parse

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        try:
            return self._parse(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


def _relative_expiry(text: str) -> int:
    return check_duration_range(parse_duration(text), text, "a relative expiry", MAX_RELATIVE_MS,
                                " (a 32-bit int); use --expire-at for a later time")


def _request_expiry(text: str) -> int:
    return check_duration_range(parse_duration(text), text, "a request's expiry", None,
                                " (a request that expires at once is never executed)")


@dataclass(frozen=True, slots=True)
class Limit:
    """A queue limit given on the command line: a positive int, or None for "no limit"."""

    value: int | None


def _limit(parse: Callable[[str], int]) -> Callable[[str], Limit]:
    def convert(text: str) -> Limit:
        if text.strip().lower() in ("none", "off", "unlimited"):
            return Limit(None)
        value = parse(text)
        if value < 1:
            raise ValueError(f"{text!r} must be positive (or 'none' for no limit)")
        return Limit(value)

    return convert


def _hold(text: str) -> Limit:
    if text.strip().lower() in ("none", "off", "never", "0"):
        return Limit(None)
    return _limit(parse_duration)(text)


def parse_device_name(text: str) -> str:
    """A device's name: its queue manager name, without a dot (the server names its queues ``DEVICE.QUEUE``).

    >>> parse_device_name("DEV1")
    'DEV1'
    """
    name = _name(text, "device name")
    if "." in name:
        raise ValueError(
            f"device name {name!r} has a '.': not allowed with signed sync (the server keeps a device's "
            "queues as DEVICE.QUEUE, so the name must not contain the separator)"
        )
    return name


def parse_queue_names(text: str) -> list[str]:
    """Comma-separated queue names (blanks around them ignored; empty: none).

    >>> parse_queue_names("ORDERS, TELEMETRY"), parse_queue_names("")
    (['ORDERS', 'TELEMETRY'], [])
    """
    return [_name(q.strip(), "queue name") for q in text.split(",") if q.strip()]


def _name(text: str, what: str) -> str:
    try:
        return check_name(text, what)
    except EdgeqError as exc:
        raise ValueError(str(exc)) from None


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a whole number (or 'none')") from None


DURATION = Parsed("duration", parse_duration)
RELATIVE_EXPIRY = Parsed("duration", _relative_expiry)
REQUEST_EXPIRY = Parsed("duration", _request_expiry)
EXPIRE_AT = Parsed("time", parse_time)
FIELD = Parsed("name=value", parse_field)
LIMIT = Parsed("count|none", _limit(_int))
DURATION_LIMIT = Parsed("duration|none", _limit(parse_ms))
BYTES_LIMIT = Parsed("bytes|none", _limit(parse_size))
HOLD = Parsed("duration|none", _hold)
QUEUE_NAME = Parsed("queue", lambda text: _name(text, "queue name"))
QM_NAME = Parsed("name", lambda text: _name(text, "queue manager name"))
DEVICE_NAME = Parsed("device", parse_device_name)
QUEUE_NAMES = Parsed("q1,q2", parse_queue_names)
RULE = Parsed("name[:json]", parse_rule_spec)

"""Values on the command line, read (``parse_*``: ValueError saying what is wrong) and written back."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from edgeq.errors import EdgeqError
from edgeq.types import FieldValue
from edgeq.values import Int32, Int64

__all__ = [
    "FIELD_TYPES",
    "approx_duration",
    "check_duration_range",
    "field_type",
    "format_duration",
    "format_field",
    "format_rule_spec",
    "format_size",
    "format_time",
    "parse_duration",
    "parse_field",
    "parse_ms",
    "parse_rule_spec",
    "parse_size",
    "parse_time",
]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION_PART = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*")
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]i?b?|b)?\s*", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "b": 1, "k": 1000, "m": 1000**2, "g": 1000**3, "t": 1000**4,
               "ki": 1024, "mi": 1024**2, "gi": 1024**3, "ti": 1024**4}

#: Field type names accepted by ``--field NAME:TYPE=VALUE`` and shown in output.
FIELD_TYPES = ("str", "int32", "int64", "int", "float", "bool", "bytes")
_BOOLS = {"true": True, "yes": True, "on": True, "1": True,
          "false": False, "no": False, "off": False, "0": False}


# -- durations and times ----------------------------------------------------------


def parse_duration(text: str) -> int:
    """Milliseconds from a duration (``"250ms"``, ``"1h30m"``, ``"0"``); a bare number is refused.

    >>> parse_duration("1500ms"), parse_duration("1.5s"), parse_duration("1h 30m"), parse_duration("0")
    (1500, 1500, 5400000, 0)
    """
    text = text.strip()
    if text.isdigit():
        if int(text) == 0:
            return 0
        raise ValueError(f"{text!r} has no unit: give one, e.g. {text}s for seconds or {text}ms for "
                         "milliseconds (units: ms, s, m, h, d)")
    return _units(text)


def parse_ms(text: str) -> int:
    """Milliseconds from a bare number, or a duration with a unit (``--expiry-ms``: the name says ms).

    >>> parse_ms("1500"), parse_ms("30s")
    (1500, 30000)
    """
    text = text.strip()
    return int(text) if text.isdigit() else _units(text)


def _units(text: str) -> int:
    total = Decimal(0)
    pos = 0
    while pos < len(text):
        match = _DURATION_PART.match(text, pos)
        if match is None or match.end() == pos:
            raise ValueError(
                f"{text!r} is not a duration: give a number with a unit "
                "(250ms, 30s, 5m, 2h, 1d, or combined like 1h30m)"
            )
        try:
            total += Decimal(match.group(1)) * _UNITS_MS[match.group(2)]
        except InvalidOperation as exc:  # pragma: no cover - the regex admits only numbers
            raise ValueError(f"{text!r} is not a duration") from exc
        pos = match.end()
    if pos == 0:
        raise ValueError(f"{text!r} is not a duration: give e.g. 30s")
    return _whole(total, text, "milliseconds")


def check_duration_range(ms: int, text: str, what: str, most: int | None = None, why: str = "") -> int:
    """``ms`` if it is 1ms or more (and at most ``most``), else a ValueError naming ``what``.

    >>> check_duration_range(30_000, "30s", "a request's expiry")
    30000
    """
    if ms >= 1 and (most is None or ms <= most):
        return ms
    span = "at least 1ms" if most is None else f"1ms to {format_duration(most)}"
    raise ValueError(f"{text!r} is out of range: {what} is {span}{why}")


def _whole(total: Decimal, text: str, unit: str) -> int:
    if total != total.to_integral_value():
        raise ValueError(f"{text!r} is not a whole number of {unit}")
    return int(total)


def format_duration(ms: int) -> str:
    """A duration in ms, exactly, in the units ``parse_duration`` reads.

    >>> format_duration(250), format_duration(90_000), format_duration(5_400_500), format_duration(0)
    ('250ms', '1m 30s', '1h 30m 0.5s', '0ms')
    """
    if ms < 1000:
        return f"{ms}ms"
    days, rest = divmod(ms, 86_400_000)
    hours, rest = divmod(rest, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    seconds, millis = divmod(rest, 1000)
    parts = [f"{days}d"] if days else []
    if hours:
        parts.append(f"{hours}h")
    if minutes:
        parts.append(f"{minutes}m")
    if millis:
        parts.append(f"{seconds}.{millis:03d}".rstrip("0") + "s")
    elif seconds:
        parts.append(f"{seconds}s")
    return " ".join(parts)


def approx_duration(ms: int) -> str:
    """A duration rounded down for reading at a glance: two units at most.

    >>> approx_duration(950), approx_duration(28_964), approx_duration(235_500)
    ('950ms', '28.9s', '3m 55s')
    """
    if ms < 1000:
        return f"{ms}ms"
    if ms < 60_000:
        return f"{ms // 100 / 10:g}s"
    units = (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000))
    for i, (name, size) in enumerate(units):
        if ms >= size:
            next_name, next_size = units[i + 1]
            return f"{ms // size}{name} {ms % size // next_size}{next_name}"
    raise AssertionError("unreachable")  # pragma: no cover


def parse_size(text: str) -> int:
    """Bytes from ``"1500"``, ``"64KiB"``, ``"256MiB"``, ``"1GB"`` (KB = 1000, KiB = 1024).

    >>> parse_size("1500"), parse_size("64KiB"), parse_size("1.5 MB"), parse_size("256MiB")
    (1500, 65536, 1500000, 268435456)
    """
    match = _SIZE.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is not a size: give bytes (1500) or a number with a unit "
                         "(64KiB, 256MiB, 1GB)")
    unit = (match.group(2) or "").lower().removesuffix("b")
    return _whole(Decimal(match.group(1)) * _SIZE_UNITS[unit], text, "bytes")


def format_size(size: int) -> str:
    """A byte count for reading at a glance (binary units, one decimal)."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def parse_time(text: str) -> int:
    """Epoch ms from epoch ms digits or an ISO-8601 time with a timezone.

    >>> parse_time("2025-11-21T09:00:00Z"), parse_time("2025-11-21T10:00:00+01:00")
    (1763715600000, 1763715600000)
    """
    text = text.strip()
    if text.isdigit():
        ms = int(text)
    else:
        try:
            when = datetime.fromisoformat(text)
        except ValueError:
            raise ValueError(
                f"{text!r} is not a time: give ISO-8601 with a timezone (2025-11-21T09:00:00Z, "
                "2025-11-21T10:00:00+01:00) or epoch milliseconds"
            ) from None
        if when.tzinfo is None:
            raise ValueError(
                f"{text!r} has no timezone, so it could mean several instants: add one, "
                f"e.g. {text}Z (UTC) or {text}+01:00"
            )
        ms = (when - _EPOCH) // timedelta(milliseconds=1)
    if ms <= 0:
        raise ValueError(f"{text!r} is not after the epoch (1970-01-01T00:00:00Z)")
    return ms


def format_time(ms: int) -> str:
    """An epoch ms as an ISO-8601 UTC time (milliseconds only when present).

    >>> format_time(1763715600000), format_time(1763715600250)
    ('2025-11-21T09:00:00Z', '2025-11-21T09:00:00.250Z')
    """
    when = datetime.fromtimestamp(ms / 1000, tz=UTC)
    text = when.strftime("%Y-%m-%dT%H:%M:%S")
    return f"{text}.{ms % 1000:03d}Z" if ms % 1000 else f"{text}Z"


# -- fields -----------------------------------------------------------------------


def _field_value(kind: str, raw: str) -> FieldValue:
    if kind == "str":
        return raw
    if kind in ("int32", "int64", "int"):
        try:
            number = int(raw, 0)
        except ValueError:
            raise ValueError(f"{raw!r} is not an integer") from None
        try:
            return Int32(number) if kind == "int32" else Int64(number)
        except EdgeqError as exc:
            raise ValueError(str(exc)) from None
    if kind == "float":
        try:
            return float(raw)
        except ValueError:
            raise ValueError(f"{raw!r} is not a number") from None
    if kind == "bool":
        try:
            return _BOOLS[raw.lower()]
        except KeyError:
            raise ValueError(f"{raw!r} is not a bool: use true or false") from None
    try:  # bytes, as hex
        return bytes.fromhex(raw)
    except ValueError:
        raise ValueError(f"{raw!r} is not hex bytes (e.g. 00ff10)") from None


def parse_field(text: str) -> tuple[str, FieldValue]:
    """A ``NAME=VALUE`` (a str) or ``NAME:TYPE=VALUE`` field, TYPE one of ``FIELD_TYPES``.

    >>> parse_field("sensor=t1"), parse_field("n:int32=5"), parse_field("raw:bytes=00ff")
    (('sensor', 't1'), ('n', Int32(5)), ('raw', b'\\x00\\xff'))
    """
    name, eq, raw = text.partition("=")
    if not eq:
        raise ValueError(f"{text!r} is not NAME=VALUE (or NAME:TYPE=VALUE, e.g. n:int32=5)")
    base, colon, kind = name.rpartition(":")
    if colon and kind in FIELD_TYPES:
        name = base
    else:
        kind = "str"
    if not name:
        raise ValueError(f"{text!r} has no field name before '='")
    try:
        return name, _field_value(kind, raw)
    except ValueError as exc:
        raise ValueError(f"field {name!r} ({kind}): {exc}") from None


def field_type(value: FieldValue) -> str:
    """The ``FIELD_TYPES`` name of a field value."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, Int32):
        return "int32"
    if isinstance(value, Int64):
        return "int64"
    if isinstance(value, float):
        return "float"
    if isinstance(value, bytes):
        return "bytes"
    return "str"


def _field_text(value: FieldValue) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, (Int32, Int64)):
        return str(int(value))
    return str(value)


def format_field(name: str, value: FieldValue) -> str:
    """A field in the ``--field`` syntax that would recreate it (shell-quoted).

    >>> format_field("n", Int32(5)), format_field("note", "two words")
    ('n:int32=5', "'note=two words'")
    """
    kind = field_type(value)
    needs_type = kind != "str" or ":" in name
    return shlex.quote(f"{name}:{kind}={_field_text(value)}" if needs_type
                       else f"{name}={_field_text(value)}")


# -- rule bindings ----------------------------------------------------------------


_RULE_SPEC = re.compile(r"(?P<name>[^{]*?)\s*:\s*(?P<config>\{.*)", re.DOTALL)
_RULE_EXAMPLE = 'e.g. counters, or dead-letter:{"queue": "DLQ"}'


def _dotted_path(name: str) -> bool:
    module, _, attr = name.partition(":")
    return bool(module) and all(part.isidentifier() for part in module.split(".")) and attr.isidentifier()


def parse_rule_spec(text: str) -> tuple[str, dict[str, Any]]:
    """A rule binding from ``NAME`` or ``NAME:JSON``; NAME may be a dotted path ``package.module:Class``.

    >>> parse_rule_spec("counters"), parse_rule_spec('dead-letter:{"queue": "DLQ"}')
    (('counters', {}), ('dead-letter', {'queue': 'DLQ'}))
    >>> parse_rule_spec('my_pkg.rules:Alarm:{"url": "https://x"}')
    ('my_pkg.rules:Alarm', {'url': 'https://x'})
    """
    match = _RULE_SPEC.fullmatch(text.strip())
    name = text.strip() if match is None else match.group("name")
    config: dict[str, Any] = {}
    if match is not None:
        try:
            config = json.loads(match.group("config"))
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"{text!r}: the config after '{name}:' is not a valid JSON object ({exc.msg}, "
                f"column {exc.colno}); {_RULE_EXAMPLE}"
            ) from None
    if not name or name.startswith("{"):
        raise ValueError(f"{text!r} has no rule name: give NAME or NAME:JSON, {_RULE_EXAMPLE}")
    if "{" in name:
        raise ValueError(f"{text!r} is not NAME or NAME:JSON (a ':' before the config), {_RULE_EXAMPLE}")
    if ":" in name and not _dotted_path(name):
        raise ValueError(
            f"{text!r}: a rule's config after ':' is a JSON object ({_RULE_EXAMPLE}); "
            "a rule given by dotted path is package.module:Class"
        )
    return name, config


def _config_text(config: Mapping[str, Any]) -> str:
    return json.dumps(config, sort_keys=True, ensure_ascii=False)


def format_rule_spec(name: str, config: Mapping[str, Any]) -> str:
    """A binding in the syntax ``--rule`` reads: ``NAME``, or ``NAME:JSON``."""
    return f"{name}:{_config_text(config)}" if config else name

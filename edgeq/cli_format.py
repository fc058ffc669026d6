"""Parsing and formatting for the ``edgeq`` command line (see :mod:`edgeq.cli`).

Kept apart from the commands so the demo can share the formatting and the
parsers can be tested on their own.
"""

from __future__ import annotations

import base64
import json
import math
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any

import click

from edgeq.bindings import BindingInfo
from edgeq.errors import EdgeqError
from edgeq.expiry import MAX_RELATIVE_MS
from edgeq.message import Message
from edgeq.queues import QueueAttributes
from edgeq.rules.registry import RuleInfo
from edgeq.rulestore import FailureRow
from edgeq.types import FieldValue
from edgeq.values import Int32, Int64

__all__ = [
    "DURATION",
    "EXPIRE_AT",
    "FIELD",
    "LIMIT",
    "RELATIVE_EXPIRY",
    "RULE",
    "Limit",
    "binding_json",
    "failure_json",
    "format_bindings",
    "format_duration",
    "format_failures",
    "format_field",
    "format_message",
    "format_rule_spec",
    "format_rules_table",
    "format_stats",
    "format_table",
    "format_time",
    "message_json",
    "parse_duration",
    "parse_field",
    "parse_rule_spec",
    "parse_time",
    "queue_json",
]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION_PART = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*")

#: Field type names accepted by ``--field NAME:TYPE=VALUE`` and shown in output.
FIELD_TYPES = ("str", "int32", "int64", "int", "float", "bool", "bytes")
_BOOLS = {"true": True, "yes": True, "on": True, "1": True, "false": False, "no": False, "off": False, "0": False}


# -- durations and times ----------------------------------------------------------


def parse_duration(text: str) -> int:
    """Milliseconds from ``"250"`` (ms), ``"250ms"``, ``"30s"``, ``"5m"``, ``"2h"``, ``"1d"`` or ``"1h30m"``.

    >>> parse_duration("1500"), parse_duration("1.5s"), parse_duration("1h 30m")
    (1500, 1500, 5400000)
    """
    text = text.strip()
    if text.isdigit():
        return int(text)
    total = Decimal(0)
    pos = 0
    while pos < len(text):
        match = _DURATION_PART.match(text, pos)
        if match is None or match.end() == pos:
            raise ValueError(
                f"{text!r} is not a duration: give milliseconds (250) or a number with a unit "
                "(250ms, 30s, 5m, 2h, 1d, or combined like 1h30m)"
            )
        try:
            total += Decimal(match.group(1)) * _UNITS_MS[match.group(2)]
        except InvalidOperation as exc:  # pragma: no cover - the regex admits only numbers
            raise ValueError(f"{text!r} is not a duration") from exc
        pos = match.end()
    if pos == 0:
        raise ValueError(f"{text!r} is not a duration: give e.g. 30s")
    if total != total.to_integral_value():
        raise ValueError(f"{text!r} is not a whole number of milliseconds")
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

    >>> approx_duration(950), approx_duration(28_964), approx_duration(235_500), approx_duration(98_152_000_000)
    ('950ms', '28.9s', '3m 55s', '1136d 0h')
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


def parse_time(text: str) -> int:
    """Epoch ms from epoch ms digits or an ISO-8601 time with a timezone.

    >>> parse_time("2025-11-21T09:00:00Z"), parse_time("2025-11-21T10:00:00+01:00"), parse_time("1763715600000")
    (1763715600000, 1763715600000, 1763715600000)
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
    """The ``FIELD_TYPES`` name of a field value.

    >>> field_type(Int32(1)), field_type(True), field_type(b"")
    ('int32', 'bool', 'bytes')
    """
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
    return shlex.quote(f"{name}:{kind}={_field_text(value)}" if needs_type else f"{name}={_field_text(value)}")


# -- rule bindings ----------------------------------------------------------------


_RULE_SPEC = re.compile(r"(?P<name>[^{]*?)\s*:\s*(?P<config>\{.*)", re.DOTALL)
_RULE_EXAMPLE = 'e.g. counters, or dead-letter:{"queue": "DLQ"}'


def _dotted_path(name: str) -> bool:
    module, _, attr = name.partition(":")
    return bool(module) and all(part.isidentifier() for part in module.split(".")) and attr.isidentifier()


def parse_rule_spec(text: str) -> tuple[str, dict[str, Any]]:
    """A rule binding from ``NAME`` or ``NAME:JSON`` (JSON an object); NAME may be a
    dotted path ``package.module:Class``.

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
    """A binding in the syntax ``--rule`` reads: ``NAME``, or ``NAME:JSON``.

    >>> format_rule_spec("counters", {}), format_rule_spec("dead-letter", {"queue": "DLQ"})
    ('counters', 'dead-letter:{"queue": "DLQ"}')
    """
    return f"{name}:{_config_text(config)}" if config else name


# -- click parameter types -----------------------------------------------------------


if TYPE_CHECKING:
    _ParamType = click.ParamType[Any]  # generic in click >= 8.2 only
else:
    _ParamType = click.ParamType


class _Parsed(_ParamType):
    """A click type from a parse function that raises ValueError on bad input."""

    def __init__(self, name: str, parse: Callable[[str], Any]) -> None:
        self.name = name
        self._parse = parse

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        """Parse a string (a ValueError becomes a usage error); a value already parsed passes through."""
        if not isinstance(value, str):
            return value
        try:
            return self._parse(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


def _relative_expiry(text: str) -> int:
    ms = parse_duration(text)
    if not 1 <= ms <= MAX_RELATIVE_MS:
        raise ValueError(
            f"{text!r} is out of range: a relative expiry is 1ms to {format_duration(MAX_RELATIVE_MS)} "
            "(a 32-bit int); use --expire-at for a later time"
        )
    return ms


@dataclass(frozen=True, slots=True)
class Limit:
    """A queue limit given on the command line: a positive int, or None for "no limit"."""

    value: int | None


def _limit(parse: Callable[[str], int]) -> Callable[[str], Limit]:
    def convert(text: str) -> Limit:
        """Parse a limit: ``none``, ``off`` or ``unlimited`` for no limit, else a positive number."""
        if text.strip().lower() in ("none", "off", "unlimited"):
            return Limit(None)
        value = parse(text)
        if value < 1:
            raise ValueError(f"{text!r} must be positive (or 'none' for no limit)")
        return Limit(value)

    return convert


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a whole number (or 'none')") from None


DURATION = _Parsed("duration", parse_duration)
RELATIVE_EXPIRY = _Parsed("duration", _relative_expiry)
EXPIRE_AT = _Parsed("time", parse_time)
FIELD = _Parsed("name=value", parse_field)
LIMIT = _Parsed("count|none", _limit(_int))
DURATION_LIMIT = _Parsed("duration|none", _limit(parse_duration))
RULE = _Parsed("name[:json]", parse_rule_spec)


# -- messages and queues ------------------------------------------------------------------


def _data_text(data: bytes) -> str | None:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _expiry_text(message: Message) -> str:
    left = message.remaining_expiry_ms
    left_text = "" if left is None else f"; {approx_duration(left)} left"
    if isinstance(message.expiry, Int32):
        return f"relative Int32({int(message.expiry)}), {format_duration(int(message.expiry))} after creation{left_text}"
    if isinstance(message.expiry, Int64):
        return f"absolute Int64({int(message.expiry)}), at {format_time(int(message.expiry))}{left_text}"
    if left is not None:
        return f"the queue's expiry_ms{left_text}"
    return "never"


def format_message(message: Message) -> str:
    """A got or browsed message, for people: uid, priority, expiry, fields, data."""
    lines = [f"{message.uid}  priority {message.priority}"]
    if message.created_ms is not None:
        lines[0] += f"  created {format_time(message.created_ms)}"
    lines.append(f"  expiry   {_expiry_text(message)}")
    if message.backout_count:
        lines.append(f"  backouts {message.backout_count}")
    if message.correlation_id is not None:
        lines.append(f"  correlation id (hex) {message.correlation_id.hex()}")
    if message.reply_to is not None:
        lines.append(f"  reply to {message.reply_to}")
    if message.fields:
        lines.append("  fields   " + " ".join(format_field(k, v) for k, v in message.fields.items()))
    text = _data_text(message.data)
    size = f"{len(message.data)} byte{'' if len(message.data) == 1 else 's'}"
    if text is None:
        lines.append(f"  data     binary (not UTF-8), {size}, as hex: {message.data.hex()}")
    elif "\n" in text.rstrip("\n") or "\r" in text:
        lines.append(f"  data     UTF-8 text, {size}:")
        lines.extend(f"    {line}" for line in text.splitlines())
    else:
        lines.append(f"  data     UTF-8 text, {size}: {text.rstrip(chr(10))}")
    return "\n".join(lines)


def _json_field(value: FieldValue) -> dict[str, Any]:
    out: Any
    if isinstance(value, bool):
        out = value
    elif isinstance(value, (Int32, Int64)):
        out = int(value)
    elif isinstance(value, float):
        out = value if math.isfinite(value) else str(value)  # JSON has no nan/inf
    elif isinstance(value, bytes):
        out = value.hex()
    else:
        out = value
    return {"type": field_type(value), "value": out}


def message_json(message: Message) -> dict[str, Any]:
    """A message as JSON: data as base64 (plus ``data_text`` when it is UTF-8), typed fields."""
    expiry: dict[str, Any] | None = None
    if isinstance(message.expiry, Int32):
        expiry = {"type": "int32", "relative_ms": int(message.expiry)}
    elif isinstance(message.expiry, Int64):
        expiry = {"type": "int64", "at_ms": int(message.expiry), "at": format_time(int(message.expiry))}
    return {
        "uid": str(message.uid),
        "priority": message.priority,
        "created_ms": message.created_ms,
        "expiry": expiry,
        "remaining_expiry_ms": message.remaining_expiry_ms,
        "backout_count": message.backout_count,
        "correlation_id": None if message.correlation_id is None else message.correlation_id.hex(),
        "reply_to": message.reply_to,
        "fields": {name: _json_field(value) for name, value in message.fields.items()},
        "data": base64.b64encode(message.data).decode("ascii"),
        "data_text": _data_text(message.data),
    }


def binding_json(binding: BindingInfo) -> dict[str, Any]:
    """A rule binding as JSON: name, config, whether it is persisted, and its load error."""
    return {"name": binding.name, "config": binding.config, "persisted": binding.persisted, "error": binding.error}


def queue_json(attrs: QueueAttributes, depth: int, bindings: list[BindingInfo] | None = None) -> dict[str, Any]:
    """A queue's attributes and depth (and rule bindings, in order, when given) as JSON."""
    out = {**attrs.as_dict(), "depth": depth}
    if bindings is not None:
        out["rules"] = [binding_json(b) for b in bindings]
    return out


def _limit_text(value: int | None, duration: bool) -> str:
    if value is None:
        return "none"
    return f"{value} ({format_duration(value)})" if duration else str(value)


def format_queue(attrs: QueueAttributes, depth: int, bindings: list[BindingInfo] | None = None) -> str:
    """A queue's attributes and depth, one per line, for people; then its rule bindings, if given."""
    rows: Mapping[str, str] = {
        "queue": attrs.name,
        "depth": str(depth),
        "expiry_ms": _limit_text(attrs.expiry_ms, True),
        "cap_expiry_ms": _limit_text(attrs.cap_expiry_ms, True),
        "max_depth": _limit_text(attrs.max_depth, False),
        "max_message_bytes": _limit_text(attrs.max_message_bytes, False),
        "depth_threshold": _limit_text(attrs.depth_threshold, False),
        "default_priority": str(attrs.default_priority),
        "ordering": attrs.ordering,
        "created": format_time(attrs.created_ms),
    }
    if attrs.kind != "local":
        target = f"{attrs.target_qmgr}/{attrs.target_queue} ({attrs.mode})" if attrs.kind == "remote" else attrs.server
        rows = {**rows, "kind": f"{attrs.kind}: {target}"}
    if attrs.encryption:
        rows = {**rows, "encryption": attrs.encryption}
    width = max(len(key) for key in rows)
    lines = [f"{key:<{width}}  {value}" for key, value in rows.items()]
    if bindings is not None:
        rules = format_bindings(bindings).splitlines()
        lines.append(f"{'rules':<{width}}  {rules[0]}")
        lines.extend(f"{'':<{width}}  {line}" for line in rules[1:])
    return "\n".join(lines)


def format_bindings(bindings: list[BindingInfo]) -> str:
    """A queue's rule bindings, one per line in the order they run (``none`` if there are none)."""
    if not bindings:
        return "none"
    lines = []
    for n, b in enumerate(bindings, start=1):
        line = f"{n}. {format_rule_spec(b.name, b.config)}"
        if not b.persisted:
            line += "  (in-process)"
        if b.error is not None:
            line += f"  BROKEN: {b.error}"
        lines.append(line)
    return "\n".join(lines)


def format_table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> str:
    """Rows under a header, in columns two spaces apart (no trailing blanks)."""
    table = [header, *rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in table
    )


def format_queue_table(queues: list[tuple[QueueAttributes, int]]) -> str:
    """Queues as a table: name, depth and the main attributes."""
    header = ("QUEUE", "DEPTH", "EXPIRY", "CAP", "MAX-DEPTH", "PRIO", "ORDERING")
    rows = [
        (
            a.name,
            str(depth),
            "-" if a.expiry_ms is None else format_duration(a.expiry_ms).replace(" ", ""),
            "-" if a.cap_expiry_ms is None else format_duration(a.cap_expiry_ms).replace(" ", ""),
            "-" if a.max_depth is None else str(a.max_depth),
            str(a.default_priority),
            a.ordering,
        )
        for a, depth in queues
    ]
    return format_table(header, rows)


# -- rules, failures and counters ------------------------------------------------------


def format_rules_table(rules: list[RuleInfo]) -> str:
    """Installed rules as a table: name, package and summary."""
    return format_table(("RULE", "PACKAGE", "SUMMARY"), [(r.name, r.package, r.summary) for r in rules])


def _one_line(text: str) -> str:
    return " ".join(text.split())


def failure_json(failure: FailureRow) -> dict[str, Any]:
    """A failed rule delivery as JSON; ``next_retry_ms`` is None once it is parked."""
    return {
        "event_id": failure.event_id,
        "queue": failure.queue,
        "rule": failure.rule,
        "binding": failure.binding,
        "attempts": failure.attempts,
        "parked": failure.parked,
        "last_error": failure.last_error,
        "last_attempt_ms": failure.last_ms,
        "last_attempt": format_time(failure.last_ms),
        "next_retry_ms": None if failure.parked else failure.next_ms,
        "next_retry": None if failure.parked else format_time(failure.next_ms),
    }


def format_failures(failures: list[FailureRow]) -> str:
    """Failed rule deliveries as a table: event, queue, rule, attempts, state, next retry, last error."""
    header = ("EVENT", "QUEUE", "RULE", "ATTEMPTS", "STATE", "NEXT-RETRY", "LAST-ERROR")
    rows = [
        (
            str(f.event_id),
            f.queue,
            f.rule,
            str(f.attempts),
            "parked" if f.parked else "waiting",
            "-" if f.parked else format_time(f.next_ms),
            _one_line(f.last_error),
        )
        for f in failures
    ]
    return format_table(header, rows)


def format_stats(stats: Mapping[str, int]) -> str:
    """A queue's counters, one per line, sorted by name."""
    width = max(len(name) for name in stats)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in sorted(stats.items()))

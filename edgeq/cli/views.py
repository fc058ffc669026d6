"""How records are shown: a text form for people (``format_*``) and a JSON form for scripts (``*_json``)."""

from __future__ import annotations

import base64
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from edgeq.cli.format import (
    approx_duration,
    field_type,
    format_duration,
    format_field,
    format_rule_spec,
    format_size,
    format_time,
)
from edgeq.message import Message
from edgeq.types import FieldValue
from edgeq.values import Int32, Int64

if TYPE_CHECKING:  # annotations only: `edgeq put` need not load what a listing prints
    from edgeq.events.bindings import BindingInfo
    from edgeq.exchange.holds import HeldGroup
    from edgeq.queues.attributes import QueueAttributes, QueueUsage
    from edgeq.rules.registry import RuleInfo
    from edgeq.store.devices import DeviceRecord, DeviceRefusal
    from edgeq.store.rules import FailureRow

__all__ = [
    "binding_json",
    "device_json",
    "failure_json",
    "format_bindings",
    "format_devices",
    "format_failures",
    "format_held",
    "format_message",
    "format_queue",
    "format_queue_table",
    "format_refusals",
    "format_rules_table",
    "format_stats",
    "format_table",
    "held_json",
    "keyed",
    "message_json",
    "queue_json",
    "refusal_json",
]

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
        return (f"relative Int32({int(message.expiry)}), {format_duration(int(message.expiry))} "
                f"after creation{left_text}")
    if isinstance(message.expiry, Int64):
        return f"absolute Int64({int(message.expiry)}), at {format_time(int(message.expiry))}{left_text}"
    if left is not None:
        return f"the queue's expiry_ms{left_text}"
    return "never"


def format_message(message: Message) -> str:
    """One message as ``get`` and ``browse`` print it."""
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
    """A rule binding as JSON."""
    return {"name": binding.name, "config": binding.config, "persisted": binding.persisted,
            "error": binding.error}


def queue_json(
    attrs: QueueAttributes, usage: QueueUsage, bindings: list[BindingInfo] | None = None
) -> dict[str, Any]:
    """A queue's attributes and usage as JSON."""
    out = {**attrs.as_dict(), "depth": usage.depth, "bytes": usage.bytes}
    if bindings is not None:
        out["rules"] = [binding_json(b) for b in bindings]
    return out


def _redelivery_text(attrs: QueueAttributes) -> str:
    if attrs.redelivery_delay_ms == 0:
        return "at once after a failure"
    first, most = format_duration(attrs.redelivery_delay_ms), format_duration(attrs.max_redelivery_delay_ms)
    return f"after {first}, doubling with each failure up to {most}"


def _limit_text(value: int | None, duration: bool) -> str:
    if value is None:
        return "none"
    return f"{value} ({format_duration(value)})" if duration else str(value)


def _bytes_text(size: int | None) -> str:
    if size is None:
        return "none"
    return str(size) if size < 1024 else f"{size} ({format_size(size)})"


def format_queue(attrs: QueueAttributes, usage: QueueUsage, bindings: list[BindingInfo] | None = None) -> str:
    """A queue's attributes, depth and bytes held, one per line; then its rule bindings, if given."""
    rows: Mapping[str, str] = {
        "queue": attrs.name,
        "depth": str(usage.depth),
        "bytes": _bytes_text(usage.bytes),
        "expiry_ms": _limit_text(attrs.expiry_ms, True),
        "cap_expiry_ms": _limit_text(attrs.cap_expiry_ms, True),
        "max_depth": _limit_text(attrs.max_depth, False),
        "max_bytes": _bytes_text(attrs.max_bytes),
        "on_full": attrs.on_full,
        "max_message_bytes": _limit_text(attrs.max_message_bytes, False),
        "depth_threshold": _limit_text(attrs.depth_threshold, False),
        "default_priority": str(attrs.default_priority),
        "ordering": attrs.ordering,
        "created": format_time(attrs.created_ms),
    }
    if attrs.kind != "local":
        rows = {**rows, "kind": _kind_text(attrs, ": ")}
    if attrs.kind == "remote":
        rows = {**rows,
                "refusal_limit": "default" if attrs.refusal_limit is None else str(attrs.refusal_limit)}
    if attrs.backout_queue is not None:
        rows = {**rows, "backout": f"to {attrs.backout_queue} at {attrs.backout_threshold} undone gets"}
    if attrs.kind != "remote":
        rows = {**rows, "redelivery": _redelivery_text(attrs)}
    if attrs.encryption:
        rows = {**rows, "encryption": attrs.encryption}
    if attrs.compression:
        rows = {**rows, "compression": attrs.compression}
    width = max(len(key) for key in rows)
    lines = [f"{key:<{width}}  {value}" for key, value in rows.items()]
    if bindings is not None:
        rules = format_bindings(bindings).splitlines()
        lines.append(f"{'rules':<{width}}  {rules[0]}")
        lines.extend(f"{'':<{width}}  {line}" for line in rules[1:])
    return "\n".join(lines)


def format_bindings(bindings: list[BindingInfo]) -> str:
    """A queue's rule bindings, one line each."""
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


def _kind_text(attrs: QueueAttributes, sep: str) -> str:
    if attrs.kind == "remote":
        return f"remote{sep}{attrs.target_qmgr}/{attrs.target_queue} ({attrs.mode})"
    return f"home{sep}{attrs.server}" if attrs.kind == "home" else attrs.kind


def format_queue_table(queues: list[tuple[QueueAttributes, QueueUsage]]) -> str:
    """Queues as a table."""
    header = ("QUEUE", "DEPTH", "BYTES", "EXPIRY", "CAP", "MAX-DEPTH", "MAX-BYTES", "PRIO", "ORDERING",
              "KIND")
    rows = [
        (
            a.name,
            str(usage.depth),
            str(usage.bytes),
            "-" if a.expiry_ms is None else format_duration(a.expiry_ms).replace(" ", ""),
            "-" if a.cap_expiry_ms is None else format_duration(a.cap_expiry_ms).replace(" ", ""),
            "-" if a.max_depth is None else str(a.max_depth),
            "-" if a.max_bytes is None else str(a.max_bytes),
            str(a.default_priority),
            a.ordering,
            _kind_text(a, " "),
        )
        for a, usage in queues
    ]
    return format_table(header, rows)


# -- rules, failures and counters ------------------------------------------------------


def format_rules_table(rules: list[RuleInfo]) -> str:
    """The installed rules as a table."""
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
    """Failed rule deliveries, one line each."""
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
    """A queue's statistics, one per line."""
    width = max(len(name) for name in stats)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in sorted(stats.items()))


# -- a home server's devices and held puts ------------------------------------------------


def keyed(devices: Sequence[DeviceRecord]) -> list[tuple[DeviceRecord, str | None]]:
    """Devices with their key's fingerprint, as :func:`device_json` and :func:`format_devices` take them."""
    from edgeq.sync.keys import fingerprint

    return [(d, None if d.public_key is None else fingerprint(d.public_key)) for d in devices]


def device_json(d: DeviceRecord, key: str | None) -> dict[str, Any]:
    """A device and its key's fingerprint as JSON: epoch ms (``*_ms``) with ISO-8601 UTC beside them."""
    return {"name": d.name, "registered": key is not None and d.revoked_ms is None,
            "revoked_ms": d.revoked_ms,
            "revoked": None if d.revoked_ms is None else format_time(d.revoked_ms),
            "fingerprint": key, "queues": None if d.queues is None else list(d.queues),
            "last_seen_ms": d.last_seen_ms,
            "last_seen": None if d.last_seen_ms is None else format_time(d.last_seen_ms),
            "clock_offset_ms": d.clock_offset_ms}


def format_devices(devices: Sequence[tuple[DeviceRecord, str | None]]) -> str:
    """Devices, each with its key's fingerprint, as a table."""
    if not devices:
        return "No devices."
    rows = [
        (d.name,
         f"revoked {format_time(d.revoked_ms)}" if d.revoked_ms is not None
         else "registered" if key is not None else "unregistered",
         key or "-",
         "any" if d.queues is None else ",".join(d.queues) or "none",
         "never" if d.last_seen_ms is None else format_time(d.last_seen_ms))
        for d, key in devices
    ]
    return format_table(("DEVICE", "STATE", "KEY", "QUEUES", "LAST-SEEN"), rows)


def refusal_json(r: DeviceRefusal) -> dict[str, Any]:
    """A refusal record as JSON."""
    return {"device": r.device, "queue": r.queue, "reason": r.reason, "count": r.count,
            "first_ms": r.first_ms, "first": format_time(r.first_ms), "last_ms": r.last_ms,
            "last": format_time(r.last_ms), "last_detail": r.last_detail}


def format_refusals(refusals: Sequence[DeviceRefusal]) -> str:
    """What the server refused, per device, queue and reason."""
    if not refusals:
        return "The server refused no device's messages."
    rows = [(r.device, r.queue, r.reason, str(r.count), format_time(r.last_ms), _one_line(r.last_detail))
            for r in refusals]
    return format_table(("DEVICE", "QUEUE", "REASON", "MESSAGES", "LAST", "LAST-DETAIL"), rows)


def held_json(group: HeldGroup, now_ms: int) -> dict[str, Any]:
    """One device's held puts on one queue as JSON (``age_ms``: of the oldest, at ``now_ms``)."""
    return {"device": group.sender, "queue": group.queue, "messages": group.messages, "bytes": group.bytes,
            "oldest_ms": group.oldest_ms, "oldest": format_time(group.oldest_ms),
            "age_ms": max(0, now_ms - group.oldest_ms)}


def format_held(groups: Sequence[HeldGroup], now_ms: int) -> str:
    """Held (unconfirmed) puts, per device and queue."""
    if not groups:
        return "No unconfirmed puts are held."
    rows = [
        (g.sender, g.queue, str(g.messages), format_size(g.bytes),
         f"{format_time(g.oldest_ms)} ({approx_duration(max(0, now_ms - g.oldest_ms))} ago)")
        for g in groups
    ]
    return format_table(("DEVICE", "QUEUE", "MESSAGES", "BYTES", "OLDEST"), rows)

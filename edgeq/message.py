"""The message: data plus typed fields, priority, expiry and identity."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Any

from edgeq.errors import InvalidArgument, InvalidType
from edgeq.expiry import absolute_ms, check_expiry, own_deadline, relative_ms
from edgeq.names import check_name
from edgeq.types import FieldValue, ReportOption
from edgeq.uid import MessageUID
from edgeq.values import Int32, Int64

__all__ = ["Message", "check_fields"]

MAX_FIELD_NAME = 255
MAX_CORRELATION_ID = 1024
_NO_FIELDS: Mapping[str, FieldValue] = MappingProxyType({})


def _check_field_value(name: str, value: object) -> FieldValue:
    if isinstance(value, (bool, str, float, Int32, Int64)):
        return value
    if isinstance(value, int):
        return Int64(value)  # bare ints are MQe longs
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise InvalidType(
        f"field {name!r} has a value of type {type(value).__name__}; field values "
        "must be str, bytes, bool, float, int, Int32 or Int64"
    )


def check_fields(fields: object) -> dict[str, FieldValue]:
    """Validate a fields mapping, normalising bare ints to Int64 and buffers to bytes."""
    if fields is None or (type(fields) is dict and not fields):  # most messages: no ABC check
        return {}
    if not isinstance(fields, Mapping):
        raise InvalidType(f"fields must be a mapping of name to value, not {type(fields).__name__}")
    out: dict[str, FieldValue] = {}
    for name, value in fields.items():
        if not isinstance(name, str) or not 1 <= len(name) <= MAX_FIELD_NAME:
            raise InvalidArgument(f"field name {name!r} must be a str of 1 to {MAX_FIELD_NAME} characters")
        out[name] = _check_field_value(name, value)
    return out


def check_priority(priority: object, what: str = "priority") -> int | None:
    """Validate a message priority (0 lowest .. 9 highest, or None)."""
    if priority is None:
        return None
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise InvalidType(f"{what} must be an int from 0 to 9, not {priority!r}")
    if not 0 <= priority <= 9:
        raise InvalidArgument(f"{what} {priority} is out of range: use 0 (lowest) to 9 (highest)")
    return int(priority)


@dataclass(frozen=True, slots=True, repr=False)
class Message:
    """A message: ``data`` bytes plus typed ``fields``; immutable (:meth:`replace`). ``get`` and
    ``browse`` set ``uid``, ``created_ms``, ``backout_count``, ``remaining_expiry_ms``; a put keeps a ``uid``.

    >>> m = Message(b"reading", fields={"sensor": "t1"}, priority=7).expire_after(60_000)
    >>> m.expiry, m.priority, m.fields["sensor"]
    (Int32(60000), 7, 't1')
    """

    data: bytes
    fields: Mapping[str, FieldValue] = field(default_factory=dict, kw_only=True)
    priority: int | None = field(default=None, kw_only=True)
    expiry: Int32 | Int64 | None = field(default=None, kw_only=True)
    correlation_id: bytes | None = field(default=None, kw_only=True)
    reply_to: str | None = field(default=None, kw_only=True)
    resend: bool = field(default=False, kw_only=True)
    #: a report to ``reply_to`` if the message is discarded for expiry (the ``expiry-report`` rule)
    expiry_report: ReportOption = field(default="none", kw_only=True)
    uid: MessageUID | None = field(default=None, kw_only=True)
    created_ms: int | None = field(default=None, kw_only=True)
    backout_count: int = field(default=0, kw_only=True)
    remaining_expiry_ms: int | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        data: Any = self.data
        if isinstance(data, str):
            raise InvalidType("message data must be bytes, not str: encode it first, e.g. text.encode()")
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise InvalidType(f"message data must be bytes, not {type(data).__name__}")
        setattr_ = object.__setattr__  # frozen: normalise once, here
        setattr_(self, "data", bytes(data))
        setattr_(self, "fields", MappingProxyType(check_fields(self.fields)))
        check_priority(self.priority)
        check_expiry(self.expiry)
        if self.correlation_id is not None:
            if not isinstance(self.correlation_id, (bytes, bytearray)):
                raise InvalidType(f"correlation_id must be bytes, not {type(self.correlation_id).__name__}")
            if len(self.correlation_id) > MAX_CORRELATION_ID:
                raise InvalidArgument(f"correlation_id is longer than {MAX_CORRELATION_ID} bytes")
            setattr_(self, "correlation_id", bytes(self.correlation_id))
        if self.reply_to is not None:
            check_name(self.reply_to, "reply_to queue name")
        if self.expiry_report not in ("none", "with-data", "with-full-data"):
            raise InvalidArgument(
                f"expiry_report must be 'none', 'with-data' or 'with-full-data', not {self.expiry_report!r}"
            )
        if not isinstance(self.resend, bool):
            raise InvalidType(f"resend must be a bool, not {self.resend!r}")
        if self.uid is not None and not isinstance(self.uid, MessageUID):
            raise InvalidType(f"uid must be a MessageUID, not {type(self.uid).__name__}")
        if self.created_ms is None and self.uid is not None:
            setattr_(self, "created_ms", self.uid.created_ms)
        if self.created_ms is not None and (
            isinstance(self.created_ms, bool) or not isinstance(self.created_ms, int)
        ):
            raise InvalidType(f"created_ms must be an int (epoch ms), not {self.created_ms!r}")

    @classmethod
    def _checked(cls, data: bytes, *, priority: int | None, expiry: Int64 | None, resend: bool,
                 expiry_report: ReportOption, uid: MessageUID, created_ms: int | None) -> Message:
        """A message without fields, correlation id or reply-to, of values its caller checked as the
        constructor does (a sync put's: ``edgeq.sync.messages``): no checks, a batch's hot path."""
        message, set_ = object.__new__(cls), object.__setattr__
        set_(message, "data", data)
        set_(message, "fields", _NO_FIELDS)
        set_(message, "priority", priority)
        set_(message, "expiry", expiry)
        set_(message, "correlation_id", None)
        set_(message, "reply_to", None)
        set_(message, "resend", resend)
        set_(message, "expiry_report", expiry_report)
        set_(message, "uid", uid)
        set_(message, "created_ms", uid.created_ms if created_ms is None else created_ms)
        set_(message, "backout_count", 0)
        set_(message, "remaining_expiry_ms", None)
        return message

    def __repr__(self) -> str:
        data = self.data if len(self.data) <= 32 else self.data[:32] + b"..."
        parts = [repr(data)]
        for name in ("uid", "priority", "expiry", "remaining_expiry_ms", "correlation_id", "reply_to"):
            value = getattr(self, name)
            if value is not None:
                parts.append(f"{name}={str(value) if name == 'uid' else repr(value)}")
        if self.fields:
            parts.append(f"fields={dict(self.fields)!r}")
        if self.resend:
            parts.append("resend=True")
        if self.expiry_report != "none":
            parts.append(f"expiry_report={self.expiry_report!r}")
        if self.backout_count:
            parts.append(f"backout_count={self.backout_count}")
        return f"Message({', '.join(parts)})"

    def __reduce__(self) -> tuple[Any, ...]:
        # MappingProxyType does not pickle; rebuild through the constructor.
        kwargs = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "data"}
        kwargs["fields"] = dict(self.fields)
        return (_rebuild, (self.data, kwargs))

    def replace(self, **changes: Any) -> Message:
        """A copy with ``changes`` applied (validated like the constructor)."""
        if "fields" not in changes:
            changes["fields"] = dict(self.fields)
        return dataclasses.replace(self, **changes)

    def expire_after(self, after: int | timedelta) -> Message:
        """A copy that expires ``after`` ms (or a timedelta) after its creation."""
        return self.replace(expiry=relative_ms(after))

    def expire_at(self, when: datetime | int) -> Message:
        """A copy that expires at ``when``: an aware datetime or epoch ms."""
        return self.replace(expiry=absolute_ms(when))

    @property
    def expiry_deadline_ms(self) -> int | None:
        """The epoch ms its own expiry passes at (None: none, or relative and not put yet)."""
        if isinstance(self.expiry, Int32) and self.created_ms is None:
            return None
        return own_deadline(self.expiry, self.created_ms or 0)


def _rebuild(data: bytes, kwargs: dict[str, Any]) -> Message:
    return Message(data, **kwargs)

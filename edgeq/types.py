"""Type aliases used across edgeq's public API."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Literal, TypeAlias

from edgeq.values import Int32, Int64

__all__ = [
    "Clock",
    "Durability",
    "Expiry",
    "FieldValue",
    "Fields",
    "Filter",
    "Ordering",
    "QueueKind",
    "RemovalReason",
    "ReportOption",
    "Where",
]

#: A message field value, as MQe's typed fields. A bare int is stored as Int64.
FieldValue: TypeAlias = str | bytes | bool | float | Int32 | Int64
Fields: TypeAlias = Mapping[str, FieldValue]
#: Equality filter on fields, as for ``browse(filter=...)``.
Filter: TypeAlias = Mapping[str, FieldValue | int]
#: Relative (Int32, ms after creation) or absolute (Int64, epoch ms) expiry.
Expiry: TypeAlias = Int32 | Int64
#: Returns the current time in epoch milliseconds.
Clock: TypeAlias = Callable[[], int]
Ordering: TypeAlias = Literal["priority", "fifo"]
Durability: TypeAlias = Literal["full", "normal"]
#: Where an expired message was discarded: MQe's check points plus the sweep.
Where: TypeAlias = Literal["add", "get", "browse", "activate", "delete", "depth", "sweep"]
#: Why a message left a queue other than by expiring.
RemovalReason: TypeAlias = Literal["got", "confirmed", "deleted", "purged", "transmitted", "quarantined"]
QueueKind: TypeAlias = Literal["local", "remote", "home"]
#: Whether (and with how much data) an expiry report is wanted when a message is
#: discarded for expiry (IBM MQ's MQRO_EXPIRATION*): the first 100 bytes, or all.
ReportOption: TypeAlias = Literal["none", "with-data", "with-full-data"]

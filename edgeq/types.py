"""edgeq's vocabulary: every type alias, state, status, check point, code and limit
of the public API and the wire, defined once here and imported everywhere else
(the core, the store's SQL, the rules, ``edgeq.sync.protocol`` and the agent).
Definitions only: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from enum import IntEnum
from typing import Final, Literal, TypeAlias, get_args

from edgeq.values import Int32, Int64

__all__ = [
    "CHECK_POINTS",
    "CONFIRM_STATUSES",
    "EVENT_KINDS",
    "FIELD_CODES",
    "MAX_CONFIRM_ID",
    "MAX_INT64",
    "MAX_STAMP",
    "ON_FULL",
    "PUT_STATUSES",
    "Clock",
    "ConfirmStatus",
    "Durability",
    "EventKind",
    "Expiry",
    "FieldValue",
    "Fields",
    "Filter",
    "MessageState",
    "OnFull",
    "Ordering",
    "PutStatus",
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
#: overflow: discarded to make room under a queue's ``on_full`` strategy; refused: a
#: remote queue's message the target kept refusing, given up (``refusal_limit``);
#: backout: moved to the queue's ``backout_queue``, its assured gets undone
#: ``backout_threshold`` times (IBM MQ's BOTHRESH/BOQNAME).
RemovalReason: TypeAlias = Literal[
    "got", "confirmed", "deleted", "purged", "transmitted", "quarantined", "overflow", "refused", "backout"
]
#: What a put does when a queue (or the store) is full: refuse it (``QueueFull``), or
#: make room by discarding the oldest ready messages, or the lowest-priority oldest.
OnFull: TypeAlias = Literal["reject", "discard-oldest", "discard-lowest-priority"]
ON_FULL: Final = get_args(OnFull)
QueueKind: TypeAlias = Literal["local", "remote", "home"]
#: Whether (and with how much data) an expiry report is wanted when a message is
#: discarded for expiry (IBM MQ's MQRO_EXPIRATION*): the first 100 bytes, or all.
ReportOption: TypeAlias = Literal["none", "with-data", "with-full-data"]
#: What a rule hook is told about (``QueueRule.on_<kind>``).
EventKind: TypeAlias = Literal[
    "activated", "added", "removed", "expired", "duplicate", "threshold", "closed", "queue_deleted"
]
EVENT_KINDS: Final = get_args(EventKind)
CHECK_POINTS: Final = get_args(Where)

#: What ``put_each`` did with each message. stored: kept (locked if assured);
#: replaced: a resend replaced an unconfirmed copy; unconfirmed: an unconfirmed copy
#: is held and this was not a resend; duplicate: already confirmed (held, consumed,
#: or remembered); expired: discarded on arrival; refused: too large, queue full, no
#: such queue (see ``detail``).
PutStatus: TypeAlias = Literal["stored", "replaced", "unconfirmed", "duplicate", "expired", "refused"]
#: What ``confirm_put_each`` did with each uid. confirmed: now visible; already: was
#: confirmed before; unknown: not held (put it again); expired: it expired while
#: locked and was discarded; refused: the queue does not exist (sync only).
ConfirmStatus: TypeAlias = Literal["confirmed", "already", "unknown", "expired", "refused"]
PUT_STATUSES: Final = get_args(PutStatus)
CONFIRM_STATUSES: Final = get_args(ConfirmStatus)


class MessageState(IntEnum):
    """A message row's ``state`` column, used as these ints in SQL too
    (``WHERE state = {MessageState.READY:d}``)."""

    READY = 0  #: visible to get and browse
    PUT_LOCKED = 1  #: an assured put awaiting its confirm: invisible
    GET_LOCKED = 2  #: taken by an assured get awaiting its confirm or undo: invisible


#: A typed field's one-letter code, in the store and on the wire ({name: [code, value]}).
#: bool comes first: True is an int in Python, so a bool must be matched before numbers.
FIELD_CODES: Final[Mapping[str, type]] = {"?": bool, "i": Int32, "l": Int64, "s": str, "b": bytes, "f": float}
#: The largest SQLite INTEGER (a signed 64-bit int): stamps (uids) and confirm ids
#: are positive ints up to it.
MAX_INT64: Final = 2**63 - 1
MAX_STAMP: Final = MAX_INT64
MAX_CONFIRM_ID: Final = MAX_INT64

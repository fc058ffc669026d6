"""edgeq's vocabulary: every alias, state, status, check point, code and limit, defined once here."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from enum import IntEnum
from typing import Final, Literal, TypeAlias, get_args

from edgeq.values import Int32, Int64

__all__ = [
    "CHECK_POINTS",
    "CONFIRM_STATUSES",
    "DEAD_LETTER_QUEUE_KEY",
    "DEFAULT_DEAD_LETTER_QUEUE",
    "DEFAULT_MAX_REDELIVERY_DELAY_MS",
    "DEFAULT_REDELIVERY_DELAY_MS",
    "DLQ_ATTEMPTS",
    "DLQ_AT_MS",
    "DLQ_ORIGINAL_EXPIRY",
    "DLQ_PREFIX",
    "DLQ_QUEUE",
    "DLQ_REASON",
    "DLQ_REFUSAL",
    "DLQ_WHERE",
    "EVENT_KINDS",
    "FIELD_CODES",
    "MAX_CONFIRM_ID",
    "MAX_INT64",
    "MAX_REDELIVERY_DELAY_MS",
    "MAX_STAMP",
    "ON_FULL",
    "PUT_STATUSES",
    "REMOVAL_REASONS",
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
#: remote queue's message its target refused ``refusal_limit`` times, moved to the dead-letter queue;
#: backout: moved to the queue's ``backout_queue``, its assured gets undone
#: ``backout_threshold`` times (IBM MQ's BOTHRESH/BOQNAME); resent: moved from the
#: dead-letter queue back to the queue it left (``QueueManager.dlq_resend``).
RemovalReason: TypeAlias = Literal[
    "got", "confirmed", "deleted", "purged", "transmitted", "quarantined", "overflow", "refused", "backout",
    "resent",
]
#: The dead-letter queue of every store unless its operator names another
#: (``QueueManager.set_dead_letter_queue``): IBM MQ's name. Made when first needed.
DEFAULT_DEAD_LETTER_QUEUE: Final = "SYSTEM.DEAD.LETTER.QUEUE"
#: The ``edgeq_meta`` key naming the dead-letter queue its operator chose (absent: the default).
DEAD_LETTER_QUEUE_KEY: Final = "dead_letter_queue"
#: The header a dead-lettered message carries, as fields (IBM MQ's MQDLH), all under
#: ``DLQ_PREFIX`` (a re-send removes them): why (``refused``, or a rule's reason), the
#: queue it left, the target's last refusal, how often it was refused, when (epoch ms),
#: and for a ``dead-letter`` rule's copy of an expired message, its check point and expiry.
DLQ_PREFIX: Final = "dlq."
DLQ_REASON: Final = "dlq.reason"
DLQ_QUEUE: Final = "dlq.queue"
DLQ_REFUSAL: Final = "dlq.refusal"
DLQ_ATTEMPTS: Final = "dlq.attempts"
DLQ_AT_MS: Final = "dlq.at_ms"
DLQ_WHERE: Final = "dlq.where"
DLQ_ORIGINAL_EXPIRY: Final = "dlq.original_expiry"
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
REMOVAL_REASONS: Final = get_args(RemovalReason)

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
    """A message row's ``state`` column, used as these ints in SQL too."""

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
#: A message backed out (a failed delivery) is got again only after a delay: a queue's
#: ``redelivery_delay_ms`` (0: at once), doubling with each backout up to its
#: ``max_redelivery_delay_ms``; both at most ``MAX_REDELIVERY_DELAY_MS`` (a day).
DEFAULT_REDELIVERY_DELAY_MS: Final = 1_000
DEFAULT_MAX_REDELIVERY_DELAY_MS: Final = 300_000
MAX_REDELIVERY_DELAY_MS: Final = 86_400_000

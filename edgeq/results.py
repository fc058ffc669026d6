"""Per-message outcomes of batch operations (``put_each``, ``confirm_put_each``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypeAlias

from edgeq.errors import EdgeqError
from edgeq.uid import MessageUID

__all__ = ["ConfirmResult", "ConfirmStatus", "PutResult", "PutStatus", "QuarantineEntry"]

#: stored: kept (locked if assured); replaced: a resend replaced an unconfirmed
#: copy; unconfirmed: an unconfirmed copy is held and this was not a resend;
#: duplicate: already confirmed (held, consumed, or remembered); expired:
#: discarded on arrival; refused: too large, queue full (see ``detail``).
PutStatus: TypeAlias = Literal["stored", "replaced", "unconfirmed", "duplicate", "expired", "refused"]
#: confirmed: now visible; already: was confirmed before; unknown: not held
#: (put it again); expired: it expired while locked and was discarded.
ConfirmStatus: TypeAlias = Literal["confirmed", "already", "unknown", "expired"]


@dataclass(frozen=True, slots=True)
class PutResult:
    """What happened to one message of a ``put_each`` batch."""

    uid: MessageUID
    status: PutStatus
    detail: str = ""
    error: EdgeqError | None = None


@dataclass(frozen=True, slots=True)
class ConfirmResult:
    """What happened to one uid of a ``confirm_put_each`` batch."""

    uid: MessageUID
    status: ConfirmStatus


@dataclass(frozen=True, slots=True)
class QuarantineEntry:
    """A row set aside because it failed its integrity check (kept whole in the store)."""

    id: int
    queue: str
    uid: str
    at_ms: int
    reason: str

"""Per-message outcomes of batch operations (``put_each``, ``confirm_put_each``)."""

from __future__ import annotations

from dataclasses import dataclass

from edgeq.errors import EdgeqError
from edgeq.types import ConfirmStatus, PutStatus
from edgeq.uid import MessageUID

__all__ = ["ConfirmResult", "ConfirmStatus", "PutResult", "PutStatus", "QuarantineEntry"]

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

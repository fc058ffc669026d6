"""Message identity: an origin (the queue manager's name and its store's incarnation) and a
64-bit stamp, ``created_ms * 1000 + n``. See docs/storage.md, "Uids"."""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from edgeq.errors import InvalidArgument, InvalidType
from edgeq.names import INCARNATION_SEPARATOR, check_origin, origin_qmgr
from edgeq.types import MAX_STAMP

__all__ = ["MessageUID", "new_incarnation"]

_INCARNATION_ALPHABET = "abcdefghijklmnopqrstuvwxyz234567"
_INCARNATION_LENGTH = 10  # 50 bits: ~500,000 re-creations of one name for a 1-in-10,000 clash


def new_incarnation() -> str:
    """A fresh random incarnation token for a new store (10 of ``a-z2-7``)."""
    return "".join(secrets.choice(_INCARNATION_ALPHABET) for _ in range(_INCARNATION_LENGTH))


@dataclass(frozen=True, order=True, slots=True)
class MessageUID:
    """The network-wide identity of a message.

    >>> uid = MessageUID.parse("DEV1:k3x9qam2pa.1763683200000123")
    >>> str(uid), uid.qmgr, uid.incarnation, MessageUID.parse("DEV1.42").incarnation
    ('DEV1:k3x9qam2pa.1763683200000123', 'DEV1', 'k3x9qam2pa', None)
    """

    origin: str
    stamp: int

    def __post_init__(self) -> None:
        check_origin(self.origin)
        if isinstance(self.stamp, bool) or not isinstance(self.stamp, int):
            raise InvalidType(f"MessageUID stamp must be an int, not {self.stamp!r}")
        if not 0 < self.stamp <= MAX_STAMP:
            raise InvalidArgument(
                f"MessageUID stamp {self.stamp} is out of range: it must be a positive 64-bit int"
            )

    @classmethod
    def _trusted(cls, origin: str, stamp: int) -> MessageUID:
        """A uid from a validated origin and a stamp the store issued: no checks (every put's path)."""
        uid = object.__new__(cls)
        object.__setattr__(uid, "origin", origin)
        object.__setattr__(uid, "stamp", stamp)
        return uid

    def __str__(self) -> str:
        return f"{self.origin}.{self.stamp}"

    @classmethod
    def parse(cls, text: str) -> MessageUID:
        """Parse the string form ``ORIGIN.STAMP`` back into a uid."""
        if not isinstance(text, str):
            raise InvalidType(f"MessageUID.parse takes a str, not {type(text).__name__}")
        origin, dot, stamp = text.rpartition(".")
        if not dot or not stamp.isdigit() or not stamp.isascii():
            raise InvalidArgument(
                f"{text!r} is not a message uid: expected ORIGIN.STAMP, "
                "e.g. 'DEV1:k3x9qam2pa.1763683200000123'"
            )
        return cls(origin, int(stamp))

    @property
    def qmgr(self) -> str:
        """The name of the queue manager that created the message."""
        return origin_qmgr(self.origin)

    @property
    def incarnation(self) -> str | None:
        """The incarnation of the store that created the message (None for an older store)."""
        return self.origin.partition(INCARNATION_SEPARATOR)[2] or None

    @property
    def created_ms(self) -> int:
        """The creation time the stamp encodes, in epoch milliseconds (approximate)."""
        return self.stamp // 1000

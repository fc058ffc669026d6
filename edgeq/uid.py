"""Message identity: origin + a 64-bit creation stamp.

The origin is the queue manager's name and its store's **incarnation**, a random
token drawn when the store file is created (``DEV1:k3x9qam2pa``; IBM MQ's QMID
plays the same part): a store deleted and made again under the same name, or a
second store given the same name by mistake, issues uids that can never collide
with the first one's, whatever its clock says. Uids of stores made before
incarnations existed have a bare name as origin (``DEV1.1763683200000123``).

The stamp is ``created_ms * 1000 + n``: readable as a time, yet unique and
strictly increasing within its store (see ``edgeq.store.tx`` for how it is kept
monotonic across clock steps, threads, processes and restarts).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from edgeq.errors import InvalidArgument, InvalidType
from edgeq.names import INCARNATION_SEPARATOR, check_origin, origin_qmgr
from edgeq.types import MAX_STAMP

__all__ = ["MessageUID", "new_incarnation"]

_INCARNATION_ALPHABET = "abcdefghijklmnopqrstuvwxyz234567"
_INCARNATION_LENGTH = 10  # 50 random bits: ~500,000 re-creations of one name for a 1-in-10,000 clash


def new_incarnation() -> str:
    """A fresh random incarnation token for a new store (10 of ``a-z2-7``).

    >>> token = new_incarnation(); len(token), token.isalnum()
    (10, True)
    """
    return "".join(secrets.choice(_INCARNATION_ALPHABET) for _ in range(_INCARNATION_LENGTH))


@dataclass(frozen=True, order=True, slots=True)
class MessageUID:
    """The network-wide identity of a message.

    >>> uid = MessageUID("DEV1:k3x9qam2pa", 1763683200000123)
    >>> str(uid)
    'DEV1:k3x9qam2pa.1763683200000123'
    >>> MessageUID.parse("DEV1:k3x9qam2pa.1763683200000123") == uid
    True
    >>> uid.qmgr, uid.incarnation
    ('DEV1', 'k3x9qam2pa')
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
        """A uid from a validated origin and a stamp the store issued (no re-validation:
        this is on every put's path)."""
        uid = object.__new__(cls)
        object.__setattr__(uid, "origin", origin)
        object.__setattr__(uid, "stamp", stamp)
        return uid

    def __str__(self) -> str:
        return f"{self.origin}.{self.stamp}"

    @classmethod
    def parse(cls, text: str) -> MessageUID:
        """Parse the string form ``ORIGIN.STAMP`` back into a uid.

        >>> MessageUID.parse("HOME.SRV.42")
        MessageUID(origin='HOME.SRV', stamp=42)
        """
        if not isinstance(text, str):
            raise InvalidType(f"MessageUID.parse takes a str, not {type(text).__name__}")
        origin, dot, stamp = text.rpartition(".")
        if not dot or not stamp.isdigit() or not stamp.isascii():
            raise InvalidArgument(
                f"{text!r} is not a message uid: expected ORIGIN.STAMP, e.g. 'DEV1:k3x9qam2pa.1763683200000123'"
            )
        return cls(origin, int(stamp))

    @property
    def qmgr(self) -> str:
        """The name of the queue manager that created the message.

        >>> MessageUID.parse("DEV1:k3x9qam2pa.42").qmgr
        'DEV1'
        """
        return origin_qmgr(self.origin)

    @property
    def incarnation(self) -> str | None:
        """The incarnation of the store that created the message (None for an older store).

        >>> MessageUID.parse("DEV1.42").incarnation is None
        True
        """
        return self.origin.partition(INCARNATION_SEPARATOR)[2] or None

    @property
    def created_ms(self) -> int:
        """The creation time the stamp encodes, in epoch milliseconds (approximate)."""
        return self.stamp // 1000

"""Message identity: origin queue manager name + a 64-bit creation stamp.

The stamp is ``created_ms * 1000 + n``: readable as a time, yet unique and
strictly increasing within its queue manager (see ``edgeq.store`` for how it is
kept monotonic across clock steps, threads, processes and restarts).
"""

from __future__ import annotations

from dataclasses import dataclass

from edgeq.errors import InvalidArgument, InvalidType
from edgeq.names import check_name

__all__ = ["MessageUID"]

_MAX_STAMP = 2**63 - 1


@dataclass(frozen=True, order=True, slots=True)
class MessageUID:
    """The network-wide identity of a message.

    >>> uid = MessageUID("DEV1", 1763683200000123)
    >>> str(uid)
    'DEV1.1763683200000123'
    >>> MessageUID.parse("DEV1.1763683200000123") == uid
    True
    """

    origin: str
    stamp: int

    def __post_init__(self) -> None:
        check_name(self.origin, "MessageUID origin")
        if isinstance(self.stamp, bool) or not isinstance(self.stamp, int):
            raise InvalidType(f"MessageUID stamp must be an int, not {self.stamp!r}")
        if not 0 < self.stamp <= _MAX_STAMP:
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
                f"{text!r} is not a message uid: expected ORIGIN.STAMP, e.g. 'DEV1.1763683200000123'"
            )
        return cls(origin, int(stamp))

    @property
    def created_ms(self) -> int:
        """The creation time the stamp encodes, in epoch milliseconds (approximate)."""
        return self.stamp // 1000

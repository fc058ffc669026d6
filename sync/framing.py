"""Compressed bodies on the wire: the negotiation at hello and the framing of a body
(docs/protocol.md, "Compression"). Pure (no HTTP); the codecs are :mod:`edgeq.encoding.compression`'s.

>>> raw, headers = frame("zlib", b"\\xa1av\\x01" * 100)
>>> headers, unframe("zlib", raw, max_bytes=1_000) == b"\\xa1av\\x01" * 100
({'X-Edgeq-Encoding': 'zlib'}, True)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from edgeq.encoding.compression import CODECS, BodyTooLarge, Codec, CorruptBody, compress, decompress
from edgeq.sync import protocol as p

__all__ = [
    "H_ACCEPT",
    "H_ENCODING",
    "MAX_ANSWER_BYTES",
    "MIN_BYTES",
    "accepted",
    "answer_codec",
    "frame",
    "negotiate",
    "unframe",
]

#: The header naming the codec a body is compressed with (absent: not compressed); not HTTP's
#: ``Content-Encoding``, which clients and proxies decode on their own, without edgeq's bounds.
H_ENCODING: Final = "X-Edgeq-Encoding"
#: The header of a request whose answer may come compressed with the codec it names.
H_ACCEPT: Final = "X-Edgeq-Accept-Encoding"
#: Bodies shorter than this go as they are: a hello, an error, a confirm of one uid.
MIN_BYTES: Final = 256
#: The most a device decompresses one answer to: four times a server's default body limit.
MAX_ANSWER_BYTES: Final = 64 << 20


def negotiate(offered: object, supported: Sequence[Codec]) -> list[Codec]:
    """The server's answer to a hello's ``compression`` list: those offered it supports too, in its order."""
    if not isinstance(offered, list):
        return []
    return [c for c in supported if c in offered]


def accepted(answer: object, advertised: Sequence[Codec]) -> tuple[Codec, ...]:
    """The codecs a hello answer says the server takes, of those this end advertised only."""
    if not isinstance(answer, list):
        return ()
    return tuple(c for c in advertised if c in answer)


def answer_codec(asked: str | None, supported: Sequence[Codec]) -> Codec | None:
    """The codec to compress an answer with: the first of the request's :data:`H_ACCEPT` this end supports."""
    if not asked:
        return None
    wanted = [w.strip() for w in asked.split(",")]
    return next((s for c in wanted for s in supported if c == s), None)


def frame(codec: Codec | None, raw: bytes) -> tuple[bytes, dict[str, str]]:
    """A body as sent and its header: compressed with ``codec``, or as it is if that would not shrink it."""
    if codec is None or len(raw) < MIN_BYTES:
        return raw, {}
    packed = compress(codec, raw)
    if len(packed) + len(H_ENCODING) + len(codec) + 4 >= len(raw):  # the header costs too
        return raw, {}
    return packed, {H_ENCODING: codec}


def unframe(
    encoding: str | None, raw: bytes, *, max_bytes: int, supported: Sequence[Codec] = CODECS
) -> bytes:
    """A body as received, decompressed as its :data:`H_ENCODING` says to at most ``max_bytes``;
    raises ``ProtocolError`` ``unsupported-media-type``, ``too-large`` or ``malformed``."""
    if encoding is None:
        return raw
    codec = next((c for c in supported if c == encoding.strip().lower()), None)
    if codec is None:
        takes = ", ".join(supported) or "none"
        raise p.ProtocolError(
            "unsupported-media-type",
            f"{H_ENCODING} {encoding[:20]!r} is not a codec this end decodes (it takes: {takes})",
        )
    try:
        return decompress(codec, raw, max_bytes=max_bytes)
    except BodyTooLarge as exc:
        raise p.ProtocolError("too-large", f"{exc}; send smaller batches") from None
    except CorruptBody as exc:
        raise p.ProtocolError("malformed", str(exc)) from None

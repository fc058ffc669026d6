"""Compressed bodies on the wire: the negotiation at hello and the framing of a body
(``docs/protocol.md``, "Compression"). Pure (no HTTP client or server), so both ends
share it; the codecs themselves are :mod:`edgeq.encoding.compression`'s.

* **Negotiated at hello.** The agent's hello lists the codecs it can encode and decode
  (``"compression": ["zstd", "zlib"]``); the server answers those of them it takes too
  (:func:`negotiate`). A peer that does not know compression sends no list, or answers
  none: it gets and sends plain bodies, as before.
* **A body is compressed as a whole** (the CBOR map, not each message) and marked with
  the header :data:`H_ENCODING` (``X-Edgeq-Encoding: zstd``): both a request (a push's
  put and confirm, a pull's pull-confirm) and an answer, which the server compresses
  only when the request asked with :data:`H_ACCEPT`. A body under :data:`MIN_BYTES`, or
  one that compression would not shrink (header included), is sent as it is.
* **Signatures cover the bytes sent**, compressed: the server checks a signature before
  it decompresses anything, so only a device holding a key can make it decompress.
* **Decompression is bounded** by the receiver's limit (the server's ``max_body_bytes``):
  a bomb is refused (413) before the memory is spent, a damaged body is ``malformed``.

>>> raw, headers = frame("zlib", b"\\xa1av\\x01" * 100)
>>> headers, len(raw) < 400
({'X-Edgeq-Encoding': 'zlib'}, True)
>>> unframe("zlib", raw, max_bytes=1_000) == b"\\xa1av\\x01" * 100
True
>>> negotiate(["br", "zlib"], ("zstd", "zlib"))
['zlib']
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

#: The header naming the codec a body is compressed with (absent: not compressed).
#: Not HTTP's own ``Content-Encoding``, which HTTP clients and proxies decode (or
#: re-encode) on their own, without edgeq's bounds.
H_ENCODING: Final = "X-Edgeq-Encoding"
#: The header of a request whose answer may come compressed with the codec it names.
H_ACCEPT: Final = "X-Edgeq-Accept-Encoding"
#: Bodies shorter than this go as they are: a hello, an error, a confirm of one uid.
MIN_BYTES: Final = 256
#: The most a device decompresses one answer to: four times the largest body a server takes
#: by default (16 MiB), room for a pull of large messages, and what an edge device can
#: spare; a server answering more (hostile or broken) is refused before the memory is spent.
MAX_ANSWER_BYTES: Final = 64 << 20


def negotiate(offered: object, supported: Sequence[Codec]) -> list[Codec]:
    """The server's answer to a hello's ``compression`` list: the codecs offered that it
    supports too, in its order of preference (nothing for anything but a list of names)."""
    if not isinstance(offered, list):
        return []
    return [c for c in supported if c in offered]


def accepted(answer: object, advertised: Sequence[Codec]) -> tuple[Codec, ...]:
    """The codecs a hello answer says the server takes (an older server says nothing:
    none), only those this end advertised: an answer cannot make it use another."""
    if not isinstance(answer, list):
        return ()
    return tuple(c for c in advertised if c in answer)


def answer_codec(asked: str | None, supported: Sequence[Codec]) -> Codec | None:
    """The codec to compress an answer with: the request's :data:`H_ACCEPT`, if this end
    supports it (a list, ``"zstd, zlib"``: the first it supports)."""
    if not asked:
        return None
    wanted = [w.strip() for w in asked.split(",")]
    return next((s for c in wanted for s in supported if c == s), None)


def frame(codec: Codec | None, raw: bytes) -> tuple[bytes, dict[str, str]]:
    """A body as sent: ``raw`` compressed with ``codec`` and its header, or ``raw`` as it
    is and no header (no codec, too short to gain, or it did not shrink)."""
    if codec is None or len(raw) < MIN_BYTES:
        return raw, {}
    packed = compress(codec, raw)
    if len(packed) + len(H_ENCODING) + len(codec) + 4 >= len(raw):  # the header costs too
        return raw, {}
    return packed, {H_ENCODING: codec}


def unframe(encoding: str | None, raw: bytes, *, max_bytes: int, supported: Sequence[Codec] = CODECS) -> bytes:
    """A body as received, decompressed if ``encoding`` (its :data:`H_ENCODING`) says so,
    to at most ``max_bytes``; raises :class:`~edgeq.sync.protocol.ProtocolError`:
    ``unsupported-media-type`` (a codec this end does not take), ``too-large`` (it would
    decompress beyond ``max_bytes``: refused before the memory is spent), ``malformed``
    (it does not decompress: damaged, truncated, trailing bytes)."""
    if encoding is None:
        return raw
    codec = next((c for c in supported if c == encoding.strip().lower()), None)
    if codec is None:
        takes = ", ".join(supported) or "none"
        raise p.ProtocolError("unsupported-media-type",
                              f"{H_ENCODING} {encoding[:20]!r} is not a codec this end decodes (it takes: {takes})")
    try:
        return decompress(codec, raw, max_bytes=max_bytes)
    except BodyTooLarge as exc:
        raise p.ProtocolError("too-large", f"{exc}; send smaller batches") from None
    except CorruptBody as exc:
        raise p.ProtocolError("malformed", str(exc)) from None

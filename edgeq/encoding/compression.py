"""Whole-body compression: the codecs a queue may name, and decompression within a bound (a body
may be a zip bomb). Negotiation and framing: docs/protocol.md, "Compression".

>>> body = b'{"t": 21.5}' * 100
>>> packed = compress("zlib", body)
>>> len(packed) < len(body), decompress("zlib", packed, max_bytes=10_000) == body
(True, True)
>>> try:
...     decompress("zlib", packed, max_bytes=100)
... except BodyTooLarge as exc:
...     print(exc)
the zlib body decompresses to more than 100 bytes, this end's limit
"""

from __future__ import annotations

import importlib
import zlib
from types import ModuleType
from typing import Final, Literal, TypeAlias, get_args

from edgeq.errors import EdgeqError, InvalidArgument

__all__ = [
    "CODECS",
    "BodyTooLarge",
    "Codec",
    "CorruptBody",
    "available",
    "check_compression",
    "compress",
    "decompress",
]

#: A codec's name, as a queue attribute and on the wire.
Codec: TypeAlias = Literal["zstd", "zlib"]
#: Every codec edgeq knows, the preferred first.
CODECS: Final[tuple[Codec, ...]] = get_args(Codec)
#: zstd's level: its default, fast on both ends (a 150 KB batch in well under 1 ms).
ZSTD_LEVEL: Final = 3
#: zlib's level: its default (6), the usual balance of ratio and time.
ZLIB_LEVEL: Final = 6
#: The largest zstd window a body may ask the decoder for: what an encoder at any level
#: up to 19 uses, and a bound on the decoder's memory (a frame may ask for 2 GiB).
ZSTD_MAX_WINDOW: Final = 1 << 23
_ZSTD_HINT: Final = "pip install 'edgeq[zstd]'"


class CorruptBody(EdgeqError):
    """A compressed body that does not decompress (the sender's fault, or the network's)."""


class BodyTooLarge(EdgeqError):
    """A compressed body that decompresses to more than the receiver takes."""


def _zstandard() -> ModuleType | None:
    try:
        return importlib.import_module("zstandard")
    except ImportError:
        return None


def available() -> tuple[Codec, ...]:
    """The codecs this process can run, the preferred first (``zstd`` needs ``zstandard``)."""
    return tuple(c for c in CODECS if c != "zstd" or _zstandard() is not None)


def check_compression(value: object) -> Codec | None:
    """A queue's ``compression`` attribute, checked: None, or a codec this process can run.

    >>> check_compression("zlib"), check_compression(None)
    ('zlib', None)
    """
    if value is None:
        return None
    if value not in CODECS:
        raise InvalidArgument(
            f"compression must be one of {', '.join(map(repr, CODECS))} or None, not {value!r}"
        )
    if value not in available():
        raise InvalidArgument(
            f"compression {value!r} needs the zstandard package, which is not installed here: "
            f"{_ZSTD_HINT} (or use compression='zlib', from the standard library)"
        )
    codec: Codec = value
    return codec


def compress(codec: Codec, body: bytes) -> bytes:
    """``body`` compressed as a whole; a zstd frame declares its content size (a bomb is refused
    from its header) and carries a checksum, as a zlib stream does."""
    if codec == "zlib":
        return zlib.compress(body, ZLIB_LEVEL)
    module = _zstandard()
    if module is None:
        raise InvalidArgument(f"zstd compression needs the zstandard package: {_ZSTD_HINT}")
    packed: bytes = module.ZstdCompressor(
        level=ZSTD_LEVEL, write_content_size=True, write_checksum=True
    ).compress(body)
    return packed


def decompress(codec: Codec, body: bytes, *, max_bytes: int) -> bytes:
    """``body`` decompressed; BodyTooLarge past ``max_bytes`` (never spending the memory),
    CorruptBody if it does not decompress cleanly."""
    if codec == "zlib":
        return _inflate(body, max_bytes)
    if codec == "zstd":
        return _unzstd(body, max_bytes)
    raise CorruptBody(f"unknown codec {codec!r}")


def _inflate(body: bytes, max_bytes: int) -> bytes:
    """zlib, decompressing at most ``max_bytes`` + 1 bytes: one more says it is too large."""
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(body, max_bytes + 1)
    except zlib.error as exc:
        raise CorruptBody(f"the zlib body does not decompress: {exc}") from None
    if len(out) > max_bytes:
        raise BodyTooLarge(
            f"the zlib body decompresses to more than {max_bytes} bytes, this end's limit"
        )
    if not inflater.eof:
        raise CorruptBody("the zlib body is truncated: its stream does not end")
    if inflater.unused_data:
        raise CorruptBody(
            f"the zlib body has {len(inflater.unused_data)} byte(s) after its stream's end"
        )
    return out


def _unzstd(body: bytes, max_bytes: int) -> bytes:
    """zstd: the frame's declared size and window checked before anything is allocated; the
    decoder fails if the frame holds other than it declared."""
    module = _zstandard()
    if module is None:
        raise CorruptBody(f"a zstd body, but this end cannot decompress zstd: {_ZSTD_HINT}")
    try:
        frame = module.get_frame_parameters(body)
    except module.ZstdError as exc:
        raise CorruptBody(f"the zstd body does not start with a zstd frame header: {exc}") from None
    if frame.content_size == module.CONTENTSIZE_UNKNOWN:
        raise CorruptBody(
            "the zstd body's frame does not declare its content size (edgeq's encoder always does)"
        )
    if frame.content_size > max_bytes:
        raise BodyTooLarge(
            f"the zstd body declares {frame.content_size} bytes decompressed, more than {max_bytes}, "
            "this end's limit"
        )
    if frame.window_size > ZSTD_MAX_WINDOW:
        raise CorruptBody(
            f"the zstd body asks for a {frame.window_size}-byte window, more than {ZSTD_MAX_WINDOW}"
        )
    try:
        out: bytes = module.ZstdDecompressor(max_window_size=ZSTD_MAX_WINDOW).decompress(
            body, allow_extra_data=False)
    except module.ZstdError as exc:
        raise CorruptBody(f"the zstd body does not decompress: {exc}") from None
    return out

"""Bounded CBOR decoding: a body from the network (sync, admin) costs time and memory linear in
its size and bounded by :class:`DecodeLimits` (no tags; docs/protocol.md, "Decoding a body").
In the core because the device decodes admin requests with it and must not import edgeq.sync.

>>> loads(b"\\xa1\\x61v\\x01")
{'v': 1}
>>> try:
...     loads(b"\\xa1\\x61v\\xd8\\x1e\\x82\\x01\\x03")  # {"v": 1/3}, a rational
... except MalformedBody as exc:
...     print(exc)
CBOR tag 30 is not used by the edgeq protocol: send plain maps, arrays, strings and numbers
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, NoReturn

import cbor2

from edgeq.args import check_positive
from edgeq.errors import EdgeqError

__all__ = ["DEFAULT_LIMITS", "DecodeLimits", "MalformedBody", "count_items", "describe", "loads"]


class MalformedBody(EdgeqError):
    """A body that is not CBOR this protocol accepts (truncated, a tag, too deep, too many items):
    the sender's fault, always (the protocol's ``malformed``)."""


@dataclass(frozen=True, slots=True)
class DecodeLimits:
    """What one body may hold: depth, data items (a map entry: two), entries of one container, containers."""

    max_depth: int = 16
    max_items: int = 1_000_000
    max_length: int = 1_000_000
    max_containers: int = 1_000_000

    def __post_init__(self) -> None:
        for name in ("max_depth", "max_items", "max_length", "max_containers"):
            check_positive(getattr(self, name), name)


DEFAULT_LIMITS: Final = DecodeLimits()
#: Every byte but the initial bytes of arrays and maps (0x80-0xbf): deleted by ``bytes.translate``
#: to count, at C speed, the most containers a body can hold.
_NOT_CONTAINER_HEADS: Final = bytes(b for b in range(256) if not 0x80 <= b < 0xC0)
#: What a sender whose body is past a bound can do.
_SMALLER: Final = "send smaller batches (fewer messages, or fewer fields a message)"


class _TagRefused(Exception):
    """Raised inside cbor2 (which wraps it) at a tag; :func:`loads` reports it."""

    def __init__(self, tag: int) -> None:
        super().__init__(tag)
        self.tag = tag


def _refuse(tag: int) -> NoReturn:
    raise MalformedBody(f"CBOR tag {tag} is not used by the edgeq protocol: "
                        "send plain maps, arrays, strings and numbers")


class _NoTags(Mapping[int, Any]):
    """cbor2's ``semantic_decoders`` for every tag number, built-in ones included: each refuses."""

    def __getitem__(self, tag: int) -> Any:
        def refuse(*_: object) -> NoReturn:
            raise _TagRefused(tag)
        return refuse

    def __contains__(self, tag: object) -> bool:
        return True

    def __iter__(self) -> Iterator[int]:
        return iter(())

    def __len__(self) -> int:
        return 0


_NO_TAGS: Final = _NoTags()


def describe(value: object, limit: int = 60) -> str:
    """``value`` as an error message may quote it: about ``limit`` characters at most, never an
    error itself (``repr`` of an integer past 4,300 digits raises).

    >>> describe("qmgr"), describe(7 ** 6000), len(describe("x" * 10_000))
    ("'qmgr'", 'an integer of 16845 bits', 63)
    """
    if isinstance(value, int) and value.bit_length() > 256:
        return f"an integer of {value.bit_length()} bits"
    try:
        text = repr(value[:limit] if isinstance(value, (str, bytes)) else value)
    except ValueError:
        return f"a {type(value).__name__}"
    return text if len(text) <= limit else text[:limit] + "..."


def loads(raw: bytes, limits: DecodeLimits = DEFAULT_LIMITS) -> Any:
    """Decode exactly one CBOR item from ``raw`` within ``limits``; else raise MalformedBody."""
    if (
        len(raw) > limits.max_items
        or len(raw.translate(None, _NOT_CONTAINER_HEADS)) > limits.max_containers
    ):
        count_items(raw, limits)
    stream = io.BytesIO(raw)
    decoder = cbor2.CBORDecoder(stream, semantic_decoders=_NO_TAGS, max_depth=limits.max_depth,
                                allow_duplicate_keys=False, strict_hashable_types=True)
    try:
        value = decoder.decode()
    except Exception as exc:  # any decoder failure is the sender's fault: never a 500
        cause = exc.__cause__ or exc.__context__
        if isinstance(cause, _TagRefused):
            _refuse(cause.tag)
        text = str(exc).split("(expected")[0].strip()[:200]
        raise MalformedBody(f"body is not valid CBOR ({text} ...)") from exc
    if stream.tell() != len(raw):
        raise MalformedBody(f"{len(raw) - stream.tell()} trailing bytes after the CBOR body")
    return value


def _too_long(kind: int, entries: int, max_length: int) -> NoReturn:
    what = "an array" if kind == _ARRAY else "a map"
    raise MalformedBody(f"body holds {what} of {entries} entries, more than {max_length} "
                        f"(this end's limit): refused before decoding; {_SMALLER}")


# What each initial byte of a CBOR item is (RFC 8949, 3): its kind, and how many bytes of
# argument follow it (0: the argument is the byte's low five bits).
_LEAF, _STRING, _ARRAY, _MAP, _OPEN, _BREAK, _TAG, _RESERVED = range(8)


def _head(byte: int) -> tuple[int, int]:
    major, info = byte >> 5, byte & 31
    size = 0 if info < 24 else 1 << (info - 24) if info < 28 else 0
    if 28 <= info <= 30 or (info == 31 and major in (0, 1, 6)):
        return _RESERVED, 0
    if info == 31:  # indefinite length, or (major 7) the break code that ends one
        return (_BREAK if major == 7 else _OPEN), 0
    return (_LEAF, _LEAF, _STRING, _STRING, _ARRAY, _MAP, _TAG, _LEAF)[major], size


_HEADS: Final = tuple(_head(byte) for byte in range(256))


def count_items(raw: bytes, limits: DecodeLimits = DEFAULT_LIMITS) -> int:
    """How many data items the CBOR item at the start of ``raw`` holds (itself included), walked
    without building any, in linear time; raises MalformedBody at the first header past a bound,
    at a tag, or where ``raw`` ends first.

    >>> count_items(bytes.fromhex("a2617601647479706563707574"))  # {"v": 1, "type": "put"}
    5
    """
    end, pos, items, containers = len(raw), 0, 1, 0
    max_items, max_depth, max_length = limits.max_items, limits.max_depth, limits.max_length
    max_containers = limits.max_containers
    heads = _HEADS
    # The innermost open container's remaining items (-1: indefinite, until a break code),
    # the enclosing ones' on the stack; the body is the one item of a container around it.
    remaining = 1
    stack: list[int] = []
    while True:
        if pos >= end:
            raise MalformedBody("body is not valid CBOR (it ends inside an item): truncated?")
        byte = raw[pos]
        kind, size = heads[byte]
        pos += 1
        if size:
            if pos + size > end:
                raise MalformedBody("body is not valid CBOR (it ends inside an item): truncated?")
            arg = raw[pos] if size == 1 else int.from_bytes(raw[pos:pos + size], "big")
            pos += size
        else:
            arg = byte & 31
        if kind == _BREAK:
            if remaining != -1:
                raise MalformedBody(
                    f"body is not valid CBOR (a break code where an item belongs, at {pos - 1})"
                )
            remaining = stack.pop()
        else:
            if remaining == -1:
                items += 1  # an item of an indefinite container, counted as it comes
                if items > max_items:
                    raise MalformedBody(f"body holds more than {max_items} CBOR items")
            else:
                remaining -= 1
            if kind == _STRING:
                pos += arg
                if pos > end:
                    raise MalformedBody("body is not valid CBOR (it ends inside a string): truncated?")
            elif kind in (_ARRAY, _MAP, _OPEN):
                count = -1 if kind == _OPEN else arg if kind == _ARRAY else 2 * arg
                if arg > max_length and kind != _OPEN:
                    _too_long(kind, arg, max_length)
                containers += 1
                if containers > max_containers:
                    raise MalformedBody(
                        f"body holds more than {max_containers} CBOR arrays and maps: {_SMALLER}")
                if count:
                    if count > end - pos:  # each item takes a byte at least
                        raise MalformedBody(f"body is not valid CBOR (a container of {arg} items in "
                                            f"{end - pos} bytes): truncated?")
                    if count > 0:
                        items += count
                        if items > max_items:
                            raise MalformedBody(f"body holds more than {max_items} CBOR items")
                    stack.append(remaining)
                    if len(stack) > max_depth:
                        raise MalformedBody(f"body nests deeper than {max_depth} containers")
                    remaining = count
                    continue
            elif kind == _TAG:
                _refuse(arg)
            elif kind == _RESERVED:
                raise MalformedBody(
                    f"body is not valid CBOR (reserved initial byte 0x{byte:02x} at {pos - 1})"
                )
        while remaining == 0:
            if not stack:
                return items
            remaining = stack.pop()

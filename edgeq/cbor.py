"""Bounded CBOR decoding: what one body (a sync request or response, an admin request
or reply) may cost to decode.

A body comes from the network, and before it is authenticated, so decoding it must cost
time and memory linear in its size and bounded by :class:`DecodeLimits`, whatever it holds:

* **no tags**: the protocol uses none (``cbor2.dumps`` of its maps emits none), and
  cbor2's own handling of several is superlinear (a rational, tag 30, is reduced as it
  is decoded: quadratic in its size), or builds numbers beyond the 4,300-digit limit of
  ``int`` formatting (bignums, tags 2 and 3), dates, regular expressions, shared
  references. Every tag number is refused before cbor2 builds its value (what it
  tags is decoded as plain CBOR first, in linear time; in a walked body, not at all);
* **nesting** at most ``max_depth`` containers deep (a body is a map of arrays of maps of
  field maps of field arrays: five);
* **items** at most ``max_items``, of them **containers** (arrays and maps, the dear
  ones: each a Python object the garbage collector then tracks) at most
  ``max_containers``, and **entries** of one array or map at most ``max_length``: a body
  no longer than ``max_items`` cannot hold more items, nor more containers than it has
  bytes of the two major types (counted at C speed), so only a longer one, or one with
  more such bytes, is first walked (:func:`count_items`, without building anything, in
  Python, which yields the GIL as it goes) and refused at the first header past a
  bound, before cbor2's decoder (which holds the GIL until it is done) builds anything:
  what a dense body of tiny items would take once decoded is ~60x its size in memory
  and half a second per million items;
* map keys are text or byte strings (no hashing of nested structures) and appear once;
  a CBOR integer is at most 64 bits (bignums being tags), so every number formats fast.

This module is pure (no I/O). It lives in the core, not in the sync package, because the
device core decodes admin requests with it too (:mod:`edgeq.adminwire`) and must not import
``edgeq.sync``; :mod:`edgeq.sync.protocol` builds on it.

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
    """A body that is not CBOR this protocol accepts: truncated, trailing bytes, a tag, too
    deep, too many items. The sender's fault, always (the protocol's ``malformed``)."""


@dataclass(frozen=True, slots=True)
class DecodeLimits:
    """What one body may hold: ``max_depth`` nested containers, ``max_items`` data items
    (each string, number, array, map... counts one; a map entry two), ``max_length``
    entries in one definite-length array or map (a map's entry: a key and its value),
    ``max_containers`` arrays and maps in all."""

    max_depth: int = 16
    max_items: int = 1_000_000
    max_length: int = 1_000_000
    max_containers: int = 1_000_000

    def __post_init__(self) -> None:
        for name in ("max_depth", "max_items", "max_length", "max_containers"):
            check_positive(getattr(self, name), name)


DEFAULT_LIMITS: Final = DecodeLimits()
#: Every byte but the initial bytes of arrays and maps (0x80-0xbf): what ``bytes.translate``
#: deletes to count, at C speed, the most containers a body can hold.
_NOT_CONTAINER_HEADS: Final = bytes(b for b in range(256) if not 0x80 <= b < 0xC0)
#: What a sender whose body is past a bound can do.
_SMALLER: Final = "send smaller batches (fewer messages, or fewer fields a message)"


class _TagRefused(Exception):
    """Raised inside cbor2 (which wraps it) when a body holds a tag; :func:`loads` reports it."""

    def __init__(self, tag: int) -> None:
        super().__init__(tag)
        self.tag = tag


def _refuse(tag: int) -> NoReturn:
    raise MalformedBody(f"CBOR tag {tag} is not used by the edgeq protocol: "
                        "send plain maps, arrays, strings and numbers")


class _NoTags(Mapping[int, Any]):
    """cbor2's ``semantic_decoders`` for every tag number: each one refuses. cbor2 consults
    it for every tag it meets, built-in ones included, instead of building the value."""

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
    """``value`` as an error message may quote it: at most about ``limit`` characters, and
    never an error itself (``repr`` of an integer past 4,300 digits raises).

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
    """Decode exactly one CBOR item from ``raw`` within ``limits``; raise
    :class:`MalformedBody` (saying what is wrong) on anything else."""
    if len(raw) > limits.max_items or len(raw.translate(None, _NOT_CONTAINER_HEADS)) > limits.max_containers:
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
    raise MalformedBody(f"body holds {what} of {entries} entries, more than {max_length} (this end's limit): "
                        f"refused before decoding; {_SMALLER}")


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
    """How many data items the CBOR item at the start of ``raw`` holds (itself included),
    walked without building any of them; raise :class:`MalformedBody` past
    ``limits.max_items`` items, ``limits.max_containers`` arrays and maps or
    ``limits.max_depth`` levels, at the header of an array or map announcing more than
    ``limits.max_length`` entries, at a tag, or where ``raw``
    ends before the item does. Linear in ``raw``; strings are skipped, not read.

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
                raise MalformedBody(f"body is not valid CBOR (a break code where an item belongs, at {pos - 1})")
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
                raise MalformedBody(f"body is not valid CBOR (reserved initial byte 0x{byte:02x} at {pos - 1})")
        while remaining == 0:
            if not stack:
                return items
            remaining = stack.pop()

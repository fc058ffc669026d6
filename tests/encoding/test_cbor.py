"""Bounded CBOR decoding: no tags, bounded depth and items, string keys once each; what a
body may cost to decode grows linearly with its size whatever it holds."""

from __future__ import annotations

import random
from typing import Any

import cbor2
import pytest

from edgeq.encoding.cbor import DEFAULT_LIMITS, DecodeLimits, MalformedBody, count_items, describe, loads
from edgeq.sync import protocol as p


def refused(raw: bytes, limits: DecodeLimits = DEFAULT_LIMITS) -> str:
    with pytest.raises(MalformedBody) as info:
        loads(raw, limits)
    return str(info.value)


def test_what_the_protocol_sends_decodes_as_cbor2_would() -> None:
    body = {"v": 1, "type": "put", "n": -(2**64), "big": 2**64 - 1, "f": 1.5, "h": float("inf"),
            "b": b"\x00\xff",
            "t": "zürich ✓", "none": None, "yes": True, "nested": [{"u": "DEV1.5", "f": {"n": ["i", 5]}}],
            "e": []}
    raw = cbor2.dumps(body)
    assert loads(raw) == body == cbor2.loads(raw)


@pytest.mark.parametrize("tag", [0, 1, 2, 3, 4, 5, 28, 29, 30, 35, 36, 37, 258, 55799, 12345, 2**64 - 1])
def test_every_tag_is_refused(tag: int) -> None:
    raw = cbor2.dumps({"v": 1, "x": [cbor2.CBORTag(tag, 7)]})
    assert refused(raw) == (f"CBOR tag {tag} is not used by the edgeq protocol: send plain maps, arrays, "
                            "strings and numbers")
    many = DecodeLimits(max_items=len(raw) - 1)  # the walk before decoding refuses it as well
    assert f"CBOR tag {tag} " in refused(raw, many)


def test_a_rational_is_refused_before_it_is_reduced() -> None:
    """cbor2 reduces a rational (tag 30) as it decodes it, in time quadratic in its size:
    its value is never built. (Its numerator, a bignum, is the first tag met.)"""
    half = 400_000
    raw = cbor2.dumps({"v": 1, "type": cbor2.CBORTag(30, [random.getrandbits(half * 8) | 1, 3 ** 500_000])})
    assert "CBOR tag 2 " in refused(raw)
    assert "CBOR tag 30 " in refused(raw, DecodeLimits(max_items=1_000))  # walked first: the outer tag


@pytest.mark.parametrize("opener", [b"\x81", b"\xa1\x61k", b"\x9f", b"\xbf\x61k"])
def test_nesting_is_bounded(opener: bytes) -> None:
    closer = b"\xff" if opener[0] in (0x9F, 0xBF) else b""
    deep = opener * 17 + b"\x19\x01\x00" + closer * 17  # a leaf of 3 bytes: fewer items than bytes
    assert "depth" in refused(deep, DecodeLimits(max_depth=16))
    assert "deeper than 16" in refused(deep, DecodeLimits(max_depth=16, max_items=len(deep) - 1))  # walked
    within = opener * 16 + b"\x19\x01\x00" + closer * 16
    assert loads(within, DecodeLimits(max_depth=16)) is not None
    assert count_items(within, DecodeLimits(max_depth=16)) == (33 if b"k" in opener else 17)


@pytest.mark.parametrize("item", [b"\x00", b"\x80", b"\xa0", b"\xf6", b"\x40"])
def test_a_body_longer_than_the_item_limit_is_walked_and_refused_past_it(item: bytes) -> None:
    """A dense body of tiny items would take ~60 times its size in memory once decoded."""
    limits = DecodeLimits(max_items=1_000)
    at_limit = b"\x99" + (999).to_bytes(2, "big") + item * 999
    assert count_items(at_limit, limits) == 1_000 and len(loads(at_limit, limits)) == 999
    over = b"\x99" + (1_000).to_bytes(2, "big") + item * 1_000
    assert refused(over, limits) == "body holds more than 1000 CBOR items"
    # an indefinite array counts its items as they come
    assert refused(b"\x9f" + item * 1_000 + b"\xff", limits) == "body holds more than 1000 CBOR items"


def test_the_walk_counts_what_cbor2_decodes() -> None:
    rng = random.Random(7)

    def value(depth: int) -> Any:
        kind = rng.randrange(8 if depth < 5 else 4)
        if kind == 0:
            return rng.randrange(-(2**64), 2**64)
        if kind == 1:
            return rng.randbytes(rng.randrange(0, 300))
        if kind == 2:
            return "t" * rng.randrange(0, 30)
        if kind == 3:
            return rng.choice([None, True, False, 1.5, -0.0])
        if kind < 6:
            return [value(depth + 1) for _ in range(rng.randrange(0, 6))]
        return {f"k{i}": value(depth + 1) for i in range(rng.randrange(0, 6))}

    def items(v: Any) -> int:
        if isinstance(v, list):
            return 1 + sum(items(x) for x in v)
        if isinstance(v, dict):
            return 1 + sum(1 + items(x) for x in v.values())
        return 1

    for _ in range(200):
        body = {"v": 1, "x": value(0)}
        raw = cbor2.dumps(body)
        assert count_items(raw) == items(body)
        assert loads(raw, DecodeLimits(max_items=min(len(raw) - 1, items(body)))) == body


@pytest.mark.parametrize(("raw", "words"), [
    (b"", "not valid CBOR"),
    (b"\xa2\x61v\x01", "not valid CBOR"),  # truncated
    (b"\xa1\x61v\x01\x00", "1 trailing bytes"),
    (b"\xa2\x61k\x01\x61k\x02", "Duplicate map key"),
    (b"\xa1\x01\x02", "must be a text string or byte string"),
    (b"\xa1\x81\x01\x02", "must be a text string or byte string"),
    (b"\xa1\x61k\x62\xc3\x28", "not valid CBOR"),  # invalid UTF-8
    (b"\xa1\x61k\x1c", "not valid CBOR"),  # reserved
    (b"\xa1\x61k\xff", "not valid CBOR"),  # a stray break
    (b"\xa1\x61k\x5f\x41a\x61b\xff", "not valid CBOR"),  # a text chunk in a byte string
    (b"\x9b\xff\xff\xff\xff\xff\xff\xff\xff", "not valid CBOR"),  # a huge declared length
    (b"\x5b\x00\x00\x00\x10\x00\x00\x00\x00", "not valid CBOR"),
])
def test_malformed_cbor_is_refused_with_its_reason(raw: bytes, words: str) -> None:
    assert words in refused(raw)
    if len(raw) > 1:  # and the walk that runs first on a long body agrees
        with pytest.raises(MalformedBody):
            loads(raw, DecodeLimits(max_items=1))


def test_the_walk_refuses_what_is_truncated_or_reserved() -> None:
    for raw in (b"\x9b\xff\xff\xff\xff\xff\xff\xff\xff", b"\x5b\x00\x00\x00\x10\x00\x00\x00\x00", b"\x9f\x01",
                b"\x1c", b"\x19\x01", b"\xff", b"\x3f", b"\x82\x01"):
        with pytest.raises(MalformedBody):
            count_items(raw)


def test_decode_body_turns_every_refusal_into_malformed() -> None:
    with pytest.raises(p.ProtocolError) as info:
        p.decode_body(cbor2.dumps({"v": 1, "type": cbor2.CBORTag(30, [1, 3])}))
    assert info.value.code == "malformed" and "CBOR tag 30" in info.value.detail


def test_describe_quotes_any_value_briefly() -> None:
    assert describe(7 ** 6000) == "an integer of 16845 bits"
    assert describe([7 ** 6000]) == "a list"  # repr would raise
    assert describe("x" * 10_000) == repr("x" * 60)[:60] + "..."
    assert describe(b"\x00") == "b'\\x00'" and describe(None) == "None"


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError):
        DecodeLimits(max_depth=0)

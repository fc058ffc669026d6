"""Compact, type-preserving encoding of message fields in CBOR, ``{name: [code, value]}``: an
MQe field's type carries meaning (an Int32 and an Int64 of equal value differ)."""

from __future__ import annotations

from collections.abc import Mapping

import cbor2

from edgeq.errors import StoreError
from edgeq.types import FIELD_CODES, FieldValue

__all__ = ["decode_fields", "encode_fields"]

# (type, code) in FIELD_CODES' order: bool before int-like types, since True is an int.
_TYPE_CODES: tuple[tuple[type, str], ...] = tuple(
    (kind, code) for code, kind in FIELD_CODES.items()
)
# What each code's value is as CBOR decodes it (a bool is no Int32, a str no float).
_STORED: dict[str, type | tuple[type, ...]] = {
    "?": bool, "i": int, "l": int, "s": str, "b": bytes, "f": float,
}


def encode_fields(fields: Mapping[str, FieldValue]) -> bytes | None:
    """Encode validated fields; None for no fields (stored as NULL).

    >>> from edgeq import Int32
    >>> decode_fields(encode_fields({"n": Int32(5), "on": True}))
    {'n': Int32(5), 'on': True}
    """
    if not fields:
        return None
    out: dict[str, list[object]] = {}
    for name, value in fields.items():
        for kind, code in _TYPE_CODES:
            if isinstance(value, kind):
                out[name] = [code, int(value) if code in "il" else value]
                break
    return cbor2.dumps(out)


def decode_fields(blob: bytes | None) -> dict[str, FieldValue]:
    """Decode what :func:`encode_fields` wrote; anything else (a damaged copy) raises StoreError.

    >>> decode_fields(b"\\x81")
    Traceback (most recent call last):
    ...
    edgeq.errors.StoreError: the store is damaged: a message's stored fields are unreadable (...
    """
    if blob is None:
        return {}
    try:
        raw = cbor2.loads(blob)
        if not isinstance(raw, dict):
            raise TypeError(f"a {type(raw).__name__}, not a map")
        out: dict[str, FieldValue] = {}
        for name, (code, value) in raw.items():
            kind = FIELD_CODES[code]
            if not isinstance(name, str) or not isinstance(value, _STORED[code]):
                raise TypeError(f"field {name!r} is not a stored {kind.__name__}")
            out[name] = kind(value)
        return out
    except (ValueError, KeyError, TypeError, AttributeError, cbor2.CBORDecodeError) as exc:
        raise StoreError(
            f"the store is damaged: a message's stored fields are unreadable ({exc}); "
            "run `edgeq check --db PATH` to find the message"
        ) from exc

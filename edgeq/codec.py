"""Compact, type-preserving encoding of message fields (CBOR).

MQe fields are typed, and the type carries meaning (an Int32 and an Int64 of
equal value are different fields), so each value is stored with a one-letter
type code: ``{name: [code, value]}``.
"""

from __future__ import annotations

from collections.abc import Mapping

import cbor2

from edgeq.errors import StoreError
from edgeq.types import FIELD_CODES, FieldValue

__all__ = ["decode_fields", "encode_fields"]

# (type, code) in FIELD_CODES' order: bool before int-like types, since True is an int.
_TYPE_CODES: tuple[tuple[type, str], ...] = tuple((kind, code) for code, kind in FIELD_CODES.items())


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
    """Decode what :func:`encode_fields` wrote."""
    if blob is None:
        return {}
    try:
        raw = cbor2.loads(blob)
        return {name: FIELD_CODES[code](value) for name, (code, value) in raw.items()}
    except (ValueError, KeyError, TypeError, cbor2.CBORDecodeError) as exc:
        raise StoreError(f"a message's stored fields are corrupt ({exc})") from exc

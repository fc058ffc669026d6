"""Bounded CBOR decoding of sync request and response bodies: what one body may cost to
decode (no tags, bounded nesting and item count).

The decoder lives in :mod:`edgeq.encoding.cbor`, in the core, because the device decodes admin
requests with it too and the core must not import the sync package; this module is the
name the protocol's users know it by.

>>> loads(b"\\xa1\\x61v\\x01")
{'v': 1}
"""

from __future__ import annotations

from edgeq.encoding.cbor import DEFAULT_LIMITS, DecodeLimits, MalformedBody, count_items, describe, loads

__all__ = ["DEFAULT_LIMITS", "DecodeLimits", "MalformedBody", "count_items", "describe", "loads"]

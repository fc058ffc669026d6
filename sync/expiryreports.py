"""A device's expiry reports (``/v1/expiries``): journal entries, encoded and checked (docs/protocol.md)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from edgeq.encoding.cbor import describe
from edgeq.store.journal import DEVICE_KINDS, JournalEntry
from edgeq.sync.protocol import ProtocolError, decode_uid, opt_int, req_int, req_list, req_name
from edgeq.types import CHECK_POINTS, REMOVAL_REASONS

__all__ = ["ExpiryItem", "decode_expiries", "decode_expiry_items", "encode_expiries"]


def _invalid(detail: str) -> ProtocolError:
    return ProtocolError("invalid", detail)


def encode_expiries(entries: Sequence[JournalEntry]) -> list[dict[str, Any]]:
    """Journal entries for ``/v1/expiries`` (device clock); any kind but ``expired`` carries ``k``."""
    return [
        {"u": e.uid, "q": e.queue, "t": e.at_ms, "w": e.check_point, "n": e.size, "c": e.created_ms,
         "a": e.arrived_ms, **({} if e.kind == "expired" else {"k": e.kind})}
        for e in entries
    ]


def _expiry_entry(raw: object) -> JournalEntry:
    """One entry of an ``expiries`` request, checked (``invalid`` naming the problem)."""
    if not isinstance(raw, dict):
        raise _invalid("each expiry entry must be a map")
    uid = decode_uid(raw.get("u"))
    where, kind = raw.get("w"), raw.get("k", "expired")
    if kind not in DEVICE_KINDS:
        raise _invalid(f"entry {uid}: 'k' must be one of {', '.join(DEVICE_KINDS)}, not {describe(kind)}")
    if kind != "expired":
        if where not in REMOVAL_REASONS:
            raise _invalid(f"{kind} entry {uid}: 'w' must be a removal reason, not {describe(where)}")
    elif where not in CHECK_POINTS:
        raise _invalid(f"expiry entry {uid}: 'w' must be an expiry check point, not {describe(where)}")
    return JournalEntry(
        0, kind, "device", req_int(raw, "t", high=2**62), req_name(raw, "q"), str(uid), uid.origin,
        check_point=where, size=opt_int(raw, "n", high=2**62), created_ms=opt_int(raw, "c", high=2**62),
        arrived_ms=opt_int(raw, "a", high=2**62),
    )


def decode_expiries(body: Mapping[str, Any], key: str, *, max_len: int) -> list[JournalEntry]:
    """The entries of an ``expiries`` request; any bad entry makes the whole body ``invalid``."""
    return [_expiry_entry(raw) for raw in req_list(body, key, max_len=max_len)]


@dataclass(frozen=True, slots=True)
class ExpiryItem:
    """One entry of an ``expiries`` request, decoded or refused (``why``); ``uid`` as sent, for the answer."""

    uid: str
    entry: JournalEntry | None
    why: str | None = None


def decode_expiry_items(body: Mapping[str, Any], key: str, *, max_len: int) -> list[ExpiryItem]:
    """The entries of an ``expiries`` request, each decoded or refused on its own; only a malformed
    body (not a list, over ``max_len``) raises ``invalid``."""
    out: list[ExpiryItem] = []
    for raw in req_list(body, key, max_len=max_len):
        sent = raw.get("u") if isinstance(raw, dict) else None
        uid = sent[:200] if isinstance(sent, str) else ""
        try:
            out.append(ExpiryItem(uid, _expiry_entry(raw)))
        except ProtocolError as exc:
            out.append(ExpiryItem(uid, None, exc.detail))
    return out

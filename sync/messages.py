"""Messages on the wire: typed fields, :class:`WireMessage` (expiry rebased on the receiver's clock)
and per-message results (docs/protocol.md, "Messages on the wire").

>>> from edgeq import Message, MessageUID
>>> from edgeq.sync.protocol import decode_body, encode_body
>>> m = Message(b"\\x00\\xff", fields={"n": 3}, uid=MessageUID("DEV1", 5_000), remaining_expiry_ms=60_000)
>>> back = WireMessage.from_wire(decode_body(encode_body({"m": WireMessage.from_message(m).to_wire()}))["m"])
>>> got = back.to_message(receiver_now_ms=1_000_000)
>>> got.data, got.fields["n"], int(got.expiry), str(got.uid)
(b'\\x00\\xff', Int64(3), 1060000, 'DEV1.5000')
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, get_args

from edgeq.encoding.cbor import describe
from edgeq.errors import EdgeqError
from edgeq.message import Message
from edgeq.sync.protocol import MAX_REMAINING_MS, ProtocolError, decode_uid, opt_int, req_list
from edgeq.types import FIELD_CODES, FieldValue, ReportOption
from edgeq.uid import MessageUID
from edgeq.values import Int32, Int64

__all__ = [
    "WireMessage", "decode_fields", "decode_messages", "decode_results", "encode_fields", "rebase_ms",
    "result", "transit_ms",
]


def _invalid(detail: str) -> ProtocolError:
    return ProtocolError("invalid", detail)


# -- typed fields ----------------------------------------------------------------------------

def encode_fields(fields: Mapping[str, FieldValue]) -> dict[str, list[Any]]:
    """Typed fields as a CBOR-ready map ``{name: [code, value]}``.

    >>> encode_fields({"n": Int32(5), "on": True, "t": 1.5})
    {'n': ['i', 5], 'on': ['?', True], 't': ['f', 1.5]}
    """
    out: dict[str, list[Any]] = {}
    for name, value in fields.items():
        if isinstance(value, bool):
            out[name] = ["?", value]
        elif isinstance(value, Int32):
            out[name] = ["i", int(value)]
        elif isinstance(value, Int64):
            out[name] = ["l", int(value)]
        elif isinstance(value, str):
            out[name] = ["s", value]
        elif isinstance(value, bytes):
            out[name] = ["b", value]
        else:
            out[name] = ["f", float(value)]
    return out


def decode_fields(raw: object) -> dict[str, FieldValue]:
    """Check and decode what :func:`encode_fields` made; raise ``invalid`` on anything else."""
    if not isinstance(raw, dict):
        raise _invalid(f"fields must be a map, not {type(raw).__name__}")
    out: dict[str, FieldValue] = {}
    for name, item in raw.items():
        if not isinstance(name, str) or not isinstance(item, list) or len(item) != 2:
            raise _invalid(f"field {describe(name)} must be [type code, value]")
        code, value = item
        kind = FIELD_CODES.get(code) if isinstance(code, str) else None
        if kind is None:
            raise _invalid(
                f"field {describe(name)} has unknown type code {describe(code)} "
                f"(use one of {''.join(FIELD_CODES)})"
            )
        if kind is float:
            ok = isinstance(value, float) or (isinstance(value, int) and not isinstance(value, bool))
        elif kind in (Int32, Int64):
            ok = isinstance(value, int) and not isinstance(value, bool)
        else:
            ok = isinstance(value, kind)
        if not ok:
            raise _invalid(f"field {describe(name)} of type {code} has a {type(value).__name__} value")
        try:
            out[name] = float(value) if kind is float else kind(value)
        except EdgeqError as exc:
            raise _invalid(f"field {describe(name)}: {exc}") from exc
        except (ValueError, OverflowError):  # beyond any float, or too long to print
            raise _invalid(
                f"field {describe(name)}: {describe(value)} is out of range for type {code}"
            ) from None
    return out


# -- messages ----------------------------------------------------------------------------------

_REPORTS: Final = get_args(ReportOption)


def transit_ms(sender_now_ms: int, receiver_now_ms: int, offset_ms: int | None) -> int:
    """How long a body spent in transit beyond the hello's latency (never negative): the legacy
    rebase, for a put without ``server_ms`` (``offset_ms``: receiver minus sender clock at the hello)."""
    if offset_ms is None:
        return 0
    return max(0, receiver_now_ms - (sender_now_ms + offset_ms))


def rebase_ms(
    receiver_now_ms: int, *, server_ms: int | None, sender_now_ms: int, offset_ms: int | None
) -> int:
    """The receiver-clock instant a put's remaining lifetimes count from: the device's lower bound
    on this clock, ``server_ms``, never beyond ``receiver_now_ms``; without it, the legacy rebase.
    See docs/protocol.md, "Expiry crosses the wire as remaining milliseconds"."""
    if server_ms is not None:
        return min(server_ms, receiver_now_ms)
    return receiver_now_ms - transit_ms(sender_now_ms, receiver_now_ms, offset_ms)


@dataclass(frozen=True, slots=True)
class WireMessage:
    """A message as it crosses the wire; ``remaining_ms`` is its time left on the sender's clock
    when read for sending (None: no expiry)."""

    uid: MessageUID
    data: bytes
    fields: Mapping[str, FieldValue]
    priority: int | None
    remaining_ms: int | None
    created_ms: int | None
    correlation_id: bytes | None = None
    reply_to: str | None = None
    expiry_report: ReportOption = "none"
    resend: bool = False

    @classmethod
    def from_message(cls, message: Message, *, resend: bool = False) -> WireMessage:
        """The wire form of a message read from a queue (it must have a uid)."""
        if message.uid is None:
            raise ValueError("only a message that has been put (and so has a uid) can be transmitted")
        return cls(
            message.uid, message.data, message.fields, message.priority, message.remaining_expiry_ms,
            message.created_ms, message.correlation_id, message.reply_to, message.expiry_report, resend,
        )

    def to_wire(self) -> dict[str, Any]:
        """The map sent on the wire: short keys, defaults left out."""
        out: dict[str, Any] = {"u": str(self.uid), "d": self.data}
        if self.priority is not None:
            out["p"] = self.priority
        if self.created_ms is not None:
            out["c"] = self.created_ms
        if self.remaining_ms is not None:
            out["x"] = self.remaining_ms
        if self.fields:
            out["f"] = encode_fields(self.fields)
        if self.correlation_id is not None:
            out["ci"] = self.correlation_id
        if self.reply_to is not None:
            out["rt"] = self.reply_to
        if self.expiry_report != "none":
            out["er"] = self.expiry_report
        if self.resend:
            out["r"] = True
        return out

    @classmethod
    def from_wire(cls, raw: object, origins: set[str] | None = None) -> WireMessage:
        """Check one wire message; raise :class:`ProtocolError` ``invalid`` naming the problem.
        ``origins``: the uid origins its batch has checked (:func:`~edgeq.sync.protocol.decode_uid`)."""
        if not isinstance(raw, dict):
            raise _invalid(f"a message must be a map, not {type(raw).__name__}")
        get = raw.get
        uid = decode_uid(get("u"), origins)
        data = get("d")
        if not isinstance(data, bytes):
            raise _invalid(f"message {uid}: 'd' (data) must be a byte string, not {type(data).__name__}")
        priority, created, remaining = get("p"), get("c"), get("x")
        # The common values checked inline; anything else goes through opt_int (and its error).
        if priority is not None and not (type(priority) is int and 0 <= priority <= 9):
            priority = opt_int(raw, "p", high=9)
        if created is not None and not (type(created) is int and 0 <= created <= 2**62):
            created = opt_int(raw, "c", high=2**62)
        if remaining is not None and not (type(remaining) is int and 1 <= remaining <= MAX_REMAINING_MS):
            remaining = opt_int(raw, "x", low=1, high=MAX_REMAINING_MS)
        fields = decode_fields(raw["f"]) if get("f") is not None else {}
        corr = get("ci")
        if corr is not None and not isinstance(corr, bytes):
            raise _invalid(f"message {uid}: 'ci' (correlation id) must be a byte string")
        reply_to = get("rt")
        if reply_to is not None and not isinstance(reply_to, str):
            raise _invalid(f"message {uid}: 'rt' (reply-to queue) must be a string")
        report = get("er", "none")
        if report not in _REPORTS:
            raise _invalid(f"message {uid}: 'er' (expiry report) must be one of {', '.join(_REPORTS)}")
        resend = get("r", False)
        if not isinstance(resend, bool):
            raise _invalid(f"message {uid}: 'r' (resend) must be a boolean")
        return cls(uid, data, fields, priority, remaining, created, corr, reply_to, report, resend)

    def to_message(self, receiver_now_ms: int, transit: int = 0, *, resend: bool | None = None) -> Message:
        """The message to put here, expiring at ``Int64(receiver_now_ms + remaining - transit)``: that
        base must be no later than this clock when the sender read ``remaining``. ``resend``
        overrides the wire flag."""
        expiry = None if self.remaining_ms is None else Int64(
            max(1, receiver_now_ms + self.remaining_ms - transit)
        )
        resend = self.resend if resend is None else resend
        if not self.fields and self.correlation_id is None and self.reply_to is None:
            # Everything else was checked by from_wire as the constructor checks it.
            return Message._checked(self.data, priority=self.priority, expiry=expiry, resend=resend,
                                    expiry_report=self.expiry_report, uid=self.uid,
                                    created_ms=self.created_ms)
        try:
            return Message(
                self.data, fields=dict(self.fields), priority=self.priority, expiry=expiry,
                correlation_id=self.correlation_id, reply_to=self.reply_to, resend=resend,
                expiry_report=self.expiry_report, uid=self.uid, created_ms=self.created_ms,
            )
        except EdgeqError as exc:
            raise _invalid(f"message {self.uid}: {exc}") from exc


def decode_messages(body: Mapping[str, Any], key: str, *, max_len: int) -> list[WireMessage]:
    """The checked messages of a body; a uid given twice is ``invalid``."""
    origins: set[str] = set()
    out = [WireMessage.from_wire(raw, origins) for raw in req_list(body, key, max_len=max_len)]
    if len({m.uid for m in out}) != len(out):
        raise _invalid("a uid appears twice in one request: send each message once")
    return out


def result(uid: MessageUID | str, status: str, detail: str | None = None) -> dict[str, Any]:
    """One per-message result: ``{"u": uid, "s": status}`` (+ ``"why"``)."""
    out: dict[str, Any] = {"u": str(uid), "s": status}
    if detail:
        out["why"] = detail
    return out


def decode_results(body: Mapping[str, Any], allowed: Sequence[str]) -> list[tuple[str, str, str | None]]:
    """Check a response's per-message results: ``(uid, status, why)`` triples."""
    out: list[tuple[str, str, str | None]] = []
    for item in req_list(body, "results", max_len=2**20):
        if not isinstance(item, dict) or not isinstance(item.get("u"), str) or item.get("s") not in allowed:
            raise _invalid(
                f"bad result {describe(item)}: expected {{'u': uid, 's': one of {', '.join(allowed)}}}"
            )
        why = item.get("why")
        out.append((item["u"], item["s"], why if isinstance(why, str) else None))
    return out

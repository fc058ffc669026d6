"""Messages on the wire: typed fields, :class:`WireMessage`, expiry rebased on the receiver's clock,
and per-message results (``docs/protocol.md``).

>>> from edgeq import Message, MessageUID
>>> from edgeq.sync.protocol import decode_body, encode_body
>>> m = Message(b"\\x00\\xff", fields={"n": 3}, uid=MessageUID("DEV1", 5_000), priority=4,
...             remaining_expiry_ms=60_000)
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

__all__ = ["WireMessage", "decode_fields", "decode_messages", "decode_results", "encode_fields", "rebase_ms", "result",
           "transit_ms"]


def _invalid(detail: str) -> ProtocolError:
    return ProtocolError("invalid", detail)


# -- typed fields ----------------------------------------------------------------------------

def encode_fields(fields: Mapping[str, FieldValue]) -> dict[str, list[Any]]:
    """Typed fields as a CBOR-ready map ``{name: [code, value]}`` (as edgeq.encoding.fields stores them).

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
    """Check and decode what :func:`encode_fields` made; raise ``invalid`` on anything else.

    >>> decode_fields({"n": ["i", 5]})
    {'n': Int32(5)}
    """
    if not isinstance(raw, dict):
        raise _invalid(f"fields must be a map, not {type(raw).__name__}")
    out: dict[str, FieldValue] = {}
    for name, item in raw.items():
        if not isinstance(name, str) or not isinstance(item, list) or len(item) != 2:
            raise _invalid(f"field {describe(name)} must be [type code, value]")
        code, value = item
        kind = FIELD_CODES.get(code) if isinstance(code, str) else None
        if kind is None:
            raise _invalid(f"field {describe(name)} has unknown type code {describe(code)} (use one of {''.join(FIELD_CODES)})")
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
            raise _invalid(f"field {describe(name)}: {describe(value)} is out of range for type {code}") from None
    return out


# -- messages ----------------------------------------------------------------------------------

_REPORTS: Final = get_args(ReportOption)


def transit_ms(sender_now_ms: int, receiver_now_ms: int, offset_ms: int | None) -> int:
    """How long a body spent in transit beyond the handshake's latency (never negative).

    The **legacy** rebase, for a put from an agent that sends no ``server_ms``
    (:func:`rebase_ms`): ``offset_ms`` is receiver clock minus sender clock as
    measured at the hello (it includes the hello's one-way latency, which is
    therefore not counted, so a deadline may come out up to that much late), and
    a sender's clock stepped since the hello shifts the result by the step.

    >>> transit_ms(1_000, 6_200, 200)   # sent at 1000 (= 1200 here), arrived at 6200
    5000
    >>> transit_ms(1_000, 900, 0)       # clocks disagree the other way: no credit given
    0
    """
    if offset_ms is None:
        return 0
    return max(0, receiver_now_ms - (sender_now_ms + offset_ms))


def rebase_ms(
    receiver_now_ms: int, *, server_ms: int | None, sender_now_ms: int, offset_ms: int | None
) -> int:
    """The receiver-clock instant a put's remaining lifetimes count from: each deadline
    is ``Int64(rebase_ms(...) + x)`` (:meth:`WireMessage.to_message`).

    ``server_ms`` is what the sending device knew of this clock when it read the
    remaining values: a lower bound of it, from the device's round trips
    (:class:`~edgeq.sync.agent.clockbounds.ServerClockBounds`). It is never trusted
    beyond ``receiver_now_ms`` (bounds made wrong by a step of this clock must not
    lengthen a lifetime). Without it (an older agent), the legacy rebase:
    ``receiver_now_ms - transit_ms(sender_now_ms, receiver_now_ms, offset_ms)``.

    >>> rebase_ms(10_000, server_ms=9_700, sender_now_ms=123, offset_ms=None)  # read 300+ ms ago
    9700
    >>> rebase_ms(10_000, server_ms=12_000, sender_now_ms=123, offset_ms=None)  # bounds from before a step back
    10000
    >>> rebase_ms(10_000, server_ms=None, sender_now_ms=9_500, offset_ms=200)  # legacy: 300 ms of transit
    9700
    """
    if server_ms is not None:
        return min(server_ms, receiver_now_ms)
    return receiver_now_ms - transit_ms(sender_now_ms, receiver_now_ms, offset_ms)


@dataclass(frozen=True, slots=True)
class WireMessage:
    """A message as it crosses the wire.

    ``remaining_ms`` is the time left before the message expires on the sender's
    clock when it was read for sending (None: no expiry). The receiver turns it
    into an absolute ``Int64`` expiry on *its* clock (:meth:`to_message`).
    """

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
        """The map sent on the wire: short keys, defaults left out (the inverse of :meth:`from_wire`)."""
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
    def from_wire(cls, raw: object) -> WireMessage:
        """Check one wire message; raise :class:`ProtocolError` ``invalid`` naming the problem."""
        if not isinstance(raw, dict):
            raise _invalid(f"a message must be a map, not {type(raw).__name__}")
        uid = decode_uid(raw.get("u"))
        data = raw.get("d")
        if not isinstance(data, bytes):
            raise _invalid(f"message {uid}: 'd' (data) must be a byte string, not {type(data).__name__}")
        priority = opt_int(raw, "p", high=9)
        created = opt_int(raw, "c", high=2**62)
        remaining = opt_int(raw, "x", low=1, high=MAX_REMAINING_MS)
        fields = decode_fields(raw["f"]) if raw.get("f") is not None else {}
        corr = raw.get("ci")
        if corr is not None and not isinstance(corr, bytes):
            raise _invalid(f"message {uid}: 'ci' (correlation id) must be a byte string")
        reply_to = raw.get("rt")
        if reply_to is not None and not isinstance(reply_to, str):
            raise _invalid(f"message {uid}: 'rt' (reply-to queue) must be a string")
        report = raw.get("er", "none")
        if report not in _REPORTS:
            raise _invalid(f"message {uid}: 'er' (expiry report) must be one of {', '.join(_REPORTS)}")
        resend = raw.get("r", False)
        if not isinstance(resend, bool):
            raise _invalid(f"message {uid}: 'r' (resend) must be a boolean")
        return cls(uid, data, fields, priority, remaining, created, corr, reply_to, report, resend)

    def to_message(self, receiver_now_ms: int, transit: int = 0, *, resend: bool | None = None) -> Message:
        """The message to put on the receiver: expiry rebased as ``Int64(now + remaining - transit)``.

        ``receiver_now_ms - transit`` must be no later than the receiver's clock
        when the sender read ``remaining``: the server passes :func:`rebase_ms` as
        ``receiver_now_ms`` (and no transit), a pulling device its clock and how long
        ago, at most, the server read its own. A result at or before the receiver's
        clock means the message expired before it arrived: the receiver's put
        discards it (expiry check point "add"). ``resend`` overrides the wire flag
        (a puller re-puts with resend).

        >>> w = WireMessage(MessageUID("HOME", 7), b"x", {}, None, 60_000, None)
        >>> int(w.to_message(1_000_000, 250).expiry)
        1059750
        """
        expiry = None if self.remaining_ms is None else Int64(max(1, receiver_now_ms + self.remaining_ms - transit))
        try:
            return Message(
                self.data, fields=dict(self.fields), priority=self.priority, expiry=expiry,
                correlation_id=self.correlation_id, reply_to=self.reply_to,
                resend=self.resend if resend is None else resend,
                expiry_report=self.expiry_report, uid=self.uid, created_ms=self.created_ms,
            )
        except EdgeqError as exc:
            raise _invalid(f"message {self.uid}: {exc}") from exc


def decode_messages(body: Mapping[str, Any], key: str, *, max_len: int) -> list[WireMessage]:
    """The checked messages of a body; a uid given twice is ``invalid``."""
    out = [WireMessage.from_wire(raw) for raw in req_list(body, key, max_len=max_len)]
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
            raise _invalid(f"bad result {describe(item)}: expected {{'u': uid, 's': one of {', '.join(allowed)}}}")
        why = item.get("why")
        out.append((item["u"], item["s"], why if isinstance(why, str) else None))
    return out

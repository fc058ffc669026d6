"""The sync wire format, version 1: CBOR bodies over HTTP (see ``docs/protocol.md``).

Every request and response body is one CBOR map carrying ``"v"`` (the protocol
version) and ``"type"``. Messages travel with their typed fields, binary data
as CBOR byte strings, and their expiry as **remaining milliseconds** that the
receiver rebases on its own clock (from an instant no later than the sender's
reading: :func:`rebase_ms` on the server, a transit on the device); an absolute
device time is never trusted.

This module is pure: it encodes and validates, and knows nothing of HTTP
servers or clients, so both ends (and tests) share it.

>>> from edgeq import Message, MessageUID
>>> m = Message(b"\\x00\\xff", fields={"n": 3}, uid=MessageUID("DEV1", 5_000), priority=4,
...             remaining_expiry_ms=60_000)
>>> wire = WireMessage.from_message(m)
>>> back = WireMessage.from_wire(decode_body(encode_body({"m": wire.to_wire()}))["m"])
>>> got = back.to_message(receiver_now_ms=1_000_000)
>>> got.data, got.fields["n"], int(got.expiry), str(got.uid)
(b'\\x00\\xff', Int64(3), 1060000, 'DEV1.5000')
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeAlias, get_args

import cbor2

from edgeq.cbor import DEFAULT_LIMITS, DecodeLimits, MalformedBody, describe, loads
from edgeq.errors import EdgeqError
from edgeq.journal import DEVICE_KINDS, JournalEntry, RemoteExpiryStatus
from edgeq.message import Message
from edgeq.types import (
    CHECK_POINTS,
    FIELD_CODES,
    MAX_INT64,
    REMOVAL_REASONS,
    ConfirmStatus,
    FieldValue,
    PutStatus,
    ReportOption,
)
from edgeq.uid import MessageUID
from edgeq.values import Int32, Int64

__all__ = [
    "CONTENT_TYPE",
    "EXPIRY_STATUSES",
    "MAX_REMAINING_MS",
    "PROTOCOL_VERSION",
    "PULL_CONFIRM_STATUSES",
    "SUPPORTED_VERSIONS",
    "ConfirmStatus",
    "ErrorCode",
    "ExpiryItem",
    "ExpiryStatus",
    "ProtocolError",
    "PullConfirmStatus",
    "PutStatus",
    "WireMessage",
    "body_limits",
    "decode_body",
    "decode_expiries",
    "decode_expiry_items",
    "decode_fields",
    "device_queue_name",
    "encode_body",
    "encode_fields",
    "error_body",
    "expect",
    "opt_int",
    "rebase_ms",
    "req_int",
    "req_list",
    "req_name",
    "req_str",
    "transit_ms",
]

PROTOCOL_VERSION: Final = 1
SUPPORTED_VERSIONS: Final = frozenset({1})
CONTENT_TYPE: Final = "application/cbor"
#: Far beyond any useful expiry, and safe to add to an epoch ms.
MAX_REMAINING_MS: Final = 2**62

PATH_HELLO: Final = "/v1/hello"
PATH_PUT: Final = "/v1/put"
PATH_CONFIRM: Final = "/v1/confirm"
PATH_PULL: Final = "/v1/pull"
PATH_PULL_CONFIRM: Final = "/v1/pull/confirm"
PATH_EXPIRIES: Final = "/v1/expiries"

# The vocabulary shared with the core is edgeq.types' (imported above, not redefined): a
# put's per-message results (PutStatus, re-exported here), a confirm's per-uid results
# (ConfirmStatus, re-exported), field type codes, expiry check points.

#: Per-uid results of a pull confirm.
PullConfirmStatus: TypeAlias = Literal["confirmed", "unknown", "expired"]
#: The statuses a pull confirm's results may carry, for checking an answer.
PULL_CONFIRM_STATUSES: Final[tuple[str, ...]] = get_args(PullConfirmStatus)
#: Per-entry results of an expiry report: ``recorded``, ``already`` (a repeat, kept
#: once), ``refused`` (foreign or malformed: see ``why``), or ``ignored`` (valid,
#: but this server keeps no journal). Every one of them is an answer: the device
#: trims its outbox.
ExpiryStatus: TypeAlias = Literal[RemoteExpiryStatus, "ignored"]
#: The statuses an expiry report's results may carry, for checking an answer.
EXPIRY_STATUSES: Final[tuple[str, ...]] = get_args(ExpiryStatus)

ErrorCode: TypeAlias = Literal[
    "malformed",
    "unsupported-version",
    "unsupported-media-type",
    "too-large",
    "invalid",
    "hello-required",
    "unauthorized",
    "forbidden",
    "over-quota",
    "busy",
    "internal",
    "not-found",
    "method-not-allowed",
]

#: The HTTP status each error code is sent with.
HTTP_STATUS: Final[Mapping[str, int]] = {
    "malformed": 400,
    "unsupported-version": 400,
    "unsupported-media-type": 415,
    "too-large": 413,
    "invalid": 422,
    "hello-required": 428,
    "unauthorized": 401,
    "forbidden": 403,
    "over-quota": 429,  # a device's unconfirmed puts at its quota: the agent retries later
    "busy": 503,
    "internal": 500,
    "not-found": 404,
    "method-not-allowed": 405,
}


class ProtocolError(EdgeqError):
    """A request or response that breaks the protocol; ``code`` is the wire error code."""

    def __init__(self, code: ErrorCode, detail: str) -> None:
        super().__init__(f"{code}: {detail}")
        self.code: ErrorCode = code
        self.detail = detail

    @property
    def http_status(self) -> int:
        """The HTTP status this error is answered with."""
        return HTTP_STATUS[self.code]


def _invalid(detail: str) -> ProtocolError:
    return ProtocolError("invalid", detail)


# -- bodies ----------------------------------------------------------------------------


def encode_body(body: Mapping[str, Any]) -> bytes:
    """One CBOR map, stamped with the protocol version (``"v"``)."""
    return cbor2.dumps({"v": PROTOCOL_VERSION, **body})


#: The data items one message of a full batch may take on average: its fixed keys and
#: values take at most 19, each field 4 (its name, ``[code, value]``): room for 3 fields
#: in a batch of the server's largest size, many more in the agent's usual 500.
ITEMS_PER_MESSAGE: Final = 32
#: The arrays and maps one message of a full batch may take on average: its own map, its
#: fields' map and one array a field: room for 6 fields (decoding a container costs ~30
#: times a number: a Python object the garbage collector tracks).
CONTAINERS_PER_MESSAGE: Final = 8
#: Items (and containers), entries of one array or map, and nesting a body needs besides
#: its batch: the body map's own keys, a hello's lists (the deepest body: a map of arrays
#: of maps of field maps of ``[code, value]`` arrays is 5 levels).
BODY_ITEMS: Final = 1_024
BODY_DEPTH: Final = 8


def body_limits(max_batch: int) -> DecodeLimits:
    """What a request body may cost to decode on a server taking batches of ``max_batch``:
    ``max_batch`` entries in one array or map, :data:`ITEMS_PER_MESSAGE` items and
    :data:`CONTAINERS_PER_MESSAGE` arrays and maps a message.

    >>> body_limits(5_000)
    DecodeLimits(max_depth=8, max_items=161024, max_length=5000, max_containers=41024)
    """
    return DecodeLimits(max_depth=BODY_DEPTH, max_items=max_batch * ITEMS_PER_MESSAGE + BODY_ITEMS,
                        max_length=max(max_batch, BODY_ITEMS),
                        max_containers=max_batch * CONTAINERS_PER_MESSAGE + BODY_ITEMS)


def decode_body(raw: bytes, limits: DecodeLimits = DEFAULT_LIMITS) -> dict[str, Any]:
    """Decode and check one body: exactly one CBOR map of a supported version, decoded
    within ``limits`` (:mod:`edgeq.cbor`: no tags, bounded depth, items and entries).

    Raises :class:`ProtocolError` ``malformed`` (not CBOR, truncated, trailing
    bytes, a tag, too deep, not a map) or ``unsupported-version``.

    >>> decode_body(b"\\xa1\\x61v\\x01")
    {'v': 1}
    >>> try:
    ...     decode_body(b"\\xa1\\x61v")
    ... except ProtocolError as exc:
    ...     print(exc.code)
    malformed
    """
    try:
        value = loads(raw, limits)
    except MalformedBody as exc:
        raise ProtocolError("malformed", str(exc)) from exc
    if not isinstance(value, dict):
        raise ProtocolError("malformed", f"body must be a CBOR map, not {type(value).__name__}")
    version = value.get("v")
    if isinstance(version, bool) or not isinstance(version, int):
        raise ProtocolError("unsupported-version", f"body has no protocol version 'v' (this end speaks {PROTOCOL_VERSION})")
    if version not in SUPPORTED_VERSIONS:
        raise ProtocolError(
            "unsupported-version",
            f"protocol version {version} is not supported (this end speaks {sorted(SUPPORTED_VERSIONS)}): "
            "upgrade the older end",
        )
    return value


def error_body(code: ErrorCode, detail: str) -> bytes:
    """The body of an error response."""
    return encode_body({"type": "error", "code": code, "detail": detail, "supported": sorted(SUPPORTED_VERSIONS)})


# -- field checks (raise ProtocolError "invalid") ------------------------------------------


def expect(body: Mapping[str, Any], kind: str) -> None:
    """Check the body's ``type``."""
    got = body.get("type")
    if got != kind:
        raise _invalid(f"expected a {kind!r} body, got type {describe(got)}")


def req_int(body: Mapping[str, Any], key: str, *, low: int = 0, high: int = MAX_INT64) -> int:
    """The integer ``body[key]``, checked to be in ``low .. high`` (a bool is refused)."""
    value = body.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _invalid(f"{key!r} must be an integer, not {type(value).__name__}")
    if not low <= value <= high:
        raise _invalid(f"{key!r} = {describe(value)} is out of range {low} .. {high}")
    return value


def opt_int(body: Mapping[str, Any], key: str, *, low: int = 0, high: int = MAX_INT64) -> int | None:
    """Like :func:`req_int`, but None if ``key`` is missing or null."""
    return None if body.get(key) is None else req_int(body, key, low=low, high=high)


def req_str(body: Mapping[str, Any], key: str, *, max_len: int = 1024) -> str:
    """The string ``body[key]``, non-empty and at most ``max_len`` characters."""
    value = body.get(key)
    if not isinstance(value, str) or not 0 < len(value) <= max_len:
        raise _invalid(f"{key!r} must be a non-empty string of at most {max_len} characters")
    return value


def req_name(body: Mapping[str, Any], key: str) -> str:
    """A queue or queue manager name (1-48 of ``A-Za-z0-9._-``)."""
    from edgeq.names import check_name

    value = req_str(body, key, max_len=48)
    try:
        check_name(value, key)
    except EdgeqError as exc:
        raise _invalid(str(exc)) from exc
    return value


def req_list(body: Mapping[str, Any], key: str, *, max_len: int) -> list[Any]:
    """The array ``body[key]``, of at most ``max_len`` items."""
    value = body.get(key)
    if not isinstance(value, list):
        raise _invalid(f"{key!r} must be an array, not {type(value).__name__}")
    if len(value) > max_len:
        raise _invalid(f"{key!r} holds {len(value)} items; at most {max_len} per request")
    return value


def req_uids(body: Mapping[str, Any], key: str, *, max_len: int) -> list[MessageUID]:
    """The array ``body[key]`` of ``ORIGIN.STAMP`` uid strings, parsed (at most ``max_len``)."""
    out: list[MessageUID] = []
    for item in req_list(body, key, max_len=max_len):
        out.append(_uid(item))
    return out


def _uid(value: object) -> MessageUID:
    if not isinstance(value, str):
        raise _invalid(f"a uid must be a string ORIGIN.STAMP, not {type(value).__name__}")
    if len(value) > 85:  # origin (48 + ':' + 16) '.' stamp (19 digits): parsing more could not succeed
        raise _invalid(f"uid {describe(value)} is not a message uid: {len(value)} characters, at most 85")
    try:
        return MessageUID.parse(value)
    except EdgeqError as exc:
        raise _invalid(str(exc)) from exc


# -- typed fields ----------------------------------------------------------------------------

def encode_fields(fields: Mapping[str, FieldValue]) -> dict[str, list[Any]]:
    """Typed fields as a CBOR-ready map ``{name: [code, value]}`` (as edgeq.codec stores them).

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
    (:class:`~edgeq.sync.clockbounds.ServerClockBounds`). It is never trusted
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
        uid = _uid(raw.get("u"))
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


# -- device expiry reports (/v1/expiries) -----------------------------------------------------


def device_queue_name(device: str, queue: str) -> str:
    """Where the server holds messages for home-server queue ``queue`` of ``device``
    (the protocol's naming convention, ``<device>.<queue>``; at most 48 characters).

    >>> device_queue_name("DEV1", "INBOX")
    'DEV1.INBOX'
    """
    from edgeq.names import check_name

    name = f"{device}.{queue}"
    check_name(name, "device queue name")
    return name


def encode_expiries(entries: Sequence[JournalEntry]) -> list[dict[str, Any]]:
    """A device's journaled expiries, for ``/v1/expiries`` (times on the device clock); a
    dead-lettering or discard goes the same way, with ``k`` (its kind) and its reason in ``w``.

    >>> e = JournalEntry(7, "expired", "device", 1_000, "ORDERS", "DEV1.5", "DEV1", check_point="get")
    >>> encode_expiries([e])
    [{'u': 'DEV1.5', 'q': 'ORDERS', 't': 1000, 'w': 'get', 'n': None, 'c': None, 'a': None}]
    """
    return [
        {"u": e.uid, "q": e.queue, "t": e.at_ms, "w": e.check_point, "n": e.size, "c": e.created_ms,
         "a": e.arrived_ms, **({} if e.kind == "expired" else {"k": e.kind})}
        for e in entries
    ]


def _expiry_entry(raw: object) -> JournalEntry:
    """One entry of an ``expiries`` request, checked (``invalid`` naming the problem)."""
    if not isinstance(raw, dict):
        raise _invalid("each expiry entry must be a map")
    uid = _uid(raw.get("u"))
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
    """Validate and decode the entries of an ``expiries`` request; any bad entry makes
    the whole body ``invalid`` (:func:`decode_expiry_items` answers entry by entry)."""
    return [_expiry_entry(raw) for raw in req_list(body, key, max_len=max_len)]


@dataclass(frozen=True, slots=True)
class ExpiryItem:
    """One entry of an ``expiries`` request: decoded (``entry``), or refused (``why``).
    ``uid`` is the entry's ``u`` as sent (empty if it had none), for the answer."""

    uid: str
    entry: JournalEntry | None
    why: str | None = None


def decode_expiry_items(body: Mapping[str, Any], key: str, *, max_len: int) -> list[ExpiryItem]:
    """The entries of an ``expiries`` request, each decoded or refused on its own: a
    malformed entry is an item with ``why``, never an error for the whole body. Only
    a malformed body (``key`` not a list, more than ``max_len`` entries) raises ``invalid``.

    >>> items = decode_expiry_items({"e": [{"u": "DEV1.5", "q": "ORDERS", "t": 9, "w": "get"},
    ...                                    {"u": "DEV1.6", "q": "ORDERS", "w": "get"}]}, "e", max_len=10)
    >>> [(i.uid, i.entry is not None, i.why) for i in items]
    [('DEV1.5', True, None), ('DEV1.6', False, "'t' must be an integer, not NoneType")]
    """
    out: list[ExpiryItem] = []
    for raw in req_list(body, key, max_len=max_len):
        sent = raw.get("u") if isinstance(raw, dict) else None
        uid = sent[:200] if isinstance(sent, str) else ""
        try:
            out.append(ExpiryItem(uid, _expiry_entry(raw)))
        except ProtocolError as exc:
            out.append(ExpiryItem(uid, None, exc.detail))
    return out

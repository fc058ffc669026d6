"""The mapping between a JetStream message and an edgeq message, both ways, and the TTL arithmetic
(docs/bridges.md has the table). Pure: headers are the raw block in, a dict out (as nats-py sends them)."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Final

from edgeq.message import Message
from edgeq.sync.bridges.errors import PublishRefused
from edgeq.sync.bridges.mapping import SECOND_MS
from edgeq.types import MAX_STAMP, FieldValue
from edgeq.uid import MessageUID
from edgeq.values import Int64

__all__ = ["HEADERS", "MSG_ID", "MSG_ID_HEADER", "SEQ", "STREAM", "SUBJECT", "TTL_HEADER", "JsOutgoing",
           "incoming_message", "incoming_uid", "outgoing", "parse_headers", "parse_ttl"]

SUBJECT: Final = "nats.subject"
STREAM: Final = "nats.stream"
#: The stream sequence of the message received.
SEQ: Final = "nats.seq"
#: The Nats-Msg-Id it was published with (the publisher's identity for it).
MSG_ID: Final = "nats.msg_id"
#: The other headers, in order and with repeated names, as a JSON list of [name, value] pairs.
HEADERS: Final = "nats.headers"
MSG_ID_HEADER: Final = "Nats-Msg-Id"
TTL_HEADER: Final = "Nats-TTL"
_STATUS_LINE = b"NATS/1.0\r\n"
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_DURATION = re.compile(r"([0-9]*(?:\.[0-9]*)?)(ns|us|µs|μs|ms|s|m|h)")
_UNIT_NS = {"ns": 1, "us": 1_000, "µs": 1_000, "μs": 1_000, "ms": 1_000_000, "s": 10**9,
            "m": 60 * 10**9, "h": 3600 * 10**9}


def parse_headers(raw: bytes) -> list[tuple[str, str]]:
    """The ``name: value`` pairs of a header block, in order; :class:`PublishRefused` if it is malformed
    (nats-py would drop such lines, or change bytes, without a word)."""
    if not raw.startswith(_STATUS_LINE) or not raw.endswith(b"\r\n\r\n"):
        raise PublishRefused(f"its header block is malformed: it must start {_STATUS_LINE!r} and end with "
                             f"an empty line, not {raw[:40]!r}")
    pairs = []
    for line in raw[len(_STATUS_LINE):-4].split(b"\r\n") if len(raw) > len(_STATUS_LINE) + 2 else []:
        name, colon, value = line.partition(b":")
        try:
            text = value.decode("utf-8").strip()
        except UnicodeDecodeError as exc:
            raise PublishRefused(f"its header {name[:40]!r} has a value that is not UTF-8 ({exc})") from exc
        if not colon or not _TOKEN.fullmatch(name.decode("ascii", "replace")):
            raise PublishRefused(f"its header line {line[:60]!r} is malformed: not NAME: VALUE")
        if any((ord(c) < 32 and c != "\t") or ord(c) == 127 for c in text):
            raise PublishRefused(f"its header {name.decode()!r} has control characters: {text[:60]!r}")
        pairs.append((name.decode("ascii"), text))
    return pairs


def parse_ttl(text: str) -> int | None:
    """A ``Nats-TTL`` in whole seconds as the server reads it (None: never, or no TTL of its own)."""
    if text.lower() == "never" or text == "-1":
        return None
    if text.isdigit():
        return int(text) or None
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text or any(n in ("", ".") for n, _ in parts):
        raise PublishRefused(f"its {TTL_HEADER} header {text[:40]!r} is not seconds, a duration or never")
    ns = sum(Fraction(n) * _UNIT_NS[u] for n, u in parts)
    if ns < 10**9:
        raise PublishRefused(f"its {TTL_HEADER} header {text!r} is under a second")
    return int(ns // 10**9)


def incoming_uid(origin: str, stream: str, created: str, seq: int, msg_id: str | None) -> MessageUID:
    """The uid of stream message ``seq``: the same for every redelivery of it, another for a stream of
    the same name made anew (``created``) or a message published under another Nats-Msg-Id."""
    digest = hashlib.sha256(json.dumps([stream, created, seq, msg_id]).encode())
    return MessageUID(origin, int.from_bytes(digest.digest()[:8], "big") % MAX_STAMP + 1)


def incoming_message(subject: str, payload: bytes, headers: list[tuple[str, str]], stream: str, seq: int,
                     stored_ns: int, received_ms: int, uid: MessageUID) -> Message:
    """The message a stream message becomes (stored by the stream at ``stored_ns``, received at
    ``received_ms``). Its deadline: the earlier of stored + TTL and received + TTL (never later)."""
    fields: dict[str, FieldValue] = {SUBJECT: subject, STREAM: stream, SEQ: Int64(seq)}
    others, ttl = [], None
    for name, value in headers:
        if name == MSG_ID_HEADER:
            fields[MSG_ID] = value
        elif name == TTL_HEADER:
            ttl = parse_ttl(value)
        else:
            others.append([name, value])
    if others:
        fields[HEADERS] = json.dumps(others, ensure_ascii=False)
    expiry = None if ttl is None else Int64(min(stored_ns // 1_000_000, received_ms) + ttl * SECOND_MS)
    return Message(payload, fields=fields, expiry=expiry, uid=uid, created_ms=received_ms)


@dataclass(frozen=True, slots=True)
class JsOutgoing:
    """A message to publish: payload, headers, and its TTL (``ttl_s``) and edgeq deadline, if it expires."""

    payload: bytes
    headers: dict[str, str]
    ttl_s: int | None
    deadline_ms: int | None


def outgoing(message: Message, got_ms: int, now_ms: int, margin_ms: int) -> JsOutgoing | None:
    """The publish for a message got at ``got_ms`` (its ``remaining_expiry_ms`` then), sent at ``now_ms``;
    None if under a second is left once ``margin_ms`` (the server stamps it after ``now_ms``) is taken off.
    The TTL is what is left, rounded down to seconds; ``Nats-Msg-Id`` is the uid."""
    headers: dict[str, str] = {}
    field = message.fields.get(HEADERS)
    if isinstance(field, str):
        try:
            pairs = [(str(n), str(v)) for n, v in json.loads(field)]
        except (ValueError, TypeError) as exc:
            raise PublishRefused(f"its field {HEADERS} is not a JSON list of [name, value] pairs") from exc
        for name, value in pairs:
            if not _TOKEN.fullmatch(name) or any(ord(c) < 32 and c != "\t" for c in value):
                raise PublishRefused(f"its field {HEADERS} has a header NATS cannot carry: {name!r}")
            if not name.lower().startswith("nats-"):  # the server's (id, TTL, expectations): never forged
                headers[name] = f"{headers[name]}, {value}" if name in headers else value
    headers[MSG_ID_HEADER] = str(message.uid)
    ttl = deadline = None
    if message.remaining_expiry_ms is not None:
        deadline = got_ms + message.remaining_expiry_ms
        left = deadline - now_ms - margin_ms
        if left < SECOND_MS:
            return None
        ttl = left // SECOND_MS
        headers[TTL_HEADER] = str(ttl)
    return JsOutgoing(message.data, headers, ttl, deadline)

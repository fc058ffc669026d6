"""The mapping between an MQTT 5 PUBLISH and an edgeq message, both ways, and the expiry arithmetic
(docs/bridges.md has the table). Pure: properties are a dict named as paho names them."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from edgeq.message import Message
from edgeq.sync.bridges.errors import PublishRefused
from edgeq.types import MAX_STAMP
from edgeq.uid import MessageUID
from edgeq.values import Int64

__all__ = ["CONTENT_TYPE", "CORRELATION_DATA", "RESPONSE_TOPIC", "SECOND_MS", "TOPIC", "UID_PROPERTY",
           "USER_PROPERTIES", "UTF8", "Outgoing", "incoming_message", "incoming_uid", "outgoing"]

TOPIC: Final = "mqtt.topic"
CONTENT_TYPE: Final = "mqtt.content_type"
CORRELATION_DATA: Final = "mqtt.correlation_data"
RESPONSE_TOPIC: Final = "mqtt.response_topic"
#: The user properties, in order and with repeated names, as a JSON list of [name, value] pairs.
USER_PROPERTIES: Final = "mqtt.user_properties"
#: The Payload Format Indicator: True when the sender declared the payload UTF-8 text.
UTF8: Final = "mqtt.utf8"
#: The user property the out-bridge sets to the message's edgeq uid (a resend carries the same).
UID_PROPERTY: Final = "edgeq-uid"
#: MQTT counts expiry in whole seconds: a message with less than one left is not published, and an
#: interval received may overstate what is left by up to one (a broker counting whole seconds).
SECOND_MS: Final = 1000
#: The properties that identify a PUBLISH (the broker lowers the expiry interval on a redelivery).
_IDENTIFYING = ("ContentType", "CorrelationData", "ResponseTopic", "UserProperty", "PayloadFormatIndicator")


def _text(value: object, what: str) -> str:
    if not isinstance(value, str) or any(ord(c) < 32 and c not in "\t" for c in value):
        raise PublishRefused(f"its {what} {value!r} is not printable text")
    return value


def incoming_message(topic: str, payload: bytes, props: Mapping[str, Any], received_ms: int,
                     uid: MessageUID) -> Message:
    """The message a PUBLISH received at ``received_ms`` becomes; :class:`PublishRefused` if malformed.
    Its deadline: ``received_ms`` plus the Message Expiry Interval less the second it may overstate."""
    fields: dict[str, Any] = {TOPIC: topic}
    if props.get("PayloadFormatIndicator") == 1:
        try:
            payload.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise PublishRefused(f"its payload is declared UTF-8 (Payload Format Indicator 1) but is not: "
                                 f"{exc}") from exc
        fields[UTF8] = True
    if "ContentType" in props:
        fields[CONTENT_TYPE] = _text(props["ContentType"], "content type")
    if "ResponseTopic" in props:
        fields[RESPONSE_TOPIC] = _text(props["ResponseTopic"], "response topic")
    if "CorrelationData" in props:
        fields[CORRELATION_DATA] = bytes(props["CorrelationData"])
    pairs = props.get("UserProperty") or []
    if pairs:
        for name, value in pairs:
            if not _text(name, "user property name"):
                raise PublishRefused("it has a user property with an empty name")
            _text(value, f"user property {name!r}")
        fields[USER_PROPERTIES] = json.dumps([list(p) for p in pairs], ensure_ascii=False)
    interval = props.get("MessageExpiryInterval")
    expiry = None if interval is None else Int64(received_ms + (int(interval) - 1) * SECOND_MS)
    return Message(payload, fields=fields, expiry=expiry, uid=uid, created_ms=received_ms)


def incoming_uid(origin: str, mid: int, topic: str, payload: bytes, props: Mapping[str, Any],
                 salt: int = 0) -> MessageUID:
    """The uid of a received PUBLISH: the same for the broker's redelivery of it (same packet id,
    topic, payload and properties but the expiry), ``salt`` telling apart distinct identical ones."""
    digest = hashlib.sha256()
    ident = [mid, topic, salt, [[k, repr(props.get(k))] for k in _IDENTIFYING]]
    digest.update(json.dumps(ident).encode())
    digest.update(payload)
    return MessageUID(origin, int.from_bytes(digest.digest()[:8], "big") % MAX_STAMP + 1)


@dataclass(frozen=True, slots=True)
class Outgoing:
    """A PUBLISH to send for a message: payload and properties (paho's names)."""

    payload: bytes
    properties: dict[str, Any]


def outgoing(message: Message, got_ms: int, now_ms: int) -> Outgoing | None:
    """The PUBLISH for a message got at ``got_ms`` (its ``remaining_expiry_ms`` then), sent at ``now_ms``;
    None if less than a second is left. The interval is what is left, rounded down to seconds."""
    props: dict[str, Any] = {"UserProperty": [(UID_PROPERTY, str(message.uid))]}
    if message.remaining_expiry_ms is not None:
        left = got_ms + message.remaining_expiry_ms - now_ms
        if left < SECOND_MS:
            return None
        props["MessageExpiryInterval"] = left // SECOND_MS
    fields = message.fields
    if isinstance(fields.get(CONTENT_TYPE), str):
        props["ContentType"] = fields[CONTENT_TYPE]
    if isinstance(fields.get(RESPONSE_TOPIC), str):
        props["ResponseTopic"] = fields[RESPONSE_TOPIC]
    correlation = fields.get(CORRELATION_DATA, message.correlation_id)
    if isinstance(correlation, bytes):
        props["CorrelationData"] = correlation
    if fields.get(UTF8) is True:
        props["PayloadFormatIndicator"] = 1
    if isinstance(fields.get(USER_PROPERTIES), str):
        try:
            pairs = [(str(n), str(v)) for n, v in json.loads(str(fields[USER_PROPERTIES]))]
        except (ValueError, TypeError) as exc:
            raise PublishRefused(
                f"its field {USER_PROPERTIES} is not a JSON list of [name, value] pairs") from exc
        props["UserProperty"] = [p for p in pairs if p[0] != UID_PROPERTY] + props["UserProperty"]
    return Outgoing(message.data, props)

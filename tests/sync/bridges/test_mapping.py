"""The mapping of sync/bridges/mapping.py on its own: fields both ways, the expiry arithmetic by one
clock, uids that recognise a redelivery, and malformed properties refused."""

from __future__ import annotations

import pytest

from edgeq import Message
from edgeq.sync.bridges.errors import PublishRefused
from edgeq.sync.bridges.mapping import (
    CONTENT_TYPE,
    SECOND_MS,
    TOPIC,
    UID_PROPERTY,
    USER_PROPERTIES,
    incoming_message,
    incoming_uid,
    outgoing,
)
from edgeq.uid import MessageUID

T0 = 1_763_683_200_000
UID = MessageUID("in1:1f", 42)


def got(remaining_ms: int | None, **fields: object) -> Message:
    return Message(b"x", fields=fields, uid=MessageUID("DEV1:abc", 7), remaining_expiry_ms=remaining_ms)


@pytest.mark.parametrize(("remaining", "delay", "interval"), [
    (60_000, 0, 60), (60_000, 1, 59), (60_999, 0, 60), (1_000, 0, 1), (2_500, 1_499, 1),
    (86_400_000, 5, 86_399),
])
def test_the_interval_sent_is_what_is_left_at_publish_rounded_down(
    remaining: int, delay: int, interval: int
) -> None:
    sent = outgoing(got(remaining), T0, T0 + delay)
    assert sent is not None and sent.properties["MessageExpiryInterval"] == interval
    assert T0 + delay + interval * SECOND_MS <= T0 + remaining  # never later than the edgeq deadline
    assert T0 + remaining - (T0 + delay + interval * SECOND_MS) < SECOND_MS  # under a second early


@pytest.mark.parametrize(("remaining", "delay"), [(999, 0), (1_000, 1), (5_000, 4_001), (0, 0)])
def test_a_message_with_less_than_a_second_left_is_not_published(remaining: int, delay: int) -> None:
    assert outgoing(got(remaining), T0, T0 + delay) is None


def test_no_expiry_sends_no_interval_and_the_uid_rides_last() -> None:
    sent = outgoing(got(None, **{USER_PROPERTIES: '[["a","1"],["edgeq-uid","forged"]]'}), T0, T0)
    assert sent is not None and "MessageExpiryInterval" not in sent.properties
    assert sent.properties["UserProperty"] == [("a", "1"), (UID_PROPERTY, "DEV1:abc.7")]


def test_a_user_properties_field_that_is_not_pairs_is_refused() -> None:
    with pytest.raises(PublishRefused, match="not a JSON list"):
        outgoing(got(None, **{USER_PROPERTIES: "{not json"}), T0, T0)


def test_the_interval_received_counts_from_receipt_less_the_second_it_may_overstate() -> None:
    props = {"MessageExpiryInterval": 30, "ContentType": "text/plain"}
    stored = incoming_message("s/t1", b"1", props, T0, UID)
    assert stored.expiry_deadline_ms == T0 + 29_000
    assert dict(stored.fields) == {TOPIC: "s/t1", CONTENT_TYPE: "text/plain"}
    assert incoming_message("s/t1", b"1", {}, T0, UID).expiry is None


@pytest.mark.parametrize(("props", "payload", "why"), [
    ({"PayloadFormatIndicator": 1}, b"\xff\xfe", "declared UTF-8"),
    ({"ContentType": "text\x01plain"}, b"", "not printable"),
    ({"UserProperty": [("", "v")]}, b"", "empty name"),
    ({"ResponseTopic": "a\x00b"}, b"", "not printable"),
])
def test_malformed_properties_are_refused(props: dict[str, object], payload: bytes, why: str) -> None:
    with pytest.raises(PublishRefused, match=why):
        incoming_message("s/t1", payload, props, T0, UID)


def test_a_redelivery_has_the_same_uid_and_a_salt_another() -> None:
    first = incoming_uid("in1:1f", 7, "s/t1", b"1", {"MessageExpiryInterval": 30, "ContentType": "a"})
    assert incoming_uid("in1:1f", 7, "s/t1", b"1", {"MessageExpiryInterval": 12, "ContentType": "a"}) == first
    assert incoming_uid("in1:1f", 7, "s/t1", b"1", {"ContentType": "a"}, salt=1) != first
    assert incoming_uid("in1:1f", 8, "s/t1", b"1", {"ContentType": "a"}) != first

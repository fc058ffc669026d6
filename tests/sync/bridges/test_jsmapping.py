"""The JetStream mapping of sync/bridges/jsmapping.py on its own: the TTL arithmetic by one clock, header
blocks read strictly, uids that recognise a redelivery, and servers or streams without per-message TTL."""

from __future__ import annotations

import json

import pytest
from nats.js.api import StreamConfig

from edgeq import Message
from edgeq.sync.bridges.errors import BridgeConfigError, PublishRefused
from edgeq.sync.bridges.jetstream import check_ttl_support
from edgeq.sync.bridges.jsmapping import (
    HEADERS,
    MSG_ID,
    MSG_ID_HEADER,
    TTL_HEADER,
    incoming_message,
    incoming_uid,
    outgoing,
    parse_headers,
    parse_ttl,
)
from edgeq.sync.bridges.mapping import SECOND_MS
from edgeq.uid import MessageUID

T0 = 1_763_683_200_000
UID = MessageUID("jin:1f", 42)


def got(remaining_ms: int | None, **fields: str) -> Message:
    return Message(b"x", fields=fields, uid=MessageUID("DEV1:abc", 7), remaining_expiry_ms=remaining_ms)


@pytest.mark.parametrize(("remaining", "delay", "margin", "ttl"), [
    (60_000, 0, 0, 60), (60_000, 0, 100, 59), (60_999, 0, 100, 60), (60_999, 900, 100, 59),
    (1_100, 0, 100, 1), (86_400_437, 5, 100, 86_400),
])
def test_the_ttl_sent_is_what_is_left_at_publish_less_the_margin_rounded_down(
    remaining: int, delay: int, margin: int, ttl: int
) -> None:
    sent = outgoing(got(remaining), T0, T0 + delay, margin)
    assert sent is not None and sent.ttl_s == ttl and sent.headers[TTL_HEADER] == str(ttl)
    assert sent.deadline_ms == T0 + remaining
    # stamped by the server up to ``margin`` ms after the publish, it is never kept past the deadline
    assert T0 + delay + margin + ttl * SECOND_MS <= T0 + remaining
    assert T0 + remaining - (T0 + delay + margin + ttl * SECOND_MS) < SECOND_MS


@pytest.mark.parametrize(("remaining", "delay", "margin"), [(999, 0, 0), (1_099, 0, 100), (5_000, 4_001, 0)])
def test_a_message_with_less_than_a_second_left_is_not_published(
    remaining: int, delay: int, margin: int
) -> None:
    assert outgoing(got(remaining), T0, T0 + delay, margin) is None


def test_the_uid_is_the_msg_id_and_the_servers_headers_are_never_forged() -> None:
    pairs = [["X-A", "1"], ["Nats-Msg-Id", "forged"], ["nats-ttl", "99"], ["X-A", "2"],
             ["Nats-Rollup", "all"]]
    sent = outgoing(got(None, **{HEADERS: json.dumps(pairs)}), T0, T0, 100)
    assert sent is not None and sent.ttl_s is None
    assert sent.headers == {"X-A": "1, 2", MSG_ID_HEADER: "DEV1:abc.7"}  # repeated names joined, in order


@pytest.mark.parametrize("field", ["{not json", '[["bad name", "v"]]', '[["X", "a\\nb"]]'])
def test_a_headers_field_nats_cannot_carry_is_refused(field: str) -> None:
    with pytest.raises(PublishRefused, match=HEADERS):
        outgoing(got(None, **{HEADERS: field}), T0, T0, 100)


def test_the_deadline_received_is_the_streams_never_later_whatever_the_clocks() -> None:
    headers = [(MSG_ID_HEADER, "s-1"), (TTL_HEADER, "30"), ("X-A", "1"), ("X-A", "2")]
    stored_ns = (T0 - 2_000) * 1_000_000 + 999_999  # stored 2 s before it was received, ns rounded down
    message = incoming_message("s.t1", b"1", headers, "S", 7, stored_ns, T0, UID)
    assert message.expiry == T0 - 2_000 + 30_000
    assert message.fields[MSG_ID] == "s-1" and message.fields[HEADERS] == '[["X-A", "1"], ["X-A", "2"]]'
    # a server clock ahead of the bridge's: the TTL counts from the receipt, which is no earlier in truth
    ahead = incoming_message("s.t1", b"1", headers, "S", 7, (T0 + 5_000) * 1_000_000, T0, UID)
    assert ahead.expiry == T0 + 30_000
    assert incoming_message("s.t1", b"1", [], "S", 7, stored_ns, T0, UID).expiry is None


@pytest.mark.parametrize(("text", "seconds"), [
    ("30", 30), ("1.5s", 1), ("90m", 5400), ("1h30m", 5400), ("never", None), ("NEVER", None), ("-1", None),
    ("0", None), ("1500ms", 1),
])
def test_a_ttl_is_read_as_the_server_reads_it(text: str, seconds: int | None) -> None:
    assert parse_ttl(text) == seconds


@pytest.mark.parametrize(("text", "why"), [("500ms", "under a second"), ("10 s", "not seconds"),
                                           ("s", "not seconds"), ("-5", "not seconds")])
def test_a_ttl_the_server_would_not_take_is_refused(text: str, why: str) -> None:
    with pytest.raises(PublishRefused, match=why):
        parse_ttl(text)


@pytest.mark.parametrize(("raw", "why"), [
    (b"HTTP/1.1\r\nX: 1\r\n\r\n", "must start"),
    (b"NATS/1.0\r\nX: 1\r\n", "must start"),
    (b"NATS/1.0\r\nno colon\r\n\r\n", "not NAME: VALUE"),
    (b"NATS/1.0\r\nBad Name: 1\r\n\r\n", "not NAME: VALUE"),
    (b"NATS/1.0\r\nX: \xff\r\n\r\n", "not UTF-8"),
    (b"NATS/1.0\r\nX: a\x00b\r\n\r\n", "control characters"),
])
def test_malformed_header_blocks_are_refused(raw: bytes, why: str) -> None:
    with pytest.raises(PublishRefused, match=why):
        parse_headers(raw)


def test_a_header_block_is_read_in_order_with_repeated_names() -> None:
    assert parse_headers(b"NATS/1.0\r\nX-A: 1\r\nX-A:2\r\nX-B: caf\xc3\xa9 \r\n\r\n") == [
        ("X-A", "1"), ("X-A", "2"), ("X-B", "café")]
    assert parse_headers(b"NATS/1.0\r\n\r\n") == []


def test_a_redelivery_has_the_same_uid_and_a_stream_made_anew_another() -> None:
    first = incoming_uid("jin:1f", "S", "2026-11-28T00:00:00+00:00", 7, "m-1")
    assert incoming_uid("jin:1f", "S", "2026-11-28T00:00:00+00:00", 7, "m-1") == first
    assert incoming_uid("jin:1f", "S", "2026-11-28T00:05:00+00:00", 7, "m-1") != first
    assert incoming_uid("jin:1f", "S", "2026-11-28T00:00:00+00:00", 7, None) != first
    assert incoming_uid("jin:1f", "S", "2026-11-28T00:00:00+00:00", 8, "m-1") != first


def test_a_server_or_stream_without_per_message_ttl_is_refused() -> None:
    with pytest.raises(BridgeConfigError, match=r"server is 2\.10\.4: .* needs nats-server 2\.11"):
        check_ttl_support((2, 10, 4), StreamConfig(name="S", allow_msg_ttl=True))
    with pytest.raises(BridgeConfigError, match="stream S does not allow a per-message TTL"):
        check_ttl_support((2, 11, 0), StreamConfig(name="S"))
    check_ttl_support((2, 11, 0), StreamConfig(name="S", allow_msg_ttl=True))

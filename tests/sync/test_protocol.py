"""The wire format: binary-safe, typed, versioned, strict about what it accepts."""

from __future__ import annotations

import cbor2
import pytest

from edgeq import Int32, Int64, Message, MessageUID
from edgeq.store.journal import JournalEntry
from edgeq.sync import messages as wm
from edgeq.sync import protocol as p
from edgeq.sync.expiryreports import decode_expiry_items, encode_expiries
from edgeq.sync.framing import negotiate
from edgeq.sync.signing import canonical

UID = MessageUID("DEV1", 1_763_683_200_000_123)


def roundtrip(message: Message, now: int = 5_000_000, transit: int = 0) -> Message:
    wire = wm.WireMessage.from_message(message, resend=True).to_wire()
    body = p.decode_body(p.encode_body({"type": "put", "messages": [wire]}))
    return wm.decode_messages(body, "messages", max_len=10)[0].to_message(now, transit)


def test_every_byte_value_and_every_field_type_survive() -> None:
    data = bytes(range(256)) * 3
    fields = {"i": Int32(-5), "l": Int64(2**40), "s": "zürich ✓", "b": b"\x00\xff", "f": 1.25, "t": True}
    got = roundtrip(Message(data, fields=fields, uid=UID, priority=7, correlation_id=b"\x00c",
                            reply_to="REPLIES", expiry_report="with-data"))
    assert got.data == data
    assert dict(got.fields) == fields
    assert [type(got.fields[k]) for k in fields] == [Int32, Int64, str, bytes, float, bool]
    assert (got.uid, got.priority, got.correlation_id, got.reply_to, got.expiry_report, got.resend) == (
        UID, 7, b"\x00c", "REPLIES", "with-data", True)
    assert got.created_ms == UID.created_ms


def test_expiry_is_rebased_from_remaining_ms_on_the_receivers_clock() -> None:
    sent = Message(b"x", uid=UID, remaining_expiry_ms=60_000)
    assert roundtrip(sent, now=1_000_000).expiry == Int64(1_060_000)
    assert roundtrip(sent, now=1_000_000, transit=10_000).expiry == Int64(1_050_000)
    assert roundtrip(Message(b"x", uid=UID), now=1_000_000).expiry is None


def test_transit_counts_only_delay_beyond_the_handshake_latency() -> None:
    assert wm.transit_ms(sender_now_ms=1_000, receiver_now_ms=1_250, offset_ms=250) == 0
    assert wm.transit_ms(sender_now_ms=1_000, receiver_now_ms=61_250, offset_ms=250) == 60_000
    assert wm.transit_ms(sender_now_ms=1_000, receiver_now_ms=2_000, offset_ms=None) == 0


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        (b"", "malformed"),
        (cbor2.dumps({"v": 1, "type": "put"})[:-2], "malformed"),
        (cbor2.dumps({"v": 1}) + b"\x00", "malformed"),
        (cbor2.dumps([1, 2]), "malformed"),
        (b"\x81" * 10_000, "malformed"),  # nesting bomb
        (b"\x9b\xff\xff\xff\xff\xff\xff\xff\xff", "malformed"),  # huge declared length
        (cbor2.dumps({"type": "put"}), "unsupported-version"),
        (cbor2.dumps({"v": 99, "type": "put"}), "unsupported-version"),
    ],
)
def test_bad_bodies_are_refused_with_a_code(raw: bytes, code: str) -> None:
    with pytest.raises(p.ProtocolError) as info:
        p.decode_body(raw)
    assert info.value.code == code


@pytest.mark.parametrize(
    "message",
    [
        {"d": b"x"},
        {"u": "DEV1.1", "d": "text, not bytes"},
        {"u": "DEV1.1", "d": b"x", "p": 10},
        {"u": "DEV1.1", "d": b"x", "x": 0},
        {"u": "DEV1.1", "d": b"x", "f": {"n": ["q", 1]}},
        {"u": "DEV1.1", "d": b"x", "f": {"n": ["i", 2**40]}},
        {"u": "DEV1.1", "d": b"x", "f": {"n": ["s", b"bytes"]}},
        {"u": "DEV1.1", "d": b"x", "r": "yes"},
        {"u": "no dot", "d": b"x"},
        "not a map",
    ],
)
def test_schema_errors_name_the_problem(message: object) -> None:
    with pytest.raises(p.ProtocolError) as info:
        wire = wm.decode_messages({"messages": [message]}, "messages", max_len=10)
        wire[0].to_message(1_000)
    assert info.value.code == "invalid" and info.value.http_status == 422


def test_a_uid_twice_in_one_request_is_invalid() -> None:
    one = {"u": "DEV1.1", "d": b"x"}
    with pytest.raises(p.ProtocolError, match="twice"):
        wm.decode_messages({"messages": [one, one]}, "messages", max_len=10)


def test_too_many_messages_is_invalid() -> None:
    with pytest.raises(p.ProtocolError, match="at most 2"):
        wm.decode_messages({"messages": [{}, {}, {}]}, "messages", max_len=2)


def test_error_bodies_carry_version_code_and_detail() -> None:
    body = p.decode_body(p.error_body("too-large", "too big"))
    assert body == {"v": 1, "type": "error", "code": "too-large", "detail": "too big", "supported": [1]}


def test_edgeq_and_its_cli_import_no_network_stack() -> None:
    import subprocess
    import sys

    code = (
        "import sys, edgeq, edgeq.cli, edgeq.sync, edgeq.sync.protocol; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'starlette', 'uvicorn', 'httpx'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_examples_the_docstrings_no_longer_carry() -> None:
    """What the cut doctests of edgeq.sync.protocol, .messages, .expiryreports, .framing, .signing showed."""
    assert p.decode_body(b"\xa1\x61v\x01") == {"v": 1}
    assert p.device_queue_name("DEV1", "INBOX") == "DEV1.INBOX"
    assert wm.decode_fields({"n": ["i", 5]}) == {"n": Int32(5)}
    assert type(wm.decode_fields({"n": ["i", 5]})["n"]) is Int32
    assert wm.rebase_ms(10_000, server_ms=9_700, sender_now_ms=123, offset_ms=None) == 9_700
    assert wm.rebase_ms(10_000, server_ms=12_000, sender_now_ms=123, offset_ms=None) == 10_000  # step back
    assert wm.rebase_ms(10_000, server_ms=None, sender_now_ms=9_500, offset_ms=200) == 9_700  # legacy
    w = wm.WireMessage(MessageUID("HOME", 7), b"x", {}, None, 60_000, None)
    assert w.to_message(1_000_000, 250).expiry == Int64(1_059_750)
    entry = JournalEntry(7, "expired", "device", 1_000, "ORDERS", "DEV1.5", "DEV1", check_point="get")
    assert encode_expiries([entry]) == [
        {"u": "DEV1.5", "q": "ORDERS", "t": 1000, "w": "get", "n": None, "c": None, "a": None}
    ]
    items = decode_expiry_items({"e": [{"u": "DEV1.5", "q": "ORDERS", "t": 9, "w": "get"},
                                       {"u": "DEV1.6", "q": "ORDERS", "w": "get"}]}, "e", max_len=10)
    assert [(i.uid, i.entry is not None, i.why) for i in items] == [
        ("DEV1.5", True, None), ("DEV1.6", False, "'t' must be an integer, not NoneType")
    ]
    assert negotiate(["br", "zlib"], ("zstd", "zlib")) == ["zlib"]
    signed = canonical("post", "/v1/hello", "DEV1", 5, "n0nce-n0nce-n0nce", b"").decode().splitlines()
    assert signed[:6] == ["edgeq-sig-v1", "POST", "/v1/hello", "DEV1", "5", "n0nce-n0nce-n0nce"]


def test_uids_of_one_origin_are_parsed_alike_and_each_bad_one_still_refused() -> None:
    texts = [f"DEV1:k3x9qam2pa.{1_763_683_200_000_000 + n}" for n in range(5)]
    texts += ["DEV2.7", "DEV1:k3x9qam2pa.9"]
    assert p.parse_uids(texts) == [MessageUID.parse(t) for t in texts]
    checked = "DEV1:k3x9qam2pa.1"  # its origin checked first: the others below take the quick path
    for bad in ("DEV1:k3x9qam2pa.0", "DEV1:k3x9qam2pa.x1", "DEV1:k3x9qam2pa.\u0661\u0662",
                f"DEV1:k3x9qam2pa.{2**63}", "DEV1:k3x9qam2pa.", "bad name!.1", 7, "D" * 86 + ".1"):
        with pytest.raises(p.ProtocolError) as info:
            p.parse_uids([checked, bad])
        assert info.value.code == "invalid"


@pytest.mark.parametrize("extra", [{}, {"fields": {"n": Int32(3)}}, {"correlation_id": b"c"},
                                   {"reply_to": "REPLIES"}])
def test_a_put_message_is_the_message_its_constructor_makes(extra: dict[str, object]) -> None:
    sent = Message(b"x", uid=UID, priority=3, remaining_expiry_ms=60_000, expiry_report="with-data",
                   **extra)  # type: ignore[arg-type]
    got = roundtrip(sent, now=1_000_000)
    made = Message(b"x", uid=UID, priority=3, expiry=Int64(1_060_000), expiry_report="with-data",
                   resend=True, **extra)  # type: ignore[arg-type]
    assert got == made and repr(got) == repr(made)
    assert (got.created_ms, got.backout_count, got.remaining_expiry_ms) == (UID.created_ms, 0, None)
    assert type(got.fields) is type(made.fields) and dict(got.fields) == dict(made.fields)

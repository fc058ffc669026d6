"""Admin requests and replies on the wire: the schema, canonical signed bytes, Ed25519
signatures, and the bounded, field-by-field decoding of what a device receives."""

from __future__ import annotations

import dataclasses
from typing import Any

import cbor2
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from edgeq import Int64
from edgeq.admin.wire import (
    ACTIONS,
    ADMIN_REPLY_QUEUE,
    MAX_REPLY_BYTES,
    MAX_REQUEST_BYTES,
    AdminReply,
    AdminRequest,
    as_python,
    check_key_id,
    overall_rc,
    raw_public_key,
    reply_message,
    request_message,
)
from edgeq.errors import AdminError, EdgeqError, InvalidArgument, InvalidType
from edgeq.uid import MessageUID

T0 = 1_763_683_200_000
KEY = Ed25519PrivateKey.generate()


def make(**changes: Any) -> AdminRequest:
    base = AdminRequest(
        "0123456789abcdef0123456789abcdef", "define-queue", "ORDERS",
        {"kind": "local", "expiry_ms": 60_000, "rules": [["dead-letter", {"queue": "DLQ"}]]},
        "DEV1", "HOME", ADMIN_REPLY_QUEUE, T0, T0 + 60_000, "ops",
    )
    return dataclasses.replace(base, **changes)


def body(request: AdminRequest) -> dict[str, Any]:
    decoded: dict[str, Any] = cbor2.loads(request.to_bytes())
    return decoded


def encode(fields: dict[str, Any]) -> bytes:
    return cbor2.dumps(fields, canonical=True)


# -- round trips and signatures -------------------------------------------------------------


def test_a_signed_request_survives_the_wire_and_verifies_with_its_key_only() -> None:
    request = make().sign(KEY)
    again = AdminRequest.from_bytes(request.to_bytes())
    assert again == request
    assert (as_python(again.params)
            == {"kind": "local", "expiry_ms": 60_000, "rules": [["dead-letter", {"queue": "DLQ"}]]})
    assert again.verify(KEY.public_key())
    assert again.verify(raw_public_key(KEY.public_key()))
    assert not again.verify(Ed25519PrivateKey.generate().public_key())
    assert not make().verify(KEY.public_key())  # unsigned


def test_the_signed_bytes_are_canonical_whatever_order_params_were_given_in() -> None:
    one = make(params={"a": 1, "b": {"y": 2, "x": 3}})
    two = make(params={"b": {"x": 3, "y": 2}, "a": 1})
    assert one.signed_bytes() == two.signed_bytes()
    assert two.sign(KEY).signature == one.sign(KEY).signature  # Ed25519 is deterministic


@pytest.mark.parametrize("change", [
    {"request_id": "ffffffffffffffffffffffffffffffff"}, {"action": "delete-queue"}, {"target": "OTHER"},
    {"target": None}, {"params": {"kind": "local", "expiry_ms": 1}}, {"device": "DEV2"},
    {"reply_qmgr": "EVIL"}, {"reply_queue": "APP.QUEUE"}, {"created_ms": T0 + 1}, {"expires_ms": None},
    {"expires_ms": T0 + 60_001}, {"key_id": "other"},
])
def test_changing_any_signed_field_breaks_the_signature(change: dict[str, Any]) -> None:
    signed = make().sign(KEY)
    changed = dataclasses.replace(signed, **change)
    assert changed.signature == signed.signature
    assert not AdminRequest.from_bytes(changed.to_bytes()).verify(KEY.public_key())


def test_every_flipped_bit_is_refused_or_fails_the_signature() -> None:
    """No single bit flip of a signed request yields a request that verifies, and decoding
    one never raises anything but AdminError."""
    raw = make(params={"expiry_ms": 5}).sign(KEY).to_bytes()
    for index in range(len(raw)):
        for bit in (0, 3, 7):
            flipped = bytearray(raw)
            flipped[index] ^= 1 << bit
            try:
                request = AdminRequest.from_bytes(bytes(flipped))
            except AdminError:
                continue
            assert not request.verify(KEY.public_key()), (index, bit)


def test_create_makes_a_fresh_id_and_the_default_reply_queue() -> None:
    one = AdminRequest.create("inquire-all", device="DEV1", reply_qmgr="HOME", created_ms=T0, key_id="ops")
    two = AdminRequest.create("inquire-all", device="DEV1", reply_qmgr="HOME", created_ms=T0, key_id="ops")
    assert one.request_id != two.request_id and len(one.request_id) == 32
    assert ((one.reply_queue, one.target, dict(one.params), one.expires_ms)
            == (ADMIN_REPLY_QUEUE, None, {}, None))


def test_params_are_frozen() -> None:
    request = make()
    with pytest.raises(TypeError):
        request.params["expiry_ms"] = 1  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.action = "purge"  # type: ignore[misc]


def test_sign_needs_an_ed25519_private_key() -> None:
    with pytest.raises(InvalidType, match="Ed25519PrivateKey"):
        make().sign(X25519PrivateKey.generate())  # type: ignore[arg-type]


# -- what a device refuses to decode ----------------------------------------------------------


def test_an_unknown_schema_version_is_refused_saying_which() -> None:
    fields = body(make())
    fields["v"] = 2
    with pytest.raises(AdminError, match="schema version 2: this edgeq understands version 1"):
        AdminRequest.from_bytes(encode(fields))


@pytest.mark.parametrize(("raw", "match"), [
    (b"", "malformed admin request"),
    (b"\xff\x00", "malformed admin request"),
    (cbor2.dumps([1, 2]), "a CBOR map is expected"),
    (b"\xa1\x61v\xd8\x1e\x82\x01\x03", "tag 30"),  # {"v": 1/3}: a rational, refused before it is built
    (b"\x81" * 20 + b"\x01", "nesting depth|deeper"),
    (bytes(MAX_REQUEST_BYTES + 1), "more than the 65536 allowed"),
    (cbor2.dumps({"v": 1}) + b"\x00", "trailing"),
])
def test_malformed_bytes_are_refused_within_bounds(raw: bytes, match: str) -> None:
    with pytest.raises(AdminError, match=match):
        AdminRequest.from_bytes(raw)


def test_a_reply_never_passes_for_a_request_nor_a_request_for_a_reply() -> None:
    reply = AdminReply("0123456789abcdef", "DEV1", "success", (), "ok", T0)
    with pytest.raises(AdminError, match=r"missing field|its type is 'admin-reply'"):
        AdminRequest.from_bytes(reply.to_bytes())
    with pytest.raises(AdminError, match="its type is 'admin-request'"):
        AdminReply.from_bytes(make().to_bytes())


@pytest.mark.parametrize(("field", "value", "match"), [
    ("id", 7, "id must be text"),
    ("id", "not-hex-at-all!!", "request_id"),
    ("id", "abc", "request_id"),
    ("action", "reboot", "unknown admin action 'reboot'"),
    ("target", 5, "target must be text"),
    ("target", "bad name!", "target queue name"),
    ("params", [1, 2], "params must be a map"),
    ("params", {"x": 1.5}, "params\\['x'\\] is a float"),
    ("params", {"x": -(2**64)}, "at most 64 bits"),
    ("params", {"": 1}, "keys are text"),
    ("params", {"x": "y" * 5000}, "longer than 4096"),
    ("params", {"a": {"b": {"c": {"d": {"e": {"f": {"g": 1}}}}}}}, "nests too deep|deeper"),
    ("device", "DEV 1", "device"),
    ("reply_qmgr", None, "reply_qmgr must be text"),
    ("reply_queue", "", "reply queue name"),
    ("created_ms", "yesterday", "created_ms must be an int"),
    ("created_ms", True, "created_ms must be an int"),
    ("created_ms", -1, "out of range"),
    ("expires_ms", 0, "out of range"),
    ("key_id", "ops key", "admin key id"),
    ("sig", "c2ln", "sig must be bytes"),
    ("sig", b"\x00" * 63, "64 bytes"),
])
def test_every_field_is_checked(field: str, value: object, match: str) -> None:
    fields = body(make().sign(KEY))
    fields[field] = value
    with pytest.raises(AdminError, match=match) as caught:
        AdminRequest.from_bytes(encode(fields))
    assert str(caught.value).startswith("malformed admin request")


def test_unknown_and_missing_fields_are_refused() -> None:
    extra = {**body(make()), "priority": 9}
    with pytest.raises(AdminError, match="unknown field"):
        AdminRequest.from_bytes(encode(extra))
    missing = body(make())
    del missing["expires_ms"]
    with pytest.raises(AdminError, match="missing field\\(s\\) expires_ms"):
        AdminRequest.from_bytes(encode(missing))


def test_building_a_bad_request_is_the_callers_mistake() -> None:
    with pytest.raises(InvalidArgument, match="unknown admin action"):
        make(action="reboot")
    with pytest.raises(InvalidArgument, match="request_id"):
        make(request_id="XYZ")
    with pytest.raises(InvalidArgument, match="more than the 65536"):
        make(params={f"k{i}": "x" * 4000 for i in range(20)}).to_bytes()
    assert ACTIONS == ("inquire-queue", "inquire-all", "define-queue", "alter-queue", "delete-queue", "purge",
                       "sweep", "inquire-rules", "retry-rules", "inquire-sync")


# -- replies ------------------------------------------------------------------------------------


def test_a_reply_round_trips_with_its_items() -> None:
    reply = AdminReply("0123456789abcdef", "DEV1", "mixed", (
        {"object": "A", "rc": "success", "reason": None, "depth": 3, "ratio": 0.5,
         "attributes": {"kind": "local"}},
        {"object": "B", "rc": "failed", "reason": "no queue 'B'"},
    ), "inquire-all: 1 of 2 failed", T0)
    again = AdminReply.from_bytes(reply.to_bytes())
    assert again == reply and not again.ok
    assert again.results[1]["reason"] == "no queue 'B'"
    assert as_python(again.results[0]["attributes"]) == {"kind": "local"}


@pytest.mark.parametrize(("change", "match"), [
    ({"rc": "maybe"}, "rc must be"),
    ({"results": ({"object": "A", "rc": "ok"},)}, "rc must be 'success' or 'failed'"),
    ({"results": ({"object": 5, "rc": "success"},)}, "object must be text or null"),
    ({"results": "abc"}, "sequence of maps"),
    ({"request_id": "nothex"}, "not a request id"),
    ({"device": "a b"}, "device"),
    ({"executed_ms": None}, "executed_ms"),
])
def test_a_bad_reply_is_refused(change: dict[str, Any], match: str) -> None:
    fields: dict[str, Any] = {"request_id": "", "device": "DEV1", "rc": "success", "results": (),
                              "message": "",
                              "executed_ms": T0}
    with pytest.raises(EdgeqError, match=match):
        AdminReply(**{**fields, **change})


def test_a_reply_too_large_to_send_is_refused_when_encoded() -> None:
    items = tuple({"object": f"Q{i}", "rc": "success", "reason": None, "pad": "x" * 4000} for i in range(300))
    with pytest.raises(AdminError, match=f"more than the {MAX_REPLY_BYTES}"):
        AdminReply("", "DEV1", "success", items, "", T0).to_bytes()


def test_overall_rc_is_mqe_success_fail_mixed() -> None:
    ok, bad = {"rc": "success"}, {"rc": "failed"}
    assert [overall_rc(x) for x in ([], [ok], [ok, ok], [bad], [bad, bad], [ok, bad])] == [
        "success", "success", "success", "failed", "failed", "mixed"]


# -- as messages, keys ------------------------------------------------------------------------


def test_request_and_reply_messages_carry_the_id_and_the_expiry() -> None:
    request = make().sign(KEY)
    message = request_message(request)
    assert message.correlation_id == bytes.fromhex(request.request_id)
    assert message.expiry == Int64(T0 + 60_000)
    assert AdminRequest.from_bytes(message.data) == request
    assert request_message(make(expires_ms=None)).expiry is None
    reply = AdminReply(request.request_id, "DEV1", "success", (), "ok", T0)
    sent = reply_message(reply, MessageUID("DEV1:abc", 42))
    assert ((sent.correlation_id, sent.uid, sent.created_ms)
            == (message.correlation_id, MessageUID("DEV1:abc", 42), T0))
    assert AdminReply.from_bytes(sent.data) == reply
    assert reply_message(AdminReply("", "DEV1", "failed", (), "x", T0)).correlation_id is None


def test_public_keys_are_taken_raw_as_pem_or_as_objects_and_nothing_else() -> None:
    public = KEY.public_key()
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    pem = public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    assert (raw_public_key(pem) == raw_public_key(pem.decode()) == raw_public_key(public)
            == raw_public_key(raw) == raw)
    other = X25519PrivateKey.generate().public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    with pytest.raises(InvalidArgument, match="not an Ed25519 public key"):
        raw_public_key(other)
    with pytest.raises(InvalidArgument, match="not an Ed25519 public key"):
        raw_public_key(b"hello")
    with pytest.raises(InvalidType):
        raw_public_key(42)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["", "a b", "x" * 65, "ops/1"])
def test_key_ids_are_checked(bad: str) -> None:
    with pytest.raises(InvalidArgument, match="admin key id"):
        check_key_id(bad)
    assert check_key_id("ops-alice@home.1") == "ops-alice@home.1"


def test_a_replys_rc_is_mixed_when_some_items_failed_and_success_when_none_did() -> None:
    assert overall_rc([{"rc": "success"}, {"rc": "failed"}]) == "mixed"
    assert overall_rc([{"rc": "failed"}, {"rc": "failed"}]) == "failed"
    assert overall_rc([]) == "success"

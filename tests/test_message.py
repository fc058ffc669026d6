"""Messages, typed integers and uids."""

from __future__ import annotations

import pickle
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edgeq import Int32, Int64, Message, MessageUID
from edgeq.encoding.fields import decode_fields, encode_fields
from edgeq.errors import EdgeqError, InvalidArgument, InvalidType
from edgeq.expiry import absolute_ms, check_expiry, own_deadline, relative_ms
from edgeq.message import check_fields
from edgeq.names import check_name, check_origin, origin_qmgr
from edgeq.uid import new_incarnation


def test_typed_ints_refuse_out_of_range() -> None:
    assert Int32(2**31 - 1) == 2**31 - 1
    with pytest.raises(InvalidArgument, match="out of range"):
        Int32(2**31)
    with pytest.raises(InvalidArgument):
        Int64(2**63)
    with pytest.raises(InvalidType):
        Int32(True)
    with pytest.raises(InvalidType):
        Int64(1.0)  # type: ignore[arg-type]
    assert repr(Int64(5)) == "Int64(5)" and pickle.loads(pickle.dumps(Int32(7))) == Int32(7)


def test_message_validation() -> None:
    with pytest.raises(InvalidType, match="encode it first"):
        Message("text")  # type: ignore[arg-type]
    with pytest.raises(InvalidType, match="field 'k'"):
        Message(b"x", fields={"k": [1, 2]})  # type: ignore[dict-item]
    with pytest.raises(InvalidArgument, match="field name"):
        Message(b"x", fields={"": "v"})
    with pytest.raises(InvalidArgument, match="0 \\(lowest\\) to 9"):
        Message(b"x", priority=10)
    with pytest.raises(InvalidArgument, match="reply_to"):
        Message(b"x", reply_to="bad name")
    with pytest.raises(InvalidType):
        Message(b"x", correlation_id="abc")  # type: ignore[arg-type]
    assert issubclass(InvalidType, EdgeqError)


def test_message_is_immutable_and_fields_normalised() -> None:
    m = Message(bytearray(b"x"), fields={"n": 3, "b": bytearray(b"q")})
    assert m.data == b"x" and m.fields == {"n": Int64(3), "b": b"q"}
    assert isinstance(m.fields["n"], Int64)
    with pytest.raises(AttributeError):
        m.priority = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        m.fields["n"] = 4  # type: ignore[index]
    assert m.replace(priority=2).priority == 2 and m.priority is None
    assert pickle.loads(pickle.dumps(m)) == m


def test_uid_string_form_round_trips() -> None:
    uid = MessageUID("HOME.SRV-1", 1_763_683_200_000_123)
    assert str(uid) == "HOME.SRV-1.1763683200000123"
    assert MessageUID.parse(str(uid)) == uid
    assert uid.created_ms == 1_763_683_200_000
    for bad in ["DEV1", "DEV1.", ".123", "DEV1.12a", "DEV1.-5"]:
        with pytest.raises(EdgeqError):
            MessageUID.parse(bad)


field_values = st.one_of(
    st.text(max_size=20),
    st.binary(max_size=20),
    st.booleans(),
    st.floats(allow_nan=False),
    st.integers(-(2**31), 2**31 - 1).map(Int32),
    st.integers(-(2**63), 2**63 - 1).map(Int64),
)


@given(st.dictionaries(st.text(min_size=1, max_size=10), field_values, max_size=8))
def test_field_codec_round_trips_with_types(fields: dict[str, object]) -> None:
    decoded = decode_fields(encode_fields(Message(b"", fields=fields).fields))  # type: ignore[arg-type]
    assert decoded == fields
    assert [type(v) for v in decoded.values()] == [type(v) for v in fields.values()]


def test_the_examples_the_docstrings_no_longer_carry() -> None:
    """What the cut doctests of edgeq.message, .expiry, .names, .uid and .values showed."""
    assert repr(check_fields({"n": 3, "ok": True})) == "{'n': Int64(3), 'ok': True}"
    assert Message(b"x").replace(priority=9).priority == 9
    assert repr(Message(b"x").expire_after(timedelta(seconds=30)).expiry) == "Int32(30000)"
    assert repr(Message(b"x").expire_at(1_900_000_000_000).expiry) == "Int64(1900000000000)"
    assert repr(check_expiry(Int32(60_000))) == "Int32(60000)"
    assert repr(relative_ms(timedelta(minutes=1))) == "Int32(60000)"
    assert repr(absolute_ms(datetime(2026, 1, 1, tzinfo=UTC))) == "Int64(1767225600000)"
    assert (own_deadline(Int32(500), 1_000), own_deadline(Int64(9_000), 1_000)) == (1500, 9000)
    assert check_name("ORDERS.EU", "queue name") == "ORDERS.EU"
    assert (check_origin("DEV1:k3x9qam2pa"), check_origin("HOME.SRV")) == ("DEV1:k3x9qam2pa", "HOME.SRV")
    assert (origin_qmgr("DEV1:k3x9qam2pa"), origin_qmgr("HOME.SRV")) == ("DEV1", "HOME.SRV")
    token = new_incarnation()
    assert (len(token), token.isalnum()) == (10, True)
    assert repr(MessageUID.parse("HOME.SRV.42")) == "MessageUID(origin='HOME.SRV', stamp=42)"
    assert (repr(Int32(60_000)), repr(Int64(1_763_683_200_000))) == ("Int32(60000)", "Int64(1763683200000)")

"""edgeq.store.records: rows as Python values."""

from __future__ import annotations

from edgeq.store.records import MessageRow, stored_size


def _row(data: object, fields: object) -> MessageRow:
    return MessageRow(id=1, origin="DEV1:x", stamp=5, state=0, confirm_id=None, priority=4, created_ms=5,
                      arrived_ms=5, expiry_kind=0, expiry_value=None, cap_at=None, deadline=None,
                      backout_count=0, correlation_id=None, reply_to=None, report=None,
                      fields=fields, data=data)  # type: ignore[arg-type]  # as SQLite may hand back a damaged row


def test_the_size_of_a_row_is_its_data_and_fields_as_stored() -> None:
    assert stored_size(_row(b"abcd", b"xy")) == 6 and stored_size(_row(b"abcd", None)) == 4


def test_a_damaged_row_whose_values_changed_type_still_has_a_size() -> None:
    # A flipped byte in the file can turn a column's serial type to NULL or an integer:
    # quarantining such a row must not fail on its size (found by tests/check/test_corruption.py).
    assert stored_size(_row(None, b"xy")) == 2
    assert stored_size(_row(b"abcd", 17)) == 4

"""edgeq.cli.admin.views: how ``edgeq admin`` shows a reply's items and its listings."""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

from edgeq.admin.wire import AdminReply
from edgeq.cli.admin.views import (
    format_fanout,
    format_items,
    format_pending,
    format_record,
    format_replies,
    value_text,
)
from edgeq.sync.server.admin.records import AdminRecord
from tests.conftest import T0

RID = "ab" * 16


def replied(
    reply: AdminReply, device: str = "DEV1", action: str = "inquire-queue", target: str | None = "Q"
) -> AdminRecord:
    return AdminRecord(RID, device, action, target, T0, None, T0 + 5, reply.rc, reply, b"")


def test_values_in_cells() -> None:
    assert [value_text(v) for v in (None, True, False, 7, "x", b"\x01\xff", ("a", 1))] == [
        "-", "yes", "no", "7", "x", "01ff", '["a", 1]']
    assert value_text(MappingProxyType({"k": (b"\x00",)})) == '{"k": ["00"]}'


def test_items_as_a_table_the_usual_columns_first() -> None:
    items = [{"object": "B", "rc": "success", "reason": None, "zeta": 1, "bytes": 9, "depth": 3,
              "kind": "local"},
             {"object": "A", "rc": "failed", "reason": "gone"}]
    assert format_items(items).splitlines() == [
        "OBJECT  RC       KIND   DEPTH  BYTES  ZETA  REASON",
        "B       success  local  3      9      1     -",
        "A       failed   -      -      -      -     gone",
    ]
    assert format_items([]) == "(nothing to show)"


def test_one_item_with_nested_values_reads_as_lines() -> None:
    item = {"object": "Q", "rc": "success", "reason": None, "depth": 2,
            "attributes": MappingProxyType({"ordering": "fifo", "expiry_ms": None})}
    assert format_items([item]).splitlines() == [
        "object: Q", "rc: success", "depth: 2", "attributes:", "  expiry_ms: -", "  ordering: fifo"]


def test_records_listings_and_fan_out() -> None:
    reply = AdminReply(RID, "DEV1", "failed", ({"object": "Q", "rc": "failed", "reason": "no queue 'Q'"},),
                       "inquire-queue Q: no queue 'Q'", T0)
    record = replied(reply)
    assert format_record(record, T0).splitlines() == [
        f"DEV1 inquire-queue Q: replied: failed (request {RID}): inquire-queue Q: no queue 'Q'",
        "OBJECT  RC      REASON", "Q       failed  no queue 'Q'"]
    waiting = AdminRecord(RID, "DEV2", "inquire-all", None, T0, T0 + 1, None, None, None, b"")
    assert format_fanout([record, waiting], T0).splitlines() == [
        "DEVICE  STATUS   MESSAGE",
        "DEV1    failed   inquire-queue Q: no queue 'Q'",
        f"DEV2    pending  no reply yet (request {RID})"]
    assert format_fanout([waiting], T0 + 1).splitlines()[1] == (
        f"DEV2    expired before delivery: never executed  request {RID}")
    assert format_pending([waiting], T0 + 1).splitlines()[1].split()[-5:] == [
        "expired", "before", "delivery:", "never", "executed"]
    handed = dataclasses.replace(waiting, delivered_ms=T0)  # a pull handed it over: it may have run
    assert format_pending([handed], T0 + 1).splitlines()[1].endswith(
        "outcome unknown until the device answers")
    assert format_replies([record]).splitlines()[1].split()[:5] == [RID, "DEV1", "inquire-queue", "Q",
                                                                    "2025-11-21T00:00:00.005Z"]
    assert format_pending([], T0) == "No admin request is waiting for a reply."
    assert format_replies([]) == "No admin reply yet."

"""Queue definition, attributes, limits and argument validation."""

from __future__ import annotations

import pytest

from edgeq import Message, QueueManager
from edgeq.errors import (
    InvalidArgument,
    InvalidType,
    MessageTooLarge,
    QueueExists,
    QueueFull,
    QueueNotFound,
)


def test_define_show_list_alter(qm: QueueManager) -> None:
    qm.define_queue("B", expiry_ms=5_000, max_depth=10, default_priority=2, ordering="fifo")
    qm.define_queue("A")
    assert qm.queue_names() == ["A", "B"]
    attrs = qm.queue_attributes("B")
    assert ((attrs.expiry_ms, attrs.max_depth, attrs.default_priority, attrs.ordering)
            == (5_000, 10, 2, "fifo"))
    assert attrs.as_dict()["name"] == "B"
    new = qm.alter_queue("B", max_depth=None, ordering="priority")
    assert new.max_depth is None and new.ordering == "priority" and new.expiry_ms == 5_000


def test_define_twice_and_unknown_queue(qm: QueueManager) -> None:
    qm.define_queue("Q")
    with pytest.raises(QueueExists, match="alter_queue"):
        qm.define_queue("Q")
    with pytest.raises(QueueNotFound, match=r"define_queue\('NOPE'\).*|defined: Q"):
        qm.put("NOPE", Message(b"x"))
    with pytest.raises(QueueNotFound):
        qm.get("NOPE")
    with pytest.raises(QueueNotFound):
        qm.alter_queue("NOPE", max_depth=1)


@pytest.mark.parametrize(
    ("kwargs", "error", "text"),
    [
        ({"expiry_ms": 0}, InvalidArgument, "expiry_ms must be a positive"),
        ({"expiry_ms": -1}, InvalidArgument, "positive"),
        ({"max_depth": "10"}, InvalidType, "max_depth"),
        ({"max_message_bytes": True}, InvalidType, "max_message_bytes"),
        ({"default_priority": 10}, InvalidArgument, "0 \\(lowest\\) to 9"),
        ({"ordering": "lifo"}, InvalidArgument, "'priority' or 'fifo'"),
    ],
)
def test_bad_attributes_are_refused(
    qm: QueueManager, kwargs: dict[str, object], error: type, text: str
) -> None:
    with pytest.raises(error, match=text):
        qm.define_queue("Q", **kwargs)  # type: ignore[arg-type]
    assert qm.queue_names() == []


def test_alter_rejects_unknown_or_no_attributes(qm: QueueManager) -> None:
    qm.define_queue("Q")
    with pytest.raises(InvalidArgument, match="unknown queue attribute 'colour'"):
        qm.alter_queue("Q", colour="blue")
    with pytest.raises(InvalidArgument, match="at least one"):
        qm.alter_queue("Q")


def test_bad_queue_names(qm: QueueManager) -> None:
    for bad in ["", "x" * 49, "has space", "ü"]:
        with pytest.raises(InvalidArgument, match="not valid"):
            qm.define_queue(bad)


def test_max_depth_counts_locked_messages(qm: QueueManager) -> None:
    qm.define_queue("Q", max_depth=2)
    qm.put("Q", Message(b"1"), confirm_id=1)
    qm.put("Q", Message(b"2"))
    with pytest.raises(QueueFull, match="max_depth"):
        qm.put("Q", Message(b"3"))
    assert qm.get("Q") is not None
    qm.put("Q", Message(b"3"))


def test_max_message_bytes_counts_data_and_fields(qm: QueueManager) -> None:
    qm.define_queue("Q", max_message_bytes=10)
    qm.put("Q", Message(b"0123456789"))
    with pytest.raises(MessageTooLarge, match="11 bytes"):
        qm.put("Q", Message(b"0123456789x"))
    with pytest.raises(MessageTooLarge):
        qm.put("Q", Message(b"01234", fields={"k": "vvvvv"}))
    assert qm.depth("Q") == 1


def test_altering_ordering_reorders_existing_messages(qm: QueueManager) -> None:
    qm.define_queue("Q", ordering="fifo")
    qm.put("Q", Message(b"low", priority=0))
    qm.put("Q", Message(b"high", priority=9))
    assert [m.data for m in qm.browse("Q")] == [b"low", b"high"]
    qm.alter_queue("Q", ordering="priority")
    assert [m.data for m in qm.browse("Q")] == [b"high", b"low"]


def test_purge_and_delete_message(qm: QueueManager, rule: object) -> None:
    from tests.conftest import Recorder

    assert isinstance(rule, Recorder)
    qm.define_queue("Q")
    qm.add_rule("Q", rule)
    uids = qm.put_many("Q", [Message(b"%d" % i) for i in range(4)])
    qm.delete_message("Q", str(uids[0]))
    assert qm.purge("Q") == 3
    assert rule.removed() == [(b"0", "deleted"), (b"1", "purged"), (b"2", "purged"), (b"3", "purged")]
    from edgeq.errors import MessageNotFound

    with pytest.raises(MessageNotFound):
        qm.delete_message("Q", uids[0])


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda qm: qm.put("Q", b"raw bytes"), InvalidType),
        (lambda qm: qm.put("Q", Message(b"x"), confirm_id=0), InvalidArgument),
        (lambda qm: qm.put("Q", Message(b"x"), confirm_id="7"), InvalidType),
        (lambda qm: qm.get_many("Q", 0), InvalidArgument),
        (lambda qm: qm.browse("Q", limit=-1), InvalidArgument),
        (lambda qm: qm.browse("Q", filter={"k": object()}), InvalidType),
        (lambda qm: qm.confirm_get("Q", "not-a-uid"), InvalidArgument),
        (lambda qm: qm.confirm_put("Q", 12), InvalidType),
        (lambda qm: qm.undo("Q", None), InvalidType),
        (lambda qm: qm.put_many("Q", Message(b"x")), InvalidType),
        (lambda qm: qm.start_expiry_sweeper(0), InvalidArgument),
    ],
)
def test_public_calls_validate_arguments(qm: QueueManager, call: object, error: type) -> None:
    qm.define_queue("Q")
    qm.put("Q", Message(b"keep"))
    with pytest.raises(error):
        call(qm)  # type: ignore[operator]
    assert [m.data for m in qm.browse("Q")] == [b"keep"]


def test_get_with_filter(qm: QueueManager) -> None:
    qm.define_queue("Q")
    qm.put("Q", Message(b"a", fields={"kind": "x", "n": 1}))
    qm.put("Q", Message(b"b", fields={"kind": "y", "flag": True}))
    got = qm.get("Q", filter={"kind": "y"})
    assert got is not None and got.data == b"b"
    assert qm.get("Q", filter={"flag": 1}) is None  # a bool field never equals an int
    assert [m.data for m in qm.browse("Q", filter={"n": 1})] == [b"a"]

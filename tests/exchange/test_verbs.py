"""qm.exchange's verbs, one example each (as docs/api.md shows them): what its doctests checked."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from edgeq import Message, MessageUID, QueueManager
from edgeq.errors import InvalidArgument
from edgeq.store.journal import JournalEntry
from edgeq.store.opening import connect
from edgeq.sync.server.backlog import reported_backlogs


@pytest.fixture
def dev(tmp_path: Path) -> Iterator[QueueManager]:
    with QueueManager(tmp_path / "d.db", name="DEV1") as qm:
        yield qm


@pytest.fixture
def home(tmp_path: Path) -> Iterator[QueueManager]:
    with QueueManager(tmp_path / "h.db", name="HOME", journal="server") as qm:
        yield qm


def test_settled_below_moves_past_a_transmitted_uid(dev: QueueManager) -> None:
    dev.define_remote_queue("ORDERS", target_qmgr="HOME")
    uid = dev.put("ORDERS", Message(b"x"))
    assert dev.exchange.settled_below() == uid.stamp
    dev.exchange.transmitted("ORDERS", [uid])
    assert dev.exchange.settled_below() == uid.stamp + 1


def test_settle_forgets_the_remembered_uids_below_the_mark(home: QueueManager) -> None:
    home.define_queue("Q")
    uid = MessageUID("DEV1:abc", 5)
    home.put("Q", Message(b"x", uid=uid), confirm_id=1)
    home.confirm_put("Q", uid)
    x = home.exchange
    assert x.remembered_count("DEV1:abc") == 1
    assert (x.settle("DEV1:abc", 6), x.remembered_count("DEV1:abc")) == (1, 0)


def test_held_low_water_is_the_lowest_stamp_per_origin(home: QueueManager) -> None:
    home.define_queue("Q")
    home.put_many("Q", [Message(b"a", uid=MessageUID("X", 9)), Message(b"b", uid=MessageUID("X", 7))])
    assert home.exchange.held_low_water("Q") == {"X": 7}


def test_check_restored_takes_a_new_incarnation_only_when_behind(dev: QueueManager) -> None:
    old = dev.origin
    last = dev.exchange.settled_below() - 1
    assert dev.exchange.check_restored("HOME", settled=last + 1, seen=last) is None  # what it sent
    found = dev.exchange.check_restored("HOME", settled=last + 9, seen=last + 8)  # never issued
    assert found is not None
    assert (found.old_origin, found.new_origin) == (old, dev.origin) != (old, old)


def test_refused_counts_a_refusal(dev: QueueManager) -> None:
    dev.define_remote_queue("ORDERS", target_qmgr="HOME")
    uid = dev.put("ORDERS", Message(b"x"))
    assert [(r.count, r.dead_lettered) for r in dev.exchange.refused("ORDERS", [(uid, "no-queue")])] == [
        (1, False)]


def test_remote_expiries_each_refuses_a_foreign_entry(home: QueueManager) -> None:
    own = JournalEntry(0, "expired", "device", 5, "ORDERS", "DEV1.42", "DEV1", check_point="get")
    pulled = JournalEntry(0, "expired", "device", 5, "DEV1.INBOX", "HOME.7", "HOME", check_point="get")
    foreign = JournalEntry(0, "expired", "device", 5, "ORDERS", "DEV2.9", "DEV2", check_point="get")
    results = home.exchange.journal_remote_expiries_each("DEV1", [own, pulled, foreign, own])
    assert [r.status for r in results] == ["recorded", "recorded", "refused", "already"]


def test_a_registered_device_turns_authentication_on(home: QueueManager) -> None:
    home.exchange.record_device("DEV1")
    assert not home.exchange.has_registered_device()
    home.register_device("DEV1", bytes(32))
    assert home.exchange.has_registered_device()


def test_device_refusals_are_counted_per_reason(home: QueueManager) -> None:
    why = "no-queue: no queue 'METRICS'"
    home.exchange.record_refusals("DEV1", "METRICS", {"no-queue": (2, why)})
    home.exchange.record_refusals("DEV1", "METRICS", {"no-queue": (1, why)})
    got = [(r.device, r.queue, r.reason, r.count) for r in home.exchange.device_refusals()]
    assert got == [("DEV1", "METRICS", "no-queue", 3)]


def test_a_devices_reported_backlog_replaces_its_last_report_per_queue(home: QueueManager) -> None:
    home.exchange.record_device("DEV1")
    home.exchange.record_backlog("DEV1", "ORDERS", 40)
    home.exchange.record_backlog("DEV1", "ORDERS", 0)
    home.exchange.record_backlog("DEV1", "METRICS", 3)
    with closing(connect(home.path, read_only=True)) as conn:
        assert reported_backlogs(conn)["DEV1"][0] == 3
    with pytest.raises(InvalidArgument, match="backlog"):
        home.exchange.record_backlog("DEV1", "ORDERS", -1)
    with pytest.raises(InvalidArgument, match="queue name"):
        home.exchange.record_backlog("DEV1", "bad name", 1)

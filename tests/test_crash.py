"""Crash safety: worker processes SIGKILLed mid-operation, several rounds on one file.

A worker reports each operation once it has returned (so once it committed);
the test kills it at a random point and then checks the store: nothing it
reported is lost or repeated, at most the one operation in flight is
ambiguous, no row is torn (every payload carries its own checksum), depth
agrees with what browse and the locked rows show, and SQLite's
``integrity_check`` passes. Locks left by a killed assured getter stay locked
until undone by confirm id, and are then delivered again.
"""

from __future__ import annotations

import contextlib
import random
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from edgeq import Message, QueueManager
from edgeq.errors import ConfirmIdNotFound, MessageNotFound
from tests.workers import Child, check_payload, make_payload, payload_key

ROUNDS = 6


@dataclass
class Store:
    """What a store holds, read back after a crash."""

    visible: list[Message]
    locked: int
    depth: int
    keys: set[str] = field(default_factory=set)


def _integrity(path: Path) -> None:
    """The file opens with plain sqlite3 (recovering the WAL) and is intact."""
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        rows = conn.execute("SELECT data, state FROM messages").fetchall()
        stored_depth = conn.execute("SELECT depth FROM queues WHERE name = 'Q'").fetchone()[0]
    finally:
        conn.close()
    torn = [bytes(data[:40]) for data, _state in rows if not check_payload(bytes(data))]
    assert not torn, f"half-written messages: {torn}"
    assert stored_depth == len(rows), "queues.depth out of step with the message rows"


def _inspect(path: Path) -> Store:
    _integrity(path)
    with QueueManager(path) as qm:
        visible = qm.browse("Q")
        depth = qm.depth("Q")
    assert all(check_payload(m.data) for m in visible)
    keys = [payload_key(m.data) for m in visible]
    assert len(set(keys)) == len(keys), "a message is stored twice"
    conn = sqlite3.connect(path)
    try:
        (locked,) = conn.execute("SELECT count(*) FROM messages WHERE state != 0").fetchone()
    finally:
        conn.close()
    assert depth == len(visible) + locked, "depth must count visible and locked messages"
    return Store(visible, locked, depth, set(keys))


def _fill(path: Path, count: int) -> set[str]:
    rng = random.Random(count)
    with QueueManager(path, name="DEV1") as qm:
        # an undone get comes back at once: crashes are tested here
        qm.define_queue("Q", redelivery_delay_ms=0)
        qm.put_many("Q",
                    [Message(make_payload("m", i, rng), priority=rng.randint(0, 9)) for i in range(count)])
    return {f"m:{i}" for i in range(count)}


def _read_until(child: Child, count: int) -> Iterator[list[str]]:
    """Yield the worker's report lines (split) until ``count`` operations or its end."""
    seen = 0
    while seen < count:
        line = child.readline()
        if line is None:
            raise AssertionError(f"worker {child.pid} ended early; stderr:\n{child.stderr}")
        if line in ("ready", "empty", "done"):
            continue
        assert line != "busy", f"worker {child.pid} hit StoreBusy"
        seen += 1
        yield line.split()


def _kill_after(child: Child, count: int) -> list[list[str]]:
    """Read ``count`` reports, SIGKILL the worker, and return everything it reported."""
    lines = list(_read_until(child, count))
    child.sigkill()
    lines += [line.split() for line in child.rest() if line not in ("ready", "empty", "done")]
    assert all(line[0] != "busy" for line in lines)
    return lines


def test_sigkill_during_puts_loses_no_committed_message(tmp_path: Path) -> None:
    path = tmp_path / "device.db"
    with QueueManager(path, name="DEV1") as qm:
        qm.define_queue("Q")
    rng = random.Random(20251121)
    reported: dict[str, str] = {}  # key -> uid
    in_flight: set[str] = set()
    for round_ in range(ROUNDS):
        tag = f"r{round_}"
        with Child("put", "--path", str(path), "--tag", tag, "--priorities", "--seed", str(round_)) as child:
            lines = _kill_after(child, rng.randint(1, 120))
        assert [line[2] for line in lines] == [f"{tag}:{i}" for i in range(len(lines))]
        reported.update({line[2]: line[1] for line in lines})
        in_flight.add(f"{tag}:{len(lines)}")  # the next put: committed or not, unknown
        store = _inspect(path)
        assert store.locked == 0
        assert set(reported) <= store.keys, f"committed puts lost: {sorted(set(reported) - store.keys)}"
        assert store.keys - set(reported) <= in_flight, "a message appeared that was never put"
    by_key = {payload_key(m.data): str(m.uid) for m in store.visible}
    assert all(by_key[key] == uid for key, uid in reported.items()), "a message came back with another uid"
    assert len(store.keys) - len(reported) <= ROUNDS


def test_sigkill_during_plain_gets_delivers_at_most_once(tmp_path: Path) -> None:
    path = tmp_path / "device.db"
    expected = _fill(path, 600)
    rng = random.Random(7)
    got: list[str] = []
    for round_ in range(ROUNDS):
        with Child("get", "--path", str(path)) as child:
            lines = _kill_after(child, rng.randint(1, 80))
        assert all(line[0] == "got" for line in lines)
        got += [line[2] for line in lines]
        assert len(set(got)) == len(got), "a message was got twice"
        store = _inspect(path)
        assert store.locked == 0
        assert not store.keys & set(got), "a got message is still on the queue"
        lost = expected - store.keys - set(got)
        # Only a get in flight at the kill may have committed unreported: one per round.
        assert len(lost) <= round_ + 1, f"messages lost: {sorted(lost)}"
    with Child("get", "--path", str(path)) as child:
        lines = [line.split() for line in child.rest()]
        assert child.wait() == 0, child.stderr
    assert lines[-2:] == [["empty"], ["done"]]
    got += [line[2] for line in lines if line[0] == "got"]
    assert len(set(got)) == len(got)
    assert len(expected - set(got)) <= ROUNDS
    assert _inspect(path).depth == 0


def test_sigkill_during_assured_gets_then_undo_redelivers(tmp_path: Path) -> None:
    path = tmp_path / "device.db"
    expected = _fill(path, 500)
    rng = random.Random(11)
    confirmed: list[str] = []  # reported, or proven by undo finding nothing
    confirmed_uids: set[str] = set()
    undone_uids: set[str] = set()
    for round_ in range(ROUNDS):
        base = 1 + round_ * 1_000_000
        with Child("get", "--path", str(path), "--assured", "--confirm-base", str(base)) as child:
            lines = _kill_after(child, rng.randint(1, 120))
        locks = {line[2]: (line[1], line[3]) for line in lines if line[0] == "locked"}  # cid -> (uid, key)
        done = {line[1] for line in lines if line[0] == "confirmed"}
        confirmed += [key for uid, key in locks.values() if uid in done]
        confirmed_uids |= done
        unconfirmed = [cid for cid, (uid, _key) in locks.items() if uid not in done]
        assert len(unconfirmed) <= 1, "a worker confirms each lock before taking the next"
        next_cid = str(max((int(c) for c in locks), default=base - 1) + 1)

        store = _inspect(path)
        assert store.locked <= 1, "a killed assured getter holds at most one lock"
        with QueueManager(path) as qm:
            # A reported lock whose confirm was in flight: either still locked, or gone.
            for cid in unconfirmed:
                uid, key = locks[cid]
                try:
                    assert qm.undo("Q", int(cid)) == 1
                    undone_uids.add(uid)
                except ConfirmIdNotFound:
                    confirmed.append(key)  # the confirm committed before the kill
            # An unreported lock in flight: undo by the confirm id it would have used.
            with contextlib.suppress(ConfirmIdNotFound):
                assert qm.undo("Q", int(next_cid)) == 1
            visible = {str(m.uid): m for m in qm.browse("Q")}
            assert qm.depth("Q") == len(visible), "every lock of the killed getter is undone"
        for uid in undone_uids & visible.keys():
            assert visible[uid].backout_count >= 1
        assert len(set(confirmed)) == len(confirmed), "a message was confirmed twice"
        assert not {payload_key(m.data) for m in visible.values()} & set(confirmed)
        assert {payload_key(m.data) for m in visible.values()} | set(confirmed) == expected

    # Drain the rest in one more worker: every undone message is delivered.
    with Child("get", "--path", str(path), "--assured", "--confirm-base", "999000001") as child:
        lines = [line.split() for line in child.rest()]
        assert child.wait() == 0, child.stderr
    final = [line[3] for line in lines if line[0] == "locked"]
    assert not set(final) & set(confirmed)
    assert sorted(final + confirmed) == sorted(expected)
    confirmed_uids |= {line[1] for line in lines if line[0] == "confirmed"}
    assert undone_uids <= confirmed_uids, "an undone message was never delivered again"
    assert _inspect(path).depth == 0


@pytest.mark.parametrize("hold_after", [1, 3])
def test_killed_assured_getter_keeps_its_lock_until_undone(tmp_path: Path, hold_after: int) -> None:
    path = tmp_path / "device.db"
    _fill(path, 20)
    with QueueManager(path) as qm:
        order = [str(m.uid) for m in qm.browse("Q")]
    base = 500
    with Child("get", "--path", str(path), "--assured", "--confirm-base", str(base),
               "--hold-after", str(hold_after)) as child:
        lines = list(_read_until(child, 2 * hold_after - 1))
        child.sigkill()  # it is blocked on stdin, holding the lock of its last get
    held_uid, held_cid = lines[-1][1], int(lines[-1][2])
    assert lines[-1][0] == "locked" and held_cid == base + hold_after - 1
    assert held_uid == order[hold_after - 1]

    store = _inspect(path)  # reopening (activation) does not release the lock
    assert store.locked == 1 and store.depth == len(order) - hold_after + 1
    assert held_uid not in {str(m.uid) for m in store.visible}
    with QueueManager(path) as qm:
        with pytest.raises(ConfirmIdNotFound):
            qm.undo("Q", base + hold_after)  # never used
        assert qm.undo("Q", held_cid) == 1
        with pytest.raises(ConfirmIdNotFound):
            qm.undo("Q", held_cid)  # undone already
        browsed = qm.browse("Q")
        # Back at its original place (the head), one more backout.
        assert str(browsed[0].uid) == held_uid and browsed[0].backout_count == 1
        assert [str(m.uid) for m in browsed] == order[hold_after - 1 :]
        with pytest.raises(MessageNotFound):
            qm.confirm_get("Q", held_uid)  # no longer locked
        again = qm.get("Q", confirm_id=9)
        assert again is not None and str(again.uid) == held_uid and again.backout_count == 1
        qm.confirm_get("Q", held_uid)
        assert qm.depth("Q") == len(order) - hold_after


def test_sigkill_producer_and_consumer_together(tmp_path: Path) -> None:
    """A producer and an assured consumer killed at once, mid-flight, round after round."""
    path = tmp_path / "device.db"
    with QueueManager(path, name="DEV1") as qm:
        qm.define_queue("Q")
    rng = random.Random(99)
    put: set[str] = set()
    in_flight: set[str] = set()
    confirmed: list[str] = []
    for round_ in range(ROUNDS):
        tag, base = f"r{round_}", 1 + round_ * 1_000_000
        producer = Child("put", "--path", str(path), "--tag", tag, "--seed", str(round_), "--priorities")
        consumer = Child("get", "--path", str(path), "--assured", "--forever", "--confirm-base", str(base))
        try:
            produced = list(_read_until(producer, rng.randint(20, 150)))
            producer.sigkill()
            consumer.sigkill()
            produced += [line.split() for line in producer.rest() if line != "ready"]
            consumed = [line.split() for line in consumer.rest() if line != "ready"]
        finally:
            producer.close()
            consumer.close()
        put |= {line[2] for line in produced}
        in_flight.add(f"{tag}:{len(produced)}")
        locks = {line[2]: (line[1], line[3]) for line in consumed if line[0] == "locked"}
        done = {line[1] for line in consumed if line[0] == "confirmed"}
        confirmed += [key for uid, key in locks.values() if uid in done]
        with QueueManager(path) as qm:
            for cid, (uid, key) in locks.items():
                if uid not in done:
                    try:
                        qm.undo("Q", int(cid))
                    except ConfirmIdNotFound:
                        confirmed.append(key)
            next_cid = max((int(c) for c in locks), default=base - 1) + 1
            with contextlib.suppress(ConfirmIdNotFound):
                qm.undo("Q", next_cid)
        store = _inspect(path)
        assert store.locked == 0
        assert len(set(confirmed)) == len(confirmed), "a message was delivered twice"
        assert not store.keys & set(confirmed)
        known = store.keys | set(confirmed)
        assert put <= known, f"committed puts lost: {sorted(put - known)}"
        assert known - put <= in_flight, "a message appeared that was never put"

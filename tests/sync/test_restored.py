"""A device store restored from a backup (issue 28, defect 2): it sends nothing twice
and loses nothing. The server answers a device's uid below its settled mark as already
taken; at hello the device learns it is behind what the server has seen of it and takes
a new incarnation; ``edgeq sync status`` says so. Real stores copied with shutil, a real
home server (``edgeq serve``, or uvicorn in a thread), ``edgeq sync --once`` processes.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from edgeq import ManualClock, Message, MessageUID, QueueManager
from edgeq.sync import protocol as p
from edgeq.sync.agent.agent import SyncAgent
from tests.sync.conftest import T0, LiveServer, Network

EDGEQ = [sys.executable, "-m", "edgeq"]
SUFFIXES = ("", "-wal", "-shm")


def back_up(store: Path, to: Path) -> Path:
    """Copy a store's files (the database, its WAL and shared memory if present), as an
    image of the SD card would."""
    to.mkdir()
    for suffix in SUFFIXES:
        if Path(f"{store}{suffix}").exists():
            shutil.copy2(f"{store}{suffix}", to / f"{store.name}{suffix}")
    return to / store.name


def restore(copy: Path, store: Path) -> None:
    """Put the copy back in place of the store, every file of it (a WAL not in the copy goes)."""
    for suffix in SUFFIXES:
        Path(f"{store}{suffix}").unlink(missing_ok=True)
        if Path(f"{copy}{suffix}").exists():
            shutil.copy2(f"{copy}{suffix}", f"{store}{suffix}")


def put(store: Path, clock_ms: int, data: list[bytes]) -> list[str]:
    """A device application's puts, its clock at ``clock_ms``."""
    with QueueManager(store, name="DEV1", clock=ManualClock(clock_ms)) as qm:
        if "ORDERS" not in qm.queue_names():
            qm.define_remote_queue("ORDERS", target_qmgr="HOME")
        return [str(qm.put("ORDERS", Message(d))) for d in data]


def edgeq(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*EDGEQ, *args], capture_output=True, text=True, timeout=60)


def sync_once(store: Path, url: str) -> dict[str, object]:
    done = edgeq("sync", "--db", str(store), "--server", url, "--once", "--no-pull")
    assert done.returncode == 0, done.stderr
    pushed: dict[str, object] = json.loads(done.stdout)["pushed"]
    return pushed


def consume(home: Path, delivered: list[bytes]) -> None:
    """The server's application takes what arrived (so only the server's memory of
    confirmed uids, not a copy it still holds, can recognise a resend)."""
    with QueueManager(home) as qm:
        delivered += [m.data for m in qm.get_many("ORDERS", 1_000)]


def test_restore_push_put_push_delivers_everything_exactly_once(
    served: tuple[str, Path], tmp_path: Path
) -> None:
    url, home = served
    device = tmp_path / "device.db"
    delivered: list[bytes] = []
    put(device, T0, [b"before-%d" % i for i in range(5)])
    backup = back_up(device, tmp_path / "backup")
    assert sync_once(device, url)["transmitted"] == 5
    consume(home, delivered)
    old_life = put(device, T0, [b"after-%d" % i for i in range(3)])  # made after the backup, delivered
    assert sync_once(device, url)["transmitted"] == 3
    consume(home, delivered)

    restore(backup, device)  # the SD card re-imaged: the 5 are back, the 3 never happened here
    again = sync_once(device, url)
    consume(home, delivered)
    # The device's clock is no later than its old life's (no RTC): what it puts now must
    # not collide with the 3 its old life delivered.
    new_life = put(device, T0, [b"restored-%d" % i for i in range(4)])
    last = sync_once(device, url)
    consume(home, delivered)

    expected = sorted([b"before-%d" % i for i in range(5)] + [b"after-%d" % i for i in range(3)]
                      + [b"restored-%d" % i for i in range(4)])
    assert sorted(delivered) == expected  # 0 duplicates, 0 lost
    assert (again["transmitted"], again["duplicates"]) == (5, 5)
    assert (last["transmitted"], last["duplicates"], last["error"]) == (4, 0, None)
    assert {MessageUID.parse(u).origin for u in new_life}.isdisjoint(MessageUID.parse(u).origin
                                                                     for u in old_life)
    with QueueManager(device) as qm:
        assert qm.depth("ORDERS") == 0

    shown = edgeq("sync", "status", "--db", str(device), "--json")
    restored = json.loads(shown.stdout)["restored"]
    assert restored["server"] == "HOME" and restored["old_origin"] == MessageUID.parse(old_life[0]).origin
    assert restored["new_origin"] == MessageUID.parse(new_life[0]).origin
    stamps = [MessageUID.parse(u).stamp for u in old_life]  # the server's mark: the first of them
    assert (restored["resent_below"], restored["seen"], restored["resends"]) == (min(stamps), max(stamps), 5)
    text = edgeq("sync", "status", "--db", str(device)).stdout
    assert "found restored from an older copy" in text and restored["new_origin"] in text


# -- every crash point, in process (uvicorn in a thread, ManualClocks) -------------------------

BACKUP_POINTS = ["before-put", "after-put", "after-server-put", "after-confirm", "after-transmitted"]


@pytest.mark.parametrize("backup_at", BACKUP_POINTS)
def test_a_backup_taken_at_any_point_of_a_push_restores_to_exactly_once(
    backup_at: str, tmp_path: Path, home_qm: QueueManager, server: LiveServer, network: Network,
    make_agent: Callable[..., SyncAgent], device_clock: ManualClock,
) -> None:
    store, delivered = tmp_path / "device.db", []
    copy: Path | None = None

    def backup_if(point: str) -> None:
        nonlocal copy
        if point == backup_at:
            copy = back_up(store, tmp_path / "backup")

    def take() -> None:
        delivered.extend(m.data for m in home_qm.get_many("ORDERS", 1_000))

    qm = QueueManager(store, name="DEV1", clock=device_clock)
    qm.define_remote_queue("ORDERS", target_qmgr="HOME")
    with httpx.Client(transport=network, timeout=10) as client:
        agent = make_agent(qm, server.url, client=client)
        backup_if("before-put")
        qm.put_many("ORDERS", [Message(b"first-%d" % i) for i in range(5)])
        backup_if("after-put")
        network.down_for = {"/v1/confirm"}  # stage one reaches the server, stage two does not
        assert agent.push_once().error is not None
        backup_if("after-server-put")
        network.down_for = set()
        network.lose_once = ["/v1/confirm"]  # confirmed there, the answer lost
        assert agent.push_once().error is not None and qm.depth("ORDERS") == 5
        backup_if("after-confirm")
        assert agent.push_once().transmitted == 5
        backup_if("after-transmitted")
        take()
        qm.put_many("ORDERS", [Message(b"second-%d" % i) for i in range(3)])  # the old life goes on
        assert agent.push_once().transmitted == 3
        take()
        agent.close()
    qm.close()
    assert copy is not None

    restore(copy, store)
    with QueueManager(store, clock=device_clock) as restored:
        again = make_agent(restored, server.url)
        assert again.push_once().error is None
        take()
        restored.put_many("ORDERS", [Message(b"third-%d" % i) for i in range(9)])  # the clock is still T0
        again.push_once()
        take()
        expected = [b"first-%d" % i for i in range(5)] + [b"second-%d" % i for i in range(3)]
        # 0 duplicates, 0 lost
        assert sorted(delivered) == sorted(expected + [b"third-%d" % i for i in range(9)])
        assert restored.depth("ORDERS") == 0
        found = restored.exchange.restoration()
        assert found is not None and found.new_origin == restored.origin != found.old_origin
        again.hello()  # a later hello finds nothing more: one restore, one new incarnation
        assert restored.exchange.restoration() == found and restored.origin == found.new_origin


# -- the server's side ------------------------------------------------------------------------


def test_a_uid_below_the_devices_settled_mark_is_a_resend_never_stored_again(
    make_link: Callable[..., Any], home_qm: QueueManager, device_qm: QueueManager,
) -> None:
    link = make_link()
    link.hello()
    old = MessageUID(device_qm.origin, 5)
    home_qm.exchange.settle(device_qm.origin, 10)  # the device said: nothing below 10 is held any more
    foreign = MessageUID("DEV2:abcdefghij", 5)
    home_qm.exchange.settle(foreign.origin, 10)
    put = link.call(p.PATH_PUT, {"type": "put", "now_ms": T0, "queue": "ORDERS",
                                 "messages": [{"u": str(old), "d": b"again"},
                                              {"u": str(foreign), "d": b"fwd"}]}, "put")
    assert [r["s"] for r in put["results"]] == ["duplicate", "stored"]  # only its own marks bind a device
    confirm = link.call(p.PATH_CONFIRM, {"type": "confirm", "now_ms": T0, "queue": "ORDERS",
                                         "uids": [str(old), str(foreign)]}, "confirm")
    assert [r["s"] for r in confirm["results"]] == ["already", "confirmed"]
    assert [m.data for m in home_qm.browse("ORDERS")] == [b"fwd"]


def test_a_confirm_looks_for_settled_marks_only_when_a_uid_is_not_held(
    make_link: Callable[..., Any], home_qm: QueueManager, device_qm: QueueManager,
) -> None:
    link = make_link()
    link.hello()
    home_qm.exchange.settle(device_qm.origin, 10)
    new = MessageUID(device_qm.origin, 50)
    link.call(p.PATH_PUT, {"type": "put", "now_ms": T0, "queue": "ORDERS",
                           "messages": [{"u": str(new), "d": b"new"}]}, "put")

    def marks_read(uids: list[MessageUID]) -> tuple[list[str], int]:
        seen: list[str] = []
        with home_qm.tracer(seen.append):
            answer = link.call(p.PATH_CONFIRM, {"type": "confirm", "now_ms": T0, "queue": "ORDERS",
                                                "uids": [str(u) for u in uids]}, "confirm")
        marks = sum(s.lstrip().startswith("SELECT origin, below FROM settled_origins") for s in seen)
        return [r["s"] for r in answer["results"]], marks

    assert marks_read([new]) == (["confirmed"], 0)  # the usual confirm: every uid held
    assert marks_read([new, MessageUID(device_qm.origin, 5)]) == (["already", "already"], 1)


def test_the_hello_answers_what_the_server_has_seen_of_the_store_only_to_an_agent_that_asks(
    make_link: Callable[..., Any], network: Network, home_qm: QueueManager, device_qm: QueueManager,
    server: LiveServer,
) -> None:
    home_qm.put_each("ORDERS", [Message(b"x", uid=MessageUID(device_qm.origin, 42))], confirm_id=7)
    home_qm.exchange.settle(device_qm.origin, 30)
    link = make_link()
    link.hello()
    answer = link.transport.call(p.PATH_HELLO, network.bodies(p.PATH_HELLO)[0], "hello")
    assert (answer["settled"], answer["seen"]) == (30, 42)
    legacy = {"type": "hello", "qmgr": "DEV1", "now_ms": T0, "agent": "edgeq/0.9"}  # no origin, no mark
    assert {"settled", "seen"}.isdisjoint(link.transport.call(p.PATH_HELLO, legacy, "hello"))


# -- the device keeps its side: nothing of its own below its mark is sent with its old uid -----


def test_a_poison_message_moved_to_a_remote_backout_queue_still_reaches_the_server(
    device_qm: QueueManager, home_qm: QueueManager, agent: SyncAgent,
) -> None:
    home_qm.define_queue("POISON")
    device_qm.define_remote_queue("HOME.BOQ", target_qmgr="HOME", target_queue="POISON")
    device_qm.define_queue("WORK", redelivery_delay_ms=0, backout_threshold=1, backout_queue="HOME.BOQ")
    uid = device_qm.put("WORK", Message(b"poison"))
    device_qm.put("ORDERS", Message(b"later"))
    assert agent.push_once().transmitted == 1  # the device's mark moves past ORDERS' message...
    got = device_qm.get("WORK", confirm_id=1)
    assert got is not None and got.uid == uid
    device_qm.undo("WORK", 1)  # ...but not past the message waiting on WORK, whose backout queue is remote

    assert agent.push_once().transmitted == 1
    (arrived,) = home_qm.browse("POISON")
    assert (arrived.uid, arrived.data) == (uid, b"poison")


def test_an_own_message_put_again_on_a_remote_queue_takes_a_new_uid_and_is_delivered(
    device_qm: QueueManager, home_qm: QueueManager, agent: SyncAgent,
) -> None:
    device_qm.define_queue("LOCAL")
    device_qm.put("LOCAL", Message(b"kept here first"))
    device_qm.put("ORDERS", Message(b"x"))
    assert agent.push_once().transmitted == 1  # the mark passes the LOCAL message's stamp
    got = device_qm.get("LOCAL")
    assert got is not None and got.uid is not None

    forwarded = device_qm.put("ORDERS", got)  # the application forwards it, uid and all

    assert forwarded != got.uid and forwarded.origin == device_qm.origin  # the server would drop the old one
    assert agent.push_once().transmitted == 1
    assert [m.data for m in home_qm.browse("ORDERS")] == [b"x", b"kept here first"]

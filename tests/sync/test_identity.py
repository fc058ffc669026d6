"""Identity and exactly-once without a time window (issue 16, defects 1 and 2).

A re-created store (factory reset, new SD card) or a second store given the same
name must never collide with an earlier one's uids, whatever its clock; a device
offline for longer than any remember window after a lost confirm reply delivers
nothing twice, in either direction; and what the server remembers stays bounded by
what devices still hold in doubt.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from edgeq import ManualClock, Message, QueueManager
from edgeq.sync.agent.agent import SyncAgent
from tests.sync.conftest import T0, LiveServer, Network

EDGEQ = [sys.executable, "-m", "edgeq"]
WEEK_MS = 7 * 86_400_000


def remove_store(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def make_device(path: Path, boot_clock_ms: int, data: list[bytes]) -> list[str]:
    """A device app: a store made with its clock at ``boot_clock_ms`` (no RTC), some puts."""
    with QueueManager(path, name="DEV1", clock=ManualClock(boot_clock_ms)) as qm:
        qm.define_remote_queue("ORDERS", target_qmgr="HOME")
        return [str(qm.put("ORDERS", Message(d))) for d in data]


def sync_once(device: Path, url: str) -> dict[str, dict[str, object]]:
    done = subprocess.run(
        [*EDGEQ, "sync", "--db", str(device), "--server", url, "--once", "--no-pull"],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    summary: dict[str, dict[str, object]] = json.loads(done.stdout)
    return summary


def server_data(home: Path) -> list[bytes]:
    with QueueManager(home) as qm:
        return sorted(m.data for m in qm.browse("ORDERS"))


def test_a_recreated_store_with_the_same_boot_clock_loses_nothing(
    served: tuple[str, Path], tmp_path: Path
) -> None:
    url, home = served
    device = tmp_path / "device.db"
    first = make_device(device, T0, [b"life1-%d" % i for i in range(5)])
    assert sync_once(device, url)["pushed"]["transmitted"] == 5

    remove_store(device)  # factory reset: a new store, same name, the clock boots at the same epoch
    second = make_device(device, T0, [b"life2-%d" % i for i in range(5)])
    report = sync_once(device, url)["pushed"]

    assert (server_data(home)
            == sorted([b"life1-%d" % i for i in range(5)] + [b"life2-%d" % i for i in range(5)]))
    assert report["transmitted"] == 5 and report["duplicates"] == 0 and report["error"] is None
    assert not set(first) & set(second), "a new incarnation reissued an earlier one's uids"


def test_a_recreated_store_whose_clock_boots_before_its_previous_life(
    served: tuple[str, Path], tmp_path: Path
) -> None:
    url, home = served
    device = tmp_path / "device.db"
    make_device(device, T0, [b"old-%d" % i for i in range(3)])
    sync_once(device, url)
    remove_store(device)
    clock = ManualClock(T0 - 5)  # boots 5 ms before the previous life's first message, then catches up
    with QueueManager(device, name="DEV1", clock=clock) as qm:
        qm.define_remote_queue("ORDERS", target_qmgr="HOME")
        for i in range(10):
            qm.put("ORDERS", Message(b"new-%d" % i))
            clock.advance(1)
    assert sync_once(device, url)["pushed"]["transmitted"] == 10
    assert server_data(home) == sorted([b"new-%d" % i for i in range(10)] + [b"old-%d" % i for i in range(3)])


def test_two_devices_given_the_same_name_both_deliver(served: tuple[str, Path], tmp_path: Path) -> None:
    url, home = served
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    uids_a = make_device(a, T0, [b"a-%d" % i for i in range(5)])
    uids_b = make_device(b, T0, [b"b-%d" % i for i in range(5)])
    assert not set(uids_a) & set(uids_b)
    assert sync_once(a, url)["pushed"]["transmitted"] == 5
    assert sync_once(b, url)["pushed"]["transmitted"] == 5
    assert len(server_data(home)) == 10


def push_losing_the_confirm_reply(device_qm: QueueManager, agent: SyncAgent, network: Network) -> None:
    """A message reaches the server and is confirmed there, but the device never hears so."""
    device_qm.put("ORDERS", Message(b"once"))
    network.lose_once.append("/v1/confirm")
    assert agent.push_once().error is not None
    assert device_qm.depth("ORDERS") == 1  # the device does not know it was delivered


def test_a_true_resend_from_the_same_store_is_still_a_duplicate(
    device_qm: QueueManager, flaky_agent: SyncAgent, network: Network, home_qm: QueueManager,
) -> None:
    push_losing_the_confirm_reply(device_qm, flaky_agent, network)
    report = flaky_agent.push_once()
    assert report.error is None and report.duplicates == 1 and report.transmitted == 1
    assert home_qm.depth("ORDERS") == 1 and device_qm.depth("ORDERS") == 0


def test_a_week_offline_after_a_lost_confirm_reply_delivers_nothing_twice(
    device_qm: QueueManager, flaky_agent: SyncAgent, network: Network, home_qm: QueueManager,
    server_clock: ManualClock, device_clock: ManualClock,
) -> None:
    push_losing_the_confirm_reply(device_qm, flaky_agent, network)
    got = home_qm.get("ORDERS")  # the server's app consumes it
    assert got is not None and got.data == b"once"

    server_clock.advance(WEEK_MS)  # the device sits in a drawer for a week
    device_clock.advance(WEEK_MS)
    # Other confirms after the week: a time window would age the uid out of memory here.
    other = home_qm.put("ORDERS", Message(b"other traffic"), confirm_id=7)
    home_qm.confirm_put("ORDERS", other)
    report = flaky_agent.push_once()

    assert report.error is None and report.duplicates == 1 and report.transmitted == 1
    assert [m.data for m in home_qm.browse("ORDERS")] == [b"other traffic"]
    assert device_qm.depth("ORDERS") == 0


def test_the_remembered_set_is_bounded_by_what_the_device_still_holds(
    device_qm: QueueManager, agent: SyncAgent, home_qm: QueueManager,
) -> None:
    device_qm.put_many("ORDERS", [Message(b"m%d" % i) for i in range(20)])
    assert agent.push_once().transmitted == 20
    origin = device_qm.origin
    assert home_qm.exchange.remembered_count(origin) == 20  # in doubt until the device says otherwise
    device_qm.put("ORDERS", Message(b"later"))
    assert agent.push_once().transmitted == 1  # its requests carry the low-water mark past all 20
    assert home_qm.exchange.remembered_count(origin) == 1
    assert home_qm.exchange.remembered_count() == 1 and home_qm.depth("ORDERS") == 21


def test_a_week_offline_after_a_lost_pull_confirm_receives_nothing_twice(
    device_qm: QueueManager, home_qm: QueueManager, server: LiveServer, network: Network,
    make_agent: Callable[..., SyncAgent], server_clock: ManualClock, device_clock: ManualClock,
) -> None:
    import httpx

    home_qm.define_queue("DEV1.INBOX")
    device_qm.define_home_server_queue("INBOX", server="HOME")
    home_qm.put("DEV1.INBOX", Message(b"for DEV1"))
    with httpx.Client(transport=network, timeout=10) as client:
        agent = make_agent(device_qm, server.url, client=client)
        network.down_for.add("/v1/pull/confirm")  # stored on the device; the server never hears so
        assert agent.pull_once().error is not None
        got = device_qm.get("INBOX")  # the device app consumes it
        assert got is not None and got.data == b"for DEV1"

        server_clock.advance(WEEK_MS)
        device_clock.advance(WEEK_MS)
        mine = device_qm.put("INBOX", Message(b"local"), confirm_id=9)  # a confirm prunes by age
        device_qm.confirm_put("INBOX", mine)
        network.down_for.clear()
        report = agent.pull_once()

    assert report.error is None and report.duplicates == 1 and report.received == 0
    assert [m.data for m in device_qm.browse("INBOX")] == [b"local"]
    assert home_qm.depth("DEV1.INBOX") == 0

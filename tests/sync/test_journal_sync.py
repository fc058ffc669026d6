"""What the home server journals through the real HTTP path: accepted messages with the
device and its clock offset, and the device's own expiries reported at its next sync."""

from __future__ import annotations

import json
import logging
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from edgeq import Int32, ManualClock, Message, MessageUID, QueueManager
from edgeq.clock import system_clock
from edgeq.sync import protocol as p
from edgeq.sync.agent.agent import SyncAgent
from edgeq.sync.server.home import HomeService, ServerLimits
from tests.sync.conftest import EDGEQ, T0, LiveServer, edgeq_serve, free_port


def test_accepted_entries_carry_device_and_offset_and_device_expiries_are_reported(
    tmp_path: Path, server_clock: ManualClock, make_server: Callable[..., LiveServer],
    make_agent: Callable[..., SyncAgent],
) -> None:
    device_clock = ManualClock(T0 + 1_500)  # the device runs 1.5 s ahead of the server
    home = QueueManager(tmp_path / "home.db", name="HOME", clock=server_clock, journal="server")
    device = QueueManager(tmp_path / "dev.db", name="DEV1", clock=device_clock, journal="device")
    try:
        home.define_queue("ORDERS")
        device.define_remote_queue("ORDERS", target_qmgr="HOME")
        server = make_server(home)
        agent = make_agent(device, server.url, clock=device_clock)
        kept = [device.put("ORDERS", Message(b"order %d" % i)) for i in range(2)]
        doomed = device.put("ORDERS", Message(b"stale", expiry=Int32(100)))
        device_clock.advance(100)
        server_clock.advance(100)

        report = agent.push_once()

        assert report.ok and report.transmitted == 2 and report.expiries_reported == 1
        entries = home.journal_since()
        accepted = [e for e in entries if e.kind == "accepted"]
        assert sorted(e.uid for e in accepted) == sorted(str(u) for u in kept)
        assert {(e.device, e.clock_offset_ms) for e in accepted} == {("DEV1", 1_500)}
        (expired,) = [e for e in entries if e.kind == "expired"]
        assert ((expired.uid, expired.side, expired.device, expired.check_point)
                == (str(doomed), "device", "DEV1", "get"))
        assert expired.at_ms == T0 + 100  # the device's T0 + 1,600, rebased to the server clock
        assert device.journal_since() == []  # the outbox was trimmed once the server had it
        (record,) = home.devices()
        assert (record.name, record.clock_offset_ms) == ("DEV1", 1_500)
        assert agent.push_once().expiries_reported == 0  # nothing reported twice
    finally:
        device.close()
        home.close()


# -- issue 16: expiry reports answered entry by entry, under the server's queue names -------


def _sync_once(device: Path, url: str) -> tuple[int, dict[str, Any], str]:
    """`edgeq sync --once` in its own process: exit code, JSON summary, log lines."""
    done = subprocess.run(
        [*EDGEQ, "sync", "--db", str(device), "--server", url, "--once", "--timeout", "10"],
        capture_output=True, text=True, timeout=120,
    )
    return done.returncode, json.loads(done.stdout) if done.stdout.strip() else {}, done.stderr


def _device_expiries(home: Path) -> dict[str, str]:
    """The expiries devices reported to the server's journal: uid -> queue."""
    with QueueManager(home) as qm:
        return {e.uid: e.queue for e in qm.journal_since(0) if e.kind == "expired" and e.side == "device"}


def test_a_pulled_message_that_expires_on_the_device_does_not_wedge_sync(tmp_path: Path) -> None:
    home, device = tmp_path / "home.db", tmp_path / "device.db"
    with QueueManager(home, name="HOME", journal="server") as qm:
        qm.define_queue("ORDERS")
        qm.define_queue("DEV1.INBOX")
        pulled = qm.put("DEV1.INBOX", Message(b"for DEV1", expiry=Int32(600_000)))
    with QueueManager(device, name="DEV1") as qm:
        qm.define_home_server_queue("INBOX", server="HOME")
        qm.define_remote_queue("ORDERS", target_qmgr="HOME")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with edgeq_serve(home, port):
        code, summary, log = _sync_once(device, url)
        assert code == 0, log
        assert summary["pulled"]["received"] == 1
        # The device's clock moves on an hour: the pulled message expires there, and
        # so does one of the device's own.
        later = ManualClock(system_clock() + 3_600_000)
        with QueueManager(device, clock=later) as qm:
            assert qm.depth("INBOX") == 0
            own = qm.put("ORDERS", Message(b"stale", expiry=Int32(1_000)))
            later.advance(1_000)
            assert qm.sweep_expired() == 1
            assert {e.uid: e.queue for e in qm.journal_since()} == {str(pulled): "INBOX", str(own): "ORDERS"}
        with QueueManager(home) as qm:  # the server's application has more for DEV1
            qm.put("DEV1.INBOX", Message(b"after"))

        code, summary, log = _sync_once(device, url)

        assert code == 0, log
        assert summary["pushed"]["error"] is None and summary["pushed"]["expiries_reported"] == 2
        assert summary["pulled"] == {**summary["pulled"], "received": 1, "error": None}  # pulls still happen
        # the pulled message under the queue the server held it on; the device's own under its target
        assert _device_expiries(home) == {str(pulled): "DEV1.INBOX", str(own): "ORDERS"}
        with QueueManager(device) as qm:
            assert qm.journal_since() == []
            got = qm.get("INBOX")
            assert got is not None and got.data == b"after"
        code, summary, log = _sync_once(device, url)
        assert code == 0 and summary["pushed"]["expiries_reported"] == 0, log


def test_expiry_reports_are_answered_entry_by_entry(tmp_path: Path, server_clock: ManualClock) -> None:
    def entry(uid: str, queue: str = "ORDERS", **extra: Any) -> dict[str, Any]:
        return {"u": uid, "q": queue, "t": T0 + 5, "w": "get", **extra}

    def body(entries: list[Any]) -> dict[str, Any]:
        return {"v": 1, "type": "expiries", "qmgr": "DEV1", "now_ms": T0, "entries": entries}

    entries: list[Any] = [
        entry("DEV1.1"),                             # its own message
        entry("DEV1:k3x9qa.2"),                      # its own, from a store with an incarnation
        entry("HOME.3"),                             # not its message, not from its queue
        entry("HOME.4", "DEV1.INBOX"),               # pulled from the server's queue for DEV1
        entry("DEV2.5", "DEV2.INBOX"),               # another device's queue
        entry("DEV1.1"),                             # the same entry again
        {"u": "DEV1.6", "q": "ORDERS", "w": "get"},  # no time
        "not a map",
        entry("DEV1.7", w="lunch"),                  # not a check point
        entry("HOME.8", "DEV1."),                    # no queue after the device's prefix
        {"q": "ORDERS", "t": T0, "w": "get"},        # no uid
    ]
    home = QueueManager(tmp_path / "home.db", name="HOME", clock=server_clock, journal="server")
    bare = QueueManager(tmp_path / "bare.db", name="BARE", clock=server_clock)  # keeps no journal
    try:
        service = HomeService(home, clock=server_clock, limits=ServerLimits(max_batch=len(entries)))
        service.hello({"v": 1, "type": "hello", "qmgr": "DEV1", "now_ms": T0})

        answer = service.expiries(body(entries))

        results = answer["results"]
        assert [(r["u"], r["s"]) for r in results] == [
            ("DEV1.1", "recorded"), ("DEV1:k3x9qa.2", "recorded"), ("HOME.3", "refused"),
            ("HOME.4", "recorded"), ("DEV2.5", "refused"), ("DEV1.1", "already"), ("DEV1.6", "refused"),
            ("", "refused"), ("DEV1.7", "refused"), ("HOME.8", "refused"), ("", "refused"),
        ]
        assert all(r.get("why") for r in results if r["s"] == "refused")
        assert all("why" not in r for r in results if r["s"] != "refused")
        assert "foreign" in results[2]["why"] and "'t'" in results[6]["why"]
        assert answer["recorded"] == 3
        assert {(e.uid, e.queue) for e in home.journal_since() if e.kind == "expired"} == {
            ("DEV1.1", "ORDERS"), ("DEV1:k3x9qa.2", "ORDERS"), ("HOME.4", "DEV1.INBOX")}
        again = service.expiries(body(entries[:4]))  # a report received twice is kept once
        assert ([r["s"] for r in again["results"]], again["recorded"]) == (
            ["already", "already", "refused", "already"], 0)
        # A malformed body (not a list, too many entries) is still refused whole.
        for bad in ("not a list", [*entries, entry("DEV1.9")]):
            with pytest.raises(p.ProtocolError) as info:
                service.expiries(body(bad))  # type: ignore[arg-type]
            assert (info.value.code, info.value.http_status) == ("invalid", 422)
        # A server keeping no journal answers every entry too: it just keeps none.
        unjournaled = HomeService(bare, clock=server_clock)
        unjournaled.hello({"v": 1, "type": "hello", "qmgr": "DEV1", "now_ms": T0})
        answer = unjournaled.expiries(body(entries[:4]))
        assert ([r["s"] for r in answer["results"]], answer["recorded"]) == (
            ["ignored", "ignored", "refused", "ignored"], 0)
    finally:
        bare.close()
        home.close()


def test_a_refused_expiry_is_logged_and_trimmed_and_the_rest_recorded(
    tmp_path: Path, device_clock: ManualClock, server_clock: ManualClock,
    make_server: Callable[..., LiveServer], make_agent: Callable[..., SyncAgent],
    caplog: pytest.LogCaptureFixture,
) -> None:
    home = QueueManager(tmp_path / "home.db", name="HOME", clock=server_clock, journal="server")
    device = QueueManager(tmp_path / "dev.db", name="DEV1", clock=device_clock, journal="device")
    try:
        home.define_queue("ORDERS")
        device.define_remote_queue("ORDERS", target_qmgr="HOME")
        device.define_queue("MISC")
        # a message that came to the device some other way, with a uid not its own
        stray = device.put("MISC", Message(b"stray", uid=MessageUID("HOME", T0 * 1000), expiry=Int32(100)))
        own = device.put("ORDERS", Message(b"stale", expiry=Int32(100)))
        device_clock.advance(100)
        assert device.sweep_expired() == 2
        agent = make_agent(device, make_server(home).url)

        with caplog.at_level(logging.WARNING, logger="edgeq.sync.agent"):
            report = agent.push_once()

        assert report.ok and report.error is None and report.expiries_reported == 2
        assert ([(e.uid, e.queue) for e in home.journal_since() if e.kind == "expired"]
                == [(str(own), "ORDERS")])
        assert device.journal_since() == []  # answered, so trimmed: it can never wedge the channel
        (refused,) = [r for r in caplog.records if getattr(r, "event", None) == "expiry-refused"]
        assert getattr(refused, "uid", None) == str(stray) and "foreign" in str(getattr(refused, "why", ""))
    finally:
        device.close()
        home.close()


def test_expiries_before_the_first_sync_reach_the_server(tmp_path: Path) -> None:
    home, device = tmp_path / "home.db", tmp_path / "device.db"
    with QueueManager(home, name="HOME", journal="server") as qm:
        qm.define_queue("ORDERS")
    app_clock = ManualClock(system_clock())
    # The README's application: it makes the store and its remote queue, no journal
    # argument, and messages expire on the device before `edgeq sync` ever runs ...
    with QueueManager(device, name="DEV1", clock=app_clock) as qm:
        qm.define_remote_queue("ORDERS", target_qmgr="HOME")
        uids = [qm.put("ORDERS", Message(b"%d" % i, expiry=Int32(1_000))) for i in range(20)]
        app_clock.advance(1_000)
        assert qm.depth("ORDERS") == 0
    with QueueManager(device, clock=app_clock) as qm:  # ... and in its next run
        uids += [qm.put("ORDERS", Message(b"%d" % i, expiry=Int32(1_000))) for i in range(10)]
        app_clock.advance(1_000)
        assert qm.sweep_expired() == 10
    port = free_port()
    with edgeq_serve(home, port):
        code, summary, log = _sync_once(device, f"http://127.0.0.1:{port}")

    assert code == 0, log
    assert summary["pushed"]["expiries_reported"] == 30
    assert _device_expiries(home) == {str(u): "ORDERS" for u in uids}  # 30 of 30


def test_renamed_remote_queue_expiries_are_recorded_under_the_target(
    tmp_path: Path, device_clock: ManualClock, server_clock: ManualClock,
    make_server: Callable[..., LiveServer], make_agent: Callable[..., SyncAgent],
) -> None:
    home = QueueManager(tmp_path / "home.db", name="HOME", clock=server_clock, journal="server")
    device = QueueManager(tmp_path / "dev.db", name="DEV1", clock=device_clock, journal="device")
    try:
        home.define_queue("ORDERS")
        device.define_remote_queue("LOCAL", target_qmgr="HOME", target_queue="ORDERS")
        doomed = device.put("LOCAL", Message(b"stale", expiry=Int32(100)))
        device.put("LOCAL", Message(b"fresh"))
        device_clock.advance(100)
        server_clock.advance(100)
        agent = make_agent(device, make_server(home).url)

        report = agent.push_once()

        assert report.ok and report.transmitted == 1 and report.expiries_reported == 1
        entries = home.journal_since()
        assert [(e.uid, e.queue) for e in entries if e.kind == "expired"] == [(str(doomed), "ORDERS")]
        assert {e.queue for e in entries} == {"ORDERS"}  # no phantom queue LOCAL on the server
    finally:
        device.close()
        home.close()

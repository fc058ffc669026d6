"""Remote administration end to end (issue 12's "Done when"): a real ``edgeq serve`` and two
real device agents in their own processes over loopback, signed sync on, both devices
trusting the operator key (set with ``edgeq keys trust-admin``).

DEV1 is one long-lived agent (tests/sync/admin_device.py) whose clock the test moves on, so
messages put on it expire later, while it runs; DEV2 is ``edgeq sync`` itself (``--once``
runs, then its daemon). The operator is :class:`edgeq.sync.server.admin.client.AdminClient` on the home
store, and the ``edgeq admin`` command line for the fan-out.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from edgeq import ManualClock, Message, QueueManager
from edgeq.admin.wire import ADMIN_QUEUE, AdminRequest, request_message
from edgeq.cli import cli
from edgeq.clock import system_clock
from edgeq.sync.keys import new_key_pair
from edgeq.sync.server.admin.client import AdminClient, OperatorKey, new_operator_key
from edgeq.values import Int32
from tests.sync.conftest import EDGEQ, edgeq_serve

WORKER = Path(__file__).with_name("admin_device.py")
WAIT_S = 30.0  # the most any reply may take once its device has synced
MINUTE = 60_000


class Device:
    """DEV1: one agent process, answering one line per command."""

    def __init__(self, db: Path, url: str, key: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKER), "--db", str(db), "--server", url, "--key", str(key)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        assert self.read() == "ready"

    def read(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            pytest.fail(f"the device process ended (exit {self.proc.wait(10)})")
        return line.strip()

    def ask(self, command: str) -> str:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self.read()

    def sync(self) -> dict[str, object]:
        report: dict[str, object] = json.loads(self.ask("sync"))
        assert report["pulled"] is not None, report
        return report

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.write("quit\n")
            self.proc.stdin.close()
        if self.proc.wait(30) != 0:
            pytest.fail(f"the device process failed: exit {self.proc.returncode}")
        assert self.proc.stdout is not None
        self.proc.stdout.close()


@dataclass
class Fleet:
    """A home server and two devices, all real, with an operator key both devices trust."""

    tmp: Path
    url: str
    home_db: Path
    operator_key: Path
    devices: dict[str, tuple[Path, Path]]  # name -> (store, device key)

    def sync_once(self, name: str) -> dict[str, object]:
        """``edgeq sync --once`` of device ``name``: its JSON summary (it exits 0: all moved)."""
        db, key = self.devices[name]
        done = subprocess.run([*EDGEQ, "sync", "--db", str(db), "--server", self.url, "--once", "--key",
                               str(key)],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        summary: dict[str, object] = json.loads(done.stdout)
        return summary

    def client(self, **options: object) -> AdminClient:
        return AdminClient(self.home_db, operator_key=self.operator_key, poll_s=0.05,
                           **options)  # type: ignore[arg-type]

    def store(self, name: str, **options: object) -> QueueManager:
        """The device's store, opened beside its running agent (SQLite allows it)."""
        return QueueManager(self.devices[name][0], **options)  # type: ignore[arg-type]

    def device(self, name: str) -> Device:
        db, key = self.devices[name]
        return Device(db, self.url, key)


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    home_db = tmp_path / "home.db"
    pair, key_id = new_operator_key(tmp_path / "operator.key")
    devices = {}
    with QueueManager(home_db, name="HOME", journal="server") as home:
        for name in ("DEV1", "DEV2"):
            device_key = new_key_pair(tmp_path / f"{name.lower()}.key")
            # A device may push to ORDERS only: its admin replies go through all the same.
            home.register_device(name, device_key.public_key, queues=["ORDERS"])
            db = tmp_path / f"{name}.db"
            with QueueManager(db, name=name):
                pass
            trusted = CliRunner().invoke(cli, ["keys", "trust-admin", "--db", str(db), key_id,
                                               str(pair.public_path)])
            assert trusted.exit_code == 0, trusted.output
            devices[name] = (db, device_key.private_path)
    # Port 0: the server binds a free port itself and says which (no race with other tests
    # for a port picked beforehand).
    with edgeq_serve(home_db, 0) as lines:
        listening = re.search(r"Uvicorn running on (http://127\.0\.0\.1:\d+)", lines[-1])
        assert listening is not None, lines[-1]
        yield Fleet(tmp_path, listening.group(1), home_db, pair.private_path, devices)


def test_the_operator_defines_inquires_and_deletes_queues_on_a_running_device(fleet: Fleet) -> None:
    dev1 = fleet.device("DEV1")
    try:
        dev1.sync()  # its first cycle defines the admin queues (it trusts an operator key)
        with fleet.client() as client:
            # -- define a queue, and inquire it -----------------------------------------------
            define = client.request("DEV1", "define-queue", "ALERTS",
                                    {"expiry_ms": MINUTE, "ordering": "fifo"})
            inquire = client.request("DEV1", "inquire-queue", "ALERTS")
            dev1.sync()
            defined, shown = define.wait(WAIT_S), inquire.wait(WAIT_S)
            assert defined is not None and defined.rc == "success", defined
            assert shown is not None and shown.rc == "success", shown
            attributes = shown.results[0]["attributes"]
            assert (attributes["expiry_ms"], attributes["ordering"],
                    shown.results[0]["depth"]) == (  # type: ignore[index]
                MINUTE, "fifo", 0)

            # -- a depth inquiry purges expired messages first; the rules fire at "depth" ----------
            # Defined by request, so the running agent holds the rules (a process sees the rules
            # bound when it opened its store, and those bound through it).
            client.request("DEV1", "define-queue", "DLQ")
            rules = client.request("DEV1", "define-queue", "READINGS",
                                   {"rules": [["dead-letter", {"queue": "DLQ"}], "counters"]})
            dev1.sync()
            assert (rules.wait(WAIT_S) is not None and rules.status == "replied"
                    and rules.record.rc == "success")
            with fleet.store("DEV1") as dev:
                dev.put_many("READINGS",
                             [Message(b"r1", expiry=Int32(MINUTE)), Message(b"r2", expiry=Int32(MINUTE)),
                              Message(b"kept")])
            first = client.request("DEV1", "inquire-queue", "READINGS")
            dev1.sync()
            reply = first.wait(WAIT_S)
            assert reply is not None and reply.results[0]["depth"] == 3  # all live: nothing expired yet
            assert dev1.ask(f"advance {2 * MINUTE}") == "ok"  # two minutes on, on the device
            second = client.request("DEV1", "inquire-queue", "READINGS")
            dev1.sync()
            reply = second.wait(WAIT_S)
            assert reply is not None and reply.rc == "success" and reply.results[0]["depth"] == 1
            with fleet.store("DEV1") as dev:
                copies = dev.browse("DLQ")
                assert sorted(m.data for m in copies) == [b"r1", b"r2"]
                assert {m.fields["dlq.where"] for m in copies} == {"depth"}
                assert dev.queue_stats("READINGS")["expired.depth"] == 2

            # -- delete: refused while live messages remain, done when only expired ones do -----
            old = client.request("DEV1", "define-queue", "OLD",
                                 {"rules": [["dead-letter", {"queue": "DLQ"}]]})
            dev1.sync()
            assert old.wait(WAIT_S) is not None and old.record.rc == "success"
            with fleet.store("DEV1") as dev:
                # Three minutes from now by this clock: the device's runs two ahead, one is left.
                dev.put_many("OLD", [Message(b"live"), Message(b"stale", expiry=Int32(3 * MINUTE))])
            refused = client.request("DEV1", "delete-queue", "OLD")
            dev1.sync()
            reply = refused.wait(WAIT_S)
            assert reply is not None and reply.rc == "failed"
            assert (reply.results[0]["depth"] == 2
                    and "still holds 2 unexpired" in str(reply.results[0]["reason"]))
            with fleet.store("DEV1") as dev:
                got = dev.get("OLD")  # the live message is consumed; the stale one stays
                assert got is not None and got.data == b"live"
            assert dev1.ask(f"advance {2 * MINUTE}") == "ok"
            deleted = client.request("DEV1", "delete-queue", "OLD")
            dev1.sync()
            reply = deleted.wait(WAIT_S)
            assert reply is not None and reply.rc == "success", reply
            with fleet.store("DEV1") as dev:
                assert "OLD" not in dev.queue_names()
                late = [m for m in dev.browse("DLQ") if m.data == b"stale"]
                assert [m.fields["dlq.where"] for m in late] == ["delete"]
            assert client.pending() == []
    finally:
        dev1.close()
    # The device reported its expiries: the server's journal has them at their check points.
    with QueueManager(fleet.home_db) as home:
        points = sorted(str(e.check_point) for e in home.journal_since(0)
                        if e.kind == "expired" and e.device == "DEV1")
    assert points == ["delete", "depth", "depth"]


def test_offline_devices_replays_and_requests_that_must_not_run(fleet: Fleet) -> None:
    fleet.sync_once("DEV1")
    fleet.sync_once("DEV2")  # both known to the server, both with their admin queues
    with fleet.client() as client, fleet.store("DEV1") as dev:
        # -- DEV2 is offline when the request is made: it runs when DEV2 is back -------------
        offline = client.request("DEV2", "define-queue", "LATER")
        assert offline.status == "pending"
        summary = fleet.sync_once("DEV2")
        assert summary["pulled"]["received"] == 1  # type: ignore[index]
        reply = offline.wait(WAIT_S)
        assert reply is not None and reply.rc == "success"
        with fleet.store("DEV2") as dev2:
            assert "LATER" in dev2.queue_names()

        # -- a duplicated and replayed request is answered, never run twice ------------------
        dev.define_queue("BUFFER")
        dev.put_many("BUFFER", [Message(b"a"), Message(b"b")])
        purge = client.request("DEV1", "purge", "BUFFER")
        fleet.sync_once("DEV1")
        first = purge.wait(WAIT_S)
        assert first is not None and first.results[0]["purged"] == 2
        dev.put_many("BUFFER", [Message(b"c"), Message(b"d"), Message(b"e")])
        client.resend(purge.request_id)  # a resend, as after a lost reply ...
        with QueueManager(fleet.home_db) as home:  # ... and the same bytes replayed on the admin queue
            home.put("DEV1.SYSTEM.ADMIN", request_message(AdminRequest.from_bytes(purge.record.request)))
        fleet.sync_once("DEV1")
        assert dev.depth("BUFFER") == 3  # not purged again
        # Both answered from the remembered reply, which is one message (one uid) however often
        # it is put: the server takes it once more, and the record keeps the first.
        assert client.collect().repeated == 1 and purge.reply == first

        # -- unsigned, tampered, untrusted and expired requests are refused, never run -------
        key = OperatorKey.load(fleet.operator_key)
        now = system_clock()

        def made(target: str, created_ms: int = now, expires_ms: int | None = None) -> AdminRequest:
            return AdminRequest.create("define-queue", target, device="DEV1", reply_qmgr="HOME",
                                       created_ms=created_ms, key_id=key.key_id, expires_ms=expires_ms)

        stranger = Ed25519PrivateKey.generate()
        bad = {
            "unsigned": made("EVIL1"),
            "tampered": made("EVIL2").sign(key.private_key).replace_params(max_depth=1),
            "untrusted": AdminRequest.create("define-queue", "EVIL3", device="DEV1", reply_qmgr="HOME",
                                             created_ms=now, key_id="stranger").sign(stranger),
            # A signed lifetime of 0 (expires_ms - created_ms): over before it arrived. Carried
            # without a message expiry, so the server hands it over and the device must refuse it.
            "expired": made("EVIL4", created_ms=now, expires_ms=now).sign(key.private_key),
        }
        with QueueManager(fleet.home_db) as home:
            for request in bad.values():
                data = request.to_bytes()
                client.records.add(request, data)  # recorded as if sent, to see the device's answer
                home.put("DEV1.SYSTEM.ADMIN", Message(data, correlation_id=bytes.fromhex(request.request_id)))
        fleet.sync_once("DEV1")
        answers = client.wait_all([client.handle(r.request_id) for r in bad.values()], WAIT_S)
        reasons = {name: answers[r.request_id].reply for name, r in bad.items()}
        assert all(r is not None and r.rc == "failed" for r in reasons.values()), reasons
        assert "unsigned" in reasons["unsigned"].message  # type: ignore[union-attr]
        assert "does not verify" in reasons["tampered"].message  # type: ignore[union-attr]
        assert "not trusted" in reasons["untrusted"].message  # type: ignore[union-attr]
        assert reasons["expired"].message.startswith("expired before execution")  # type: ignore[union-attr]
        assert not {"EVIL1", "EVIL2", "EVIL3", "EVIL4"} & set(dev.queue_names())

    # -- a request whose expiry passes on the server is never executed, and said to be
    past = ManualClock(system_clock() - 10 * MINUTE)  # the operator's clock, ten minutes behind the server's
    with QueueManager(fleet.home_db, clock=past) as home, \
            AdminClient(home, operator_key=fleet.operator_key) as late:
        expiring = late.request("DEV1", "define-queue", "NEVER", expires_ms=past() + MINUTE)
        fleet.sync_once("DEV1")  # the server finds it expired (by its clock) and never hands it over
        past.advance(2 * MINUTE)
        assert expiring.status == "expired"
        assert [r.describe(past()) for r in late.pending()] == ["expired before delivery: never executed"]
    with fleet.store("DEV1") as dev:
        assert "NEVER" not in dev.queue_names() and dev.depth(ADMIN_QUEUE) == 0


def test_all_devices_through_the_command_line(fleet: Fleet) -> None:
    dev1 = fleet.device("DEV1")
    db2, key2 = fleet.devices["DEV2"]
    dev2 = subprocess.Popen([*EDGEQ, "sync", "--db", str(db2), "--server", fleet.url, "--key", str(key2),
                             "--interval", "0.2"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert dev1.ask("start 0.2") == "started"
        base = ["admin", "--db", str(fleet.home_db), "--key", str(fleet.operator_key), "--all-devices"]
        result = CliRunner().invoke(cli, [*base, "queue", "list", "--wait", "60s"], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        lines = [line.split(None, 2) for line in result.stdout.splitlines()]
        assert lines == [["DEVICE", "STATUS", "MESSAGE"], ["DEV1", "success", "inquire-all: done"],
                         ["DEV2", "success", "inquire-all: done"]]
        status = CliRunner().invoke(cli, [*base, "--json", "--wait", "60s", "sync-status"])
        assert status.exit_code == 0, status.output
        shown = json.loads(status.stdout)
        assert [(r["device"], r["rc"]) for r in shown] == [("DEV1", "success"), ("DEV2", "success")]
        assert all(r["reply"]["results"][0]["object"] is None for r in shown)  # the agent's item first
        replies = CliRunner().invoke(cli, ["admin", "--db", str(fleet.home_db), "replies", "--json"])
        assert sorted((r["device"], r["action"]) for r in json.loads(replies.stdout)) == [
            ("DEV1", "inquire-all"), ("DEV1", "inquire-sync"), ("DEV2", "inquire-all"),
            ("DEV2", "inquire-sync")]
        assert dev1.ask("stop") == "stopped"
    finally:
        dev2.send_signal(signal.SIGTERM)
        assert dev2.wait(30) == 0
        dev1.close()

"""More than one home server (docs/scaling.md): two servers, each its own store, each with
its own group of devices pushing over loopback; both journals exported. Each server
journals exactly its own group's messages, and together they hold every message the
fleet sent. :class:`Fleet` builds it; tests/pipeline/job/test_fleet.py runs one Spark job
over both exports and checks that its figures add up."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pyarrow.parquet as pq

from edgeq import Int32, ManualClock, Message, QueueManager
from edgeq.sync.agent.agent import SyncAgent
from edgeq.sync.pipeline.export.exporter import export_journal
from tests.sync.conftest import T0, LiveServer, Network, monotonic_of

#: each server's device group, and what each device pushes per round
GROUPS = {"HOMEA": {"A1": 120, "A2": 80}, "HOMEB": {"B1": 50, "B2": 70, "B3": 30}}
#: each device's clock, ahead of (or behind) the servers'
SKEWS = {"A1": 1_500, "A2": -700, "B1": 300, "B2": 0, "B3": -2_000, "A3": 900}
#: a device of HOMEA's group that moves to HOMEB in the first round while the confirm reply of
#: its last push to HOMEA is lost: it resends to HOMEB, and both servers accept the message
MOVER = "A3"
#: server-side expiries: the first device of each group also pushes this many short-lived alerts
ALERTS = 2


@dataclass
class Fleet:
    """Two home servers (HOMEA, HOMEB) serving on loopback, each its own store and devices.

    One clock is real time for everyone; each device's is set :data:`SKEWS` away from it.
    Per :meth:`round`: every device puts its readings (and one that expires on the device
    before the push, which its agent reports), pushes them to its home server, and each
    server's application consumes half of what arrived; the alerts expire on the servers.
    """

    root: Path
    clock: ManualClock = field(default_factory=lambda: ManualClock(T0))
    homes: dict[str, QueueManager] = field(default_factory=dict)
    servers: dict[str, LiveServer] = field(default_factory=dict)
    devices: dict[str, tuple[QueueManager, ManualClock, SyncAgent]] = field(default_factory=dict)
    #: device -> the uids of the readings it sent (each accepted by a server)
    sent: dict[str, set[str]] = field(default_factory=dict)
    #: the mover's uid, accepted by both servers
    moved: set[str] = field(default_factory=set)
    rounds: int = 0

    def start(self) -> Fleet:
        for name, group in GROUPS.items():
            home = self.homes[name] = QueueManager(self.root / f"{name}.db", name=name, clock=self.clock,
                                                   journal="server")
            home.define_queue("TELEMETRY")
            home.define_queue("ALERTS")
            self.servers[name] = LiveServer(home, self.clock).start()
            for device in group:  # each device is assigned to one home server
                self.devices[device] = self._device(device, name)
        return self

    def _device(self, name: str, server: str, client: httpx.Client | None = None,
                ) -> tuple[QueueManager, ManualClock, SyncAgent]:
        clock = ManualClock(self.clock() + SKEWS[name])
        qm = QueueManager(self.root / f"{name}.db", name=name, clock=clock, journal="device")
        qm.define_remote_queue("TELEMETRY", target_qmgr=server)
        qm.define_remote_queue("ALERTS", target_qmgr=server)
        self.sent[name] = set()
        return qm, clock, self._agent(qm, clock, server, client)

    def _agent(self, qm: QueueManager, clock: ManualClock, server: str, client: httpx.Client | None = None,
               ) -> SyncAgent:
        # the device's monotonic clock runs with real time: the servers' clock
        return SyncAgent(qm, self.servers[server].url, clock=clock, client=client,
                         monotonic=monotonic_of(self.clock))

    def tick(self, ms: int) -> None:
        """Real time passes alike for everyone."""
        self.clock.advance(ms)
        for _, clock, _ in self.devices.values():
            clock.advance(ms)

    def round(self) -> None:
        """One round of every device pushing, each server consuming and sweeping."""
        for group in GROUPS.values():
            for index, (device, n) in enumerate(group.items()):
                qm, _, _ = self.devices[device]
                uids = qm.put_many("TELEMETRY", [Message(b'{"t": %d}' % i) for i in range(n)])
                self.sent[device] |= {str(u) for u in uids}
                qm.put("TELEMETRY", Message(b'{"t": -1}', expiry=Int32(50)))  # expires here, reported
                if index == 0:
                    alerts = qm.put_many("ALERTS",
                                         [Message(b"alert", expiry=Int32(60_000)) for _ in range(ALERTS)])
                    self.sent[device] |= {str(u) for u in alerts}
        self.tick(100)
        for group in GROUPS.values():
            for index, (device, n) in enumerate(group.items()):
                report = self.devices[device][2].push_once()
                alerts = ALERTS if index == 0 else 0
                assert (report.ok and report.transmitted == n + alerts
                        and report.expiries_reported == 1), report
        if self.rounds == 0:
            self._move()
        for name, home in self.homes.items():  # the servers' applications: half of what arrived
            arrived = sum(GROUPS[name].values())
            assert len(home.get_many("TELEMETRY", arrived // 2)) == arrived // 2
        self.tick(120_000)
        for home in self.homes.values():
            assert home.sweep_expired("ALERTS") == ALERTS
        self.rounds += 1

    def _move(self) -> None:
        """The mover pushes one reading to HOMEA over loopback, and the confirm reply is lost:
        HOMEA accepted it, the device still holds it. The device is then re-homed at HOMEB
        with what it held, and the reading reaches HOMEB through the two-stage put the sync
        server makes (an agent pushes a remote queue only to the server it names, and a
        remote queue's target cannot be changed): both servers accept the same uid."""
        network = Network()
        network.lose_once.append("/v1/confirm")
        with httpx.Client(transport=network, timeout=10) as client:
            qm, clock, agent = self.devices[MOVER] = self._device(MOVER, "HOMEA", client)
            created = clock()
            (uid,) = qm.put_many("TELEMETRY", [Message(b'{"moved": 1}')])
            assert not agent.push_once().ok  # HOMEA confirmed it; the device never heard
            agent.close()
        network.close()
        self.devices[MOVER] = (qm, clock, self._agent(qm, clock, "HOMEA"))
        homeb = self.homes["HOMEB"]
        resent = Message(b'{"moved": 1}', uid=uid, created_ms=created)
        assert [r.status for r in homeb.put_each("TELEMETRY", [resent], confirm_id=1)] == ["stored"]
        done = homeb.confirm_put_each("TELEMETRY", [uid], device=MOVER, clock_offset_ms=SKEWS[MOVER])
        assert [c.status for c in done] == ["confirmed"]
        self.sent[MOVER].add(str(uid))
        self.moved.add(str(uid))

    def export(self, into: Path) -> dict[str, Path]:
        """Each server's journal exported into its own directory under ``into`` (incrementally)."""
        out: dict[str, Path] = {}
        for name in self.homes:
            out[name] = into / name
            export_journal(self.root / f"{name}.db", out[name])
        return out

    def close(self) -> None:
        for server in self.servers.values():
            server.stop()
        for qm, _, agent in self.devices.values():
            agent.close()
            qm.close()
        for home in self.homes.values():
            home.close()


@contextmanager
def fleet(root: Path) -> Iterator[Fleet]:
    """A started :class:`Fleet`, stopped on exit."""
    built = Fleet(root)
    try:
        yield built.start()
    finally:
        built.close()


def journal_rows(export: Path) -> list[dict[str, object]]:
    """Every row of an export directory, read with pyarrow."""
    rows: list[dict[str, object]] = []
    for part in sorted(export.glob("date=*/*.parquet")):
        rows += pq.read_table(part).to_pylist()
    return rows


def test_two_servers_two_groups_their_exported_journals_add_up(tmp_path: Path) -> None:
    with fleet(tmp_path) as built:
        built.round()
        exports = built.export(tmp_path / "journals")  # each server exports its own journal
        sent, moved = built.sent, built.moved
    per_server = {name: [r for r in journal_rows(path) if r["kind"] == "accepted"]
                  for name, path in exports.items()}

    for server_name, devices in GROUPS.items():
        rows = per_server[server_name]
        assert {r["device"] for r in rows} == {*devices, MOVER}  # its own group, and the mover
        for device in devices:
            assert sum(r["device"] == device for r in rows) == len(sent[device])
        assert [r["uid"] for r in rows if r["device"] == MOVER] == sorted(moved)
    every = [str(r["uid"]) for rows in per_server.values() for r in rows]
    assert set(every) == set().union(*sent.values())  # 0 lost, across both servers
    # Each message once, but the mover's: both servers accepted it (a duplicate across the fleet).
    assert len(every) == len(set(every)) + len(moved) and len(moved) == 1
    # The servers' own figures: half of each round's readings delivered, the alerts expired there.
    for server_name, path in exports.items():
        rows = journal_rows(path)
        assert sum(r["kind"] == "delivered" for r in rows) == sum(GROUPS[server_name].values()) // 2
        assert sum(r["kind"] == "expired" and r["side"] == "server" for r in rows) == ALERTS
        assert sum(r["kind"] == "expired" and r["side"] == "device" for r in rows) == len(GROUPS[server_name])

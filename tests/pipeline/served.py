"""A journal made the way production makes it: devices pushing to a real home server over
HTTP on loopback (offsets measured at the hello, device expiries reported by the agent), the
server's application consuming; for the pipeline's window and incremental tests."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from edgeq import Int32, ManualClock, Message, QueueManager
from edgeq.store.journal import JournalEntry
from edgeq.sync.agent.agent import SyncAgent
from edgeq.sync.messages import WireMessage
from tests.sync.conftest import LiveServer

T0 = 1_763_683_200_000
SKEWS = {"DEV1": 1_500, "DEV2": -700}


@dataclass
class Served:
    """The home server's store, its journal, and where the rounds split it."""

    db: Path
    entries: list[JournalEntry] = field(default_factory=list)
    #: the last journal id of each round
    round_ends: list[int] = field(default_factory=list)
    #: device uids put on the server without the two-stage put, then consumed: real gaps
    gaps: set[str] = field(default_factory=set)


def serve_rounds(
    root: Path, rounds: int, *, gap_round: int | None = None, export_after: dict[int, Path] | None = None,
) -> Served:
    """``rounds`` rounds: each device puts five orders and a short-lived reading and pushes;
    the server's application consumes the orders of the round *before* (so a delivery often
    comes in a later round than its acceptance). In ``gap_round`` a device message is also
    put on the server without the two-stage put, and consumed. After each round in
    ``export_after``, ``edgeq export`` runs into its directory, as cron would, while the
    server serves."""
    from edgeq.sync.pipeline.export.exporter import export_journal

    server_clock = ManualClock(T0)
    home = QueueManager(root / "home.db", name="HOME", clock=server_clock, journal="server")
    home.define_queue("ORDERS")
    home.define_queue("TELEMETRY")
    served = Served(root / "home.db")
    server = LiveServer(home, server_clock).start()
    devices: list[tuple[QueueManager, SyncAgent, ManualClock]] = []
    try:
        for name, skew in SKEWS.items():
            clock = ManualClock(T0 + skew)
            qm = QueueManager(root / f"{name}.db", name=name, clock=clock, journal="device")
            qm.define_remote_queue("ORDERS", target_qmgr="HOME")
            qm.define_remote_queue("TELEMETRY", target_qmgr="HOME")
            qm.define_queue("LOCAL")
            agent = SyncAgent(qm, server.url, clock=clock, monotonic=lambda: (server_clock() - T0) / 1000)
            devices.append((qm, agent, clock))

        def tick(ms: int) -> None:  # real time passes alike for everyone; only the clocks' settings differ
            server_clock.advance(ms)
            for _, _, clock in devices:
                clock.advance(ms)

        waiting = 0
        for round_no in range(rounds):
            for qm, _, _ in devices:
                for i in range(5):
                    qm.put("ORDERS", Message(b"order %d.%d" % (round_no, i)))
                    tick(40)
                qm.put("TELEMETRY", Message(b"t", expiry=Int32(50)))  # expires on the device
                tick(100)
            tick(700)
            if waiting:
                assert len(home.get_many("ORDERS", waiting)) == waiting  # last round's orders, delivered now
            for _, agent, _ in devices:
                report = agent.push_once()
                assert report.ok and report.transmitted == 5 and report.expiries_reported == 1
            waiting = 5 * len(devices)
            if round_no == gap_round:
                qm = devices[0][0]
                uid = qm.put("LOCAL", Message(b"not assured"))
                (m,) = qm.get_many("LOCAL", 1)
                home.put_each("ORDERS", [WireMessage.from_message(m).to_message(server_clock())])
                served.gaps.add(str(uid))
                waiting += 1
            tick(60_000)
            served.round_ends.append(home.journal_since(limit=1_000_000)[-1].id)
            if round_no in (export_after or {}):
                export_journal(served.db, (export_after or {})[round_no], batch_rows=40)
        served.entries = home.journal_since(limit=1_000_000)
    finally:
        server.stop()
        for qm, agent, _ in devices:
            agent.close()
            qm.close()
        home.close()
    return served

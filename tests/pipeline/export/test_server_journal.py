"""The pipeline over a journal made the way production makes it: devices pushing to a
real home server over HTTP (offsets measured at the hello, device expiries reported by
the agent), then `edgeq export`, then the Spark job; every figure against plain Python."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import SparkSession

from edgeq import Int32, ManualClock, Message, QueueManager
from edgeq.sync.agent.agent import SyncAgent
from edgeq.sync.pipeline.export.exporter import export_journal
from edgeq.sync.pipeline.job.runner import REPORTS, run_pipeline
from tests.pipeline import expected
from tests.pipeline.compare import check
from tests.sync.conftest import LiveServer

T0 = 1_763_683_200_000


def test_a_journal_made_through_the_http_server(spark: SparkSession, tmp_path: Path) -> None:
    server_clock = ManualClock(T0)
    home = QueueManager(tmp_path / "home.db", name="HOME", clock=server_clock, journal="server")
    home.define_queue("ORDERS")
    home.define_queue("TELEMETRY")
    server = LiveServer(home, server_clock).start()
    devices: list[tuple[QueueManager, SyncAgent, ManualClock]] = []
    try:
        for name, skew in (("DEV1", 1_500), ("DEV2", -700)):  # DEV1 runs ahead, DEV2 behind
            clock = ManualClock(T0 + skew)
            qm = QueueManager(tmp_path / f"{name}.db", name=name, clock=clock, journal="device")
            qm.define_remote_queue("ORDERS", target_qmgr="HOME")
            qm.define_remote_queue("TELEMETRY", target_qmgr="HOME")
            # Their monotonic clocks run with the (shared) passing of time the ManualClocks model.
            agent = SyncAgent(qm, server.url, clock=clock, monotonic=lambda: (server_clock() - T0) / 1000)
            devices.append((qm, agent, clock))
        def tick(ms: int) -> None:  # real time passes alike for everyone; only the clocks' settings differ
            server_clock.advance(ms)
            for _, _, clock in devices:
                clock.advance(ms)

        for round_no in range(3):
            for qm, _, _ in devices:
                for i in range(5):
                    qm.put("ORDERS", Message(b"order %d.%d" % (round_no, i)))
                    tick(40)
                qm.put("TELEMETRY", Message(b"t", expiry=Int32(50)))  # expires on the device
                tick(100)
            tick(700)  # the devices' messages wait a while before the push
            for _, agent, _ in devices:
                report = agent.push_once()
                assert report.ok and report.transmitted == 5 and report.expiries_reported == 1
            got = home.get_many("ORDERS", 4)  # the server's application consumes some
            assert len(got) == 4
        entries = home.journal_since(limit=100_000)
    finally:
        server.stop()
        for qm, agent, _ in devices:
            agent.close()
            qm.close()
        home.close()

    accepted = [e for e in entries if e.kind == "accepted"]
    # Each offset is the device's clock minus its lower bound of the server's clock (from its
    # round trips, widened by the 100 ppm drift allowance and rounded down): the skew, or 1 ms over.
    skew = {"DEV1": 1_500, "DEV2": -700}
    assert len(accepted) == 30 and {e.device for e in accepted} == set(skew)
    assert all(e.clock_offset_ms in (skew[e.device], skew[e.device] + 1) for e in accepted if e.device)
    assert len([e for e in entries if e.kind == "expired" and e.side == "device"]) == 6
    export_journal(tmp_path / "home.db", tmp_path / "journal")
    result = run_pipeline(spark, tmp_path / "journal", tmp_path / "reports")
    want = expected.all_reports(entries)
    for name in REPORTS:
        check(name, result.rows[name], want[name])
    latency = {(r["device"], r["queue"]): r for r in result.rows["latency"]}
    # Corrected by the offsets the server measured: nobody's latency is off by the skew.
    assert all(r["uncorrected"] == 0 for r in latency.values())
    # Real waits were 700 to 1,460 ms; uncorrected, DEV1's would read 1.5 s shorter and DEV2's 0.7 s longer.
    for key in (("DEV1", "ORDERS"), ("DEV2", "ORDERS")):
        assert latency[key]["min_ms"] >= 700 and latency[key]["max_ms"] <= 1_460

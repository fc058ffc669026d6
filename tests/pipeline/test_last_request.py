"""The report's "last seen" of a device is its last request to the server (issue 28, defect 3),
not its last journal row: a device that keeps syncing without a message accepted (its
puts refused, say) is not shown as gone. A real home server on loopback, a device
syncing, `edgeq export` and the Spark job."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import SparkSession

from edgeq import ManualClock, Message, QueueManager
from edgeq.sync.agent.agent import SyncAgent
from edgeq.sync.pipeline.export.exporter import export_journal
from edgeq.sync.pipeline.job.runner import run_pipeline
from edgeq.sync.pipeline.report.summary import summary_text
from tests.sync.conftest import LiveServer

T0 = 1_763_683_200_000
HALF_HOUR = 1_800_000


def test_last_seen_is_the_devices_last_request_not_its_last_journal_row(
    spark: SparkSession, tmp_path: Path
) -> None:
    clock = ManualClock(T0)
    home = QueueManager(tmp_path / "home.db", name="HOME", clock=clock, journal="server")
    home.define_queue("ORDERS")
    server = LiveServer(home, clock).start()
    device = QueueManager(tmp_path / "dev1.db", name="DEV1", clock=clock)
    agent = SyncAgent(device, server.url, clock=clock, monotonic=lambda: (clock() - T0) / 1000)
    try:
        device.define_remote_queue("ORDERS", target_qmgr="HOME")
        device.define_remote_queue("METRICS", target_qmgr="HOME")  # the server has none: refused
        device.put("ORDERS", Message(b"order"))
        assert agent.push_once().transmitted == 1  # accepted at T0: the journal's last row of DEV1
        clock.advance(HALF_HOUR)
        device.put("METRICS", Message(b"reading"))
        assert agent.push_once().refused == 1  # a request, and no journal row
        (record,) = home.devices()
        assert record.last_seen_ms == T0 + HALF_HOUR
    finally:
        agent.close()
        server.stop()
        device.close()
        home.close()

    export_journal(tmp_path / "home.db", tmp_path / "journal")
    result = run_pipeline(spark, tmp_path / "journal", tmp_path / "reports")

    (health,) = result.rows["device_health"]
    assert health["device"] == "DEV1"
    assert (health["first_seen_ms"], health["last_seen_ms"]) == (T0, T0 + HALF_HOUR)
    devices = summary_text(result).split("Devices: last seen")[1].split("\n\n")[0]
    assert "2025-11-21T00:30:00" in devices and "2025-11-21T00:00:00" not in devices

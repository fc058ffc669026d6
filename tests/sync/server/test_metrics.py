"""edgeq.sync.server.metrics: the flash budget as Prometheus metrics, from a real store's usage."""

from __future__ import annotations

from pathlib import Path

from edgeq import Message, QueueManager
from edgeq.sync.server.metrics import Metrics


def test_store_and_queue_bytes_and_overflow_discards_are_exported(tmp_path: Path) -> None:
    with QueueManager(tmp_path / "home.db", name="HOME", max_store_bytes=10_000) as qm:
        qm.define_queue("RING", max_depth=2, max_bytes=100, on_full="discard-oldest")
        qm.define_queue("PLAIN")
        for n in range(5):
            qm.put("RING", Message(b"x" * (n + 1)))
        qm.put("PLAIN", Message(b"abc"))
        text = Metrics().render(usage=qm.store_usage())
    lines = text.splitlines()
    assert "edgeq_store_bytes 12" in lines  # RING holds 4 + 5 bytes, PLAIN 3
    assert "edgeq_store_max_bytes 10000" in lines
    assert 'edgeq_queue_depth_messages{queue="RING"} 2' in lines
    assert 'edgeq_queue_depth_messages{queue="PLAIN"} 1' in lines
    assert 'edgeq_queue_bytes{queue="RING"} 9' in lines
    assert 'edgeq_queue_overflow_discards_total{queue="RING"} 3' in lines
    assert 'edgeq_queue_overflow_discards_total{queue="PLAIN"} 0' in lines
    assert "# TYPE edgeq_queue_overflow_discards_total counter" in lines
    assert [line for line in lines if line.startswith("edgeq_queue_max_bytes{")] == [
        'edgeq_queue_max_bytes{queue="RING"} 100']  # PLAIN has no max_bytes


def test_without_usage_nothing_of_the_store_is_rendered() -> None:
    assert "edgeq_store_bytes" not in Metrics().render()

"""Placeholder: the MQTT / store-and-forward sync comparison comes with ``edgeq.sync``."""

from __future__ import annotations

from benchmarks.results import Result
from benchmarks.runner import Context

__all__ = ["NOTE", "run"]

NOTE = "sync: not yet measured (needs edgeq.sync)"


def run(ctx: Context) -> list[Result]:
    """No numbers: one placeholder row, so the gap stays visible in every report."""
    return [Result("sync", "edgeq", "placeholder", note=NOTE)]

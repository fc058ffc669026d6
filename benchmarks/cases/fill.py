"""Filling a template queue (child side; untimed set-up for the other cases)."""

from __future__ import annotations

import time
from typing import Any

from benchmarks.cases.common import describe, open_adapter, payloads

__all__ = ["child_fill"]

_CHUNK = 100_000  # payloads built per step, to bound the filler's memory


def child_fill(spec: dict[str, Any]) -> dict[str, Any]:
    """Fill ``spec["dir"]`` with ``spec["count"]`` messages, the library's fastest way."""
    start = time.perf_counter()
    adapter = open_adapter(spec)
    count, size = int(spec["count"]), int(spec["payload_bytes"])
    for first in range(0, count, _CHUNK):
        batch = payloads(min(_CHUNK, count - first), size, start=first)
        if spec.get("expiring"):
            adapter.fill_expiring(batch, int(spec["ttl_ms"]))
        else:
            adapter.fill(batch)
    depth = adapter.depth() if not spec.get("expiring") else count
    info = describe(adapter)
    adapter.close()
    if depth != count:
        raise RuntimeError(f"{spec['lib']}: filled {count} messages but depth reports {depth}")
    return {"metrics": {"seconds": time.perf_counter() - start}, "info": info}

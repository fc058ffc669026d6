"""The bridges as operators see them (``edgeq bridge status``, ``edgeq sync status``, ``/metrics``, the
console): each definition with the state its runner last stored and its backlog."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from edgeq.sync.bridges.book import bridge_definitions
from edgeq.sync.bridges.status import BridgeState, pid_alive, read_states

__all__ = ["BridgeView", "bridge_views"]


@dataclass(frozen=True, slots=True)
class BridgeView:
    """A defined bridge: ``running`` (the process that wrote its state is alive), ``connected`` (and
    running), ``backlog`` (out: its queue's depth; in: None, the broker holds it)."""

    name: str
    kind: str
    queue: str
    topics: list[str]
    running: bool
    connected: bool
    backlog: int | None
    state: BridgeState = field(default_factory=BridgeState)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "queue": self.queue, "topics": self.topics,
                "running": self.running, **asdict(self.state), "connected": self.connected,
                "backlog": self.backlog}


def bridge_views(path: str | Path, depths: Mapping[str, int]) -> list[BridgeView]:
    """Every bridge defined in the store at ``path``, by name; ``depths``: its queues' depths by name."""
    defined = bridge_definitions(path)
    states = read_states(path) if defined else {}
    out = []
    for d in defined:
        state = states.get(d.name, BridgeState())
        running = state.updated_ms is not None and pid_alive(state.pid)
        backlog = depths.get(d.queue) if d.kind.endswith("-out") else None
        out.append(BridgeView(d.name, d.kind, d.queue, [str(t) for t in d.config.get("topics", [])],
                              running, running and state.connected, backlog, state))
    return out

"""A bridge definition: its name, plugin kind, queue and the kind's config, stored as JSON."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from edgeq.sync.bridges.errors import BridgeConfigError

__all__ = ["BridgeDefinition"]


@dataclass(frozen=True, slots=True)
class BridgeDefinition:
    """A bridge: its name, plugin kind, queue, the kind's config, and the confirm id it gets under."""

    name: str
    kind: str
    queue: str
    config: Mapping[str, Any] = field(default_factory=dict)
    confirm_id: int = 1

    def to_json(self) -> str:
        return json.dumps({"name": self.name, "kind": self.kind, "queue": self.queue,
                           "config": dict(self.config), "confirm_id": self.confirm_id}, separators=(",", ":"))

    @classmethod
    def from_json(cls, key: str, text: str) -> BridgeDefinition:
        """The definition stored under ``key``; a damaged one says how to replace it."""
        try:
            raw = json.loads(text)
            return cls(raw["name"], raw["kind"], raw["queue"], raw["config"], raw["confirm_id"])
        except (ValueError, KeyError, TypeError) as exc:
            raise BridgeConfigError(
                f"the stored bridge definition {key!r} is damaged ({exc}): delete it with "
                "`edgeq bridge delete` and define the bridge again"
            ) from exc

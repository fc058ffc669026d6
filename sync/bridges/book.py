"""Defining, listing and deleting bridges, kept in the store (edgeq.sync.bridges.stored)."""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgeq.names import check_name
from edgeq.sync.bridges.definition import BridgeDefinition
from edgeq.sync.bridges.errors import BridgeConfigError, BridgeNotFound
from edgeq.sync.bridges.registry import load_bridge_class
from edgeq.sync.bridges.stored import DEFINITION_PREFIX, STATE_PREFIX, meta, read_meta

if TYPE_CHECKING:
    from edgeq.manager import QueueManager

__all__ = ["bridge_definition", "bridge_definitions", "define_bridge", "delete_bridge"]


def define_bridge(
    qm: QueueManager, name: str, kind: str, queue: str, config: Mapping[str, Any], *, replace: bool = False
) -> BridgeDefinition:
    """Check and keep a bridge of plugin ``kind`` on ``queue``; an existing one only with ``replace``."""
    check_name(name, "bridge name")
    if queue not in qm.queue_names():
        raise BridgeConfigError(
            f"bridge {name!r}: no queue {queue!r} on queue manager {qm.name}: define it first")
    checked = load_bridge_class(kind).check_config(dict(config))
    key = DEFINITION_PREFIX + name
    with meta(qm.path) as tx:
        old = tx.meta_items(key).get(key)
        if old is not None and not replace:
            raise BridgeConfigError(f"bridge {name!r} is already defined: delete it first, or use replace")
        confirm_id = (BridgeDefinition.from_json(key, old).confirm_id if old is not None
                      else secrets.randbelow(2**31 - 2) + 1)
        found = BridgeDefinition(name, kind, queue, checked, confirm_id)
        tx.set_meta({key: found.to_json()})
    return found


def delete_bridge(path: str | Path, name: str) -> None:
    """Forget a bridge and its status (its queue and messages stay)."""
    key = DEFINITION_PREFIX + name
    with meta(path) as tx:
        if key not in tx.meta_items(key):
            raise BridgeNotFound(f"no bridge named {name!r} is defined in {path}: see `edgeq bridge list`")
        tx.set_meta({key: None, STATE_PREFIX + name: None})


def bridge_definitions(path: str | Path) -> list[BridgeDefinition]:
    """Every bridge defined in the store, by name."""
    items = read_meta(path, DEFINITION_PREFIX)
    return [BridgeDefinition.from_json(key, text) for key, text in sorted(items.items())]


def bridge_definition(path: str | Path, name: str) -> BridgeDefinition:
    found = [d for d in bridge_definitions(path) if d.name == name]
    if not found:
        raise BridgeNotFound(f"no bridge named {name!r} is defined in {path}: see `edgeq bridge list`")
    return found[0]

"""Finding a bridge kind by name in the ``edgeq.bridges`` entry-point group (as rules are found in
``edgeq.rules``); a plugin loads when a bridge is defined or run, never at import."""

from __future__ import annotations

import inspect
from importlib.metadata import entry_points

from edgeq.sync.bridges.base import Bridge
from edgeq.sync.bridges.errors import BridgeConfigError

__all__ = ["GROUP", "installed_bridges", "load_bridge_class"]

#: The entry-point group bridge plugins register their classes under.
GROUP = "edgeq.bridges"
#: The extra that installs a missing top-level package the built-in kinds import.
_EXTRAS = {"paho": "mqtt", "nats": "nats"}


def installed_bridges() -> dict[str, str]:
    """Each installed kind and the target it loads, e.g. ``{"mqtt-in": "edgeq.sync.bridges...."}``."""
    return {ep.name: ep.value for ep in entry_points(group=GROUP)}


def load_bridge_class(kind: str) -> type[Bridge]:
    """The bridge class registered as ``kind``."""
    found = {ep.name: ep for ep in entry_points(group=GROUP)}
    ep = found.get(kind)
    if ep is None:
        known = ", ".join(sorted(found)) or "none"
        raise BridgeConfigError(f"no bridge kind {kind!r} is installed (installed: {known})")
    try:
        obj = ep.load()
    except ImportError as exc:
        extra = _EXTRAS.get((exc.name or "").partition(".")[0], "mqtt")
        raise BridgeConfigError(
            f"bridge kind {kind!r} needs a package that is missing ({exc}): "
            f"install the extra: pip install 'edgeq[{extra}]'"
        ) from exc
    if not (inspect.isclass(obj) and issubclass(obj, Bridge)):
        raise BridgeConfigError(f"bridge kind {kind!r} resolves to {obj!r}, not a Bridge subclass")
    return obj

"""What can go wrong with a bridge: its definition, its plugin, its broker, or what the broker sent."""

from __future__ import annotations

from edgeq.errors import EdgeqError, InvalidArgument

__all__ = ["BridgeConfigError", "BridgeError", "BridgeNotFound", "BrokerUnavailable", "PublishRefused"]


class BridgeError(EdgeqError):
    """Base class of the bridges' errors."""


class BridgeConfigError(BridgeError, InvalidArgument):
    """A bridge definition, kind or credential that cannot be used."""


class BridgeNotFound(BridgeError, LookupError):
    """No bridge of that name is defined in this store."""


class BrokerUnavailable(BridgeError):
    """The broker could not be reached, or the connection dropped."""


class PublishRefused(BridgeError):
    """A message from the broker (an MQTT PUBLISH, a JetStream message) that the in-bridge will not put on
    its queue (it goes to the DLQ)."""

"""The MQTT 5 out-bridge: an assured get from the queue, a PUBLISH of what is left of its expiry, and
the get confirmed only after the broker's PUBACK or PUBCOMP (docs/bridges.md)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from edgeq.sync.bridges.base import Bridge
from edgeq.sync.bridges.broker import BrokerSettings, check_broker_config, reconnecting
from edgeq.sync.bridges.connection import Connection
from edgeq.sync.bridges.definition import BridgeDefinition
from edgeq.sync.bridges.errors import BridgeConfigError, BridgeError
from edgeq.sync.bridges.mapping import outgoing
from edgeq.sync.bridges.outbox import Outbox

if TYPE_CHECKING:
    from edgeq.manager import QueueManager
    from edgeq.sync.bridges.status import StatusBoard

__all__ = ["MqttOutBridge"]

_OWN: dict[str, Any] = {"topics": None, "qos": 1}
_POLL_S = 0.1
#: How long a bridge asked to stop still waits for the broker to acknowledge the message in hand.
_STOP_GRACE_S = 5.0


class MqttOutBridge(Bridge):
    """Forward the queue's messages to one topic of a broker, at QoS 1 or 2."""

    direction = "out"

    @classmethod
    def check_config(cls, config: Mapping[str, Any]) -> dict[str, Any]:
        out = check_broker_config(config, _OWN)
        topics = out["topics"]
        one = isinstance(topics, list) and len(topics) == 1 and isinstance(topics[0], str) and topics[0]
        if not one or any(c in topics[0] for c in "+#"):
            raise BridgeConfigError(
                f"an mqtt-out bridge publishes to one topic without wildcards, not {topics!r}")
        if out["qos"] not in (1, 2):
            raise BridgeConfigError(f"an mqtt-out bridge publishes at QoS 1 or 2, not {out['qos']!r}")
        return out

    def __init__(self, definition: BridgeDefinition, qm: QueueManager, board: StatusBoard) -> None:
        super().__init__(definition, qm, board)
        d = self.definition
        self.settings = BrokerSettings.from_config(d.config)
        self.topic, self.qos = str(d.config["topics"][0]), int(d.config["qos"])
        self.outbox = Outbox(self)

    def run(self, stop: threading.Event) -> None:
        self.board.count("duplicates", self.outbox.undo_locked())  # each may have reached the broker
        connections = reconnecting(stop, lambda: Connection(self.settings, self.client_id, clean_start=True),
                                   self.board, self.settings.retry_max_s,
                                   f"; the messages wait on queue {self.definition.queue}")
        with contextlib.closing(connections):
            for conn in connections:
                while not stop.is_set() and not conn.lost.is_set():
                    self._forward_one(conn, stop)

    def _forward_one(self, conn: Connection, stop: threading.Event) -> None:
        got = self.outbox.get(_POLL_S)
        if got is None:
            return
        self.step("out.got")
        try:
            publish = outgoing(got.message, got.before_ms, got.after_ms)
        except BridgeError as exc:
            self.outbox.put_back(got.uid, f"cannot be published ({exc})", count_backout=True)
            return
        if publish is None:  # under a second left: kept locked, never published, discarded once expired
            self.outbox.hold(got)
            return
        props = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
        for name, value in publish.properties.items():
            setattr(props, name, value)
        info = conn.client.publish(self.topic, publish.payload, self.qos, properties=props)
        self.step("out.sent")
        give_up: float | None = None  # once asked to stop, the acknowledgement is waited for a while
        try:
            while not info.is_published():
                if give_up is None and stop.is_set():
                    give_up = time.monotonic() + _STOP_GRACE_S
                if conn.lost.is_set() or (give_up is not None and time.monotonic() > give_up):
                    raise RuntimeError("the connection ended first")
                info.wait_for_publish(_POLL_S)  # woken by the PUBACK/PUBCOMP, or after _POLL_S
        except (RuntimeError, ValueError) as exc:  # paho's: not sent, or not confirmed
            self.outbox.put_back(got.uid, f"was not confirmed by the broker ({exc})")
            return
        self.step("out.acknowledged")
        refused = conn.refused.pop(info.mid, None)
        if refused is not None:
            self.outbox.put_back(got.uid, f"the broker refused it ({refused})", count_backout=True)
            return
        self.outbox.confirm(got.uid)
        self.step("out.confirmed")

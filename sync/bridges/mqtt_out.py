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

from edgeq.errors import ConfirmIdNotFound
from edgeq.sync.bridges.base import Bridge
from edgeq.sync.bridges.broker import BrokerSettings, check_broker_config
from edgeq.sync.bridges.connection import Connection, reconnecting
from edgeq.sync.bridges.definition import BridgeDefinition
from edgeq.sync.bridges.errors import BridgeConfigError, BridgeError
from edgeq.sync.bridges.mapping import outgoing
from edgeq.uid import MessageUID

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
        self.client_id = str(d.config.get("client_id") or f"edgeq-{self.qm.name}-{d.name}")
        self.topic, self.qos = str(d.config["topics"][0]), int(d.config["qos"])
        #: When the messages too close to expiry to publish, left locked, will have expired (its clock).
        self._expiring: list[int] = []

    def run(self, stop: threading.Event) -> None:
        self._undo_locked()
        connections = reconnecting(stop, lambda: Connection(self.settings, self.client_id, clean_start=True),
                                   self.board, self.settings.retry_max_s,
                                   f"; the messages wait on queue {self.definition.queue}")
        with contextlib.closing(connections):
            for conn in connections:
                while not stop.is_set() and not conn.lost.is_set():
                    self._forward_one(conn, stop)

    def _undo_locked(self) -> None:
        """Put back what a run that crashed had got but not confirmed: it is published again (same uid)."""
        d = self.definition
        try:
            n = self.qm.undo(d.queue, d.confirm_id, count_backout=False)
        except ConfirmIdNotFound:
            return
        self.board.count("duplicates", n)  # each may have reached the broker before the crash

    def _forward_one(self, conn: Connection, stop: threading.Event) -> None:
        d = self.definition
        before = self.qm.now_ms()  # no later than the get: the deadline below is never extended
        if self._expiring and self._expiring[0] <= before:
            self.qm.activate(d.queue)  # discards the expired ones left locked, telling the queue's rules
            self._expiring = [t for t in self._expiring if t > before]
        message = self.qm.get(d.queue, confirm_id=d.confirm_id, wait=_POLL_S)
        if message is None or message.uid is None:
            return
        self.step("out.got")
        after = self.qm.now_ms()
        try:
            publish = outgoing(message, before, after)
        except BridgeError as exc:
            self._put_back(message.uid, f"cannot be published ({exc})", count_backout=True)
            return
        if publish is None:  # under a second left: kept locked, never published, discarded once expired
            self.board.count("skipped")
            self._expiring = sorted([*self._expiring, after + (message.remaining_expiry_ms or 0)])
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
            self._put_back(message.uid, f"was not confirmed by the broker ({exc})")
            return
        self.step("out.acknowledged")
        refused = conn.refused.pop(info.mid, None)
        if refused is not None:
            self._put_back(message.uid, f"the broker refused it ({refused})", count_backout=True)
            return
        self.qm.confirm_get(d.queue, message.uid)
        self.board.count("forwarded")
        self.step("out.confirmed")

    def _put_back(self, uid: MessageUID, why: str, *, count_backout: bool = False) -> None:
        d = self.definition
        self.board.error(f"message {uid} {why}: put back on queue {d.queue}")
        with contextlib.suppress(ConfirmIdNotFound):  # it expired meanwhile: its rules were told
            self.qm.undo(d.queue, d.confirm_id, count_backout=count_backout, uids=[uid])

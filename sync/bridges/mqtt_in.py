"""The MQTT 5 in-bridge: a persistent session subscribed to topic filters, each PUBLISH put on the
queue, acknowledged to the broker only after the put is durable (docs/bridges.md)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import closing
from typing import TYPE_CHECKING, Any

from paho.mqtt import _packet
from paho.mqtt.client import Client, MQTTMessage, topic_matches_sub
from paho.mqtt.enums import MQTTErrorCode
from paho.mqtt.properties import Properties

from edgeq.errors import QueueFull
from edgeq.message import Message
from edgeq.results import PutResult
from edgeq.sync.bridges.base import Bridge
from edgeq.sync.bridges.broker import BrokerSettings, check_broker_config, reconnecting
from edgeq.sync.bridges.connection import BridgeClient, Connection
from edgeq.sync.bridges.definition import BridgeDefinition
from edgeq.sync.bridges.errors import BridgeConfigError, BridgeError, PublishRefused
from edgeq.sync.bridges.mapping import TOPIC, incoming_message, incoming_uid
from edgeq.uid import MessageUID

if TYPE_CHECKING:
    from edgeq.manager import QueueManager
    from edgeq.sync.bridges.status import StatusBoard

__all__ = ["MqttInBridge"]

log = logging.getLogger("edgeq.bridges")

_OWN: dict[str, Any] = {"topics": None, "qos": 2, "session_expiry_s": 7 * 86_400,
                        "max_payload_bytes": 1 << 20}
_PROPERTY_NAMES = ("MessageExpiryInterval", "ContentType", "CorrelationData", "ResponseTopic", "UserProperty",
                   "PayloadFormatIndicator")


class _StoreFirstClient(BridgeClient):
    """paho's client receiving QoS 2 as MQTT 5 lets a receiver that stores first: the message is handed
    over at its PUBLISH, :meth:`ack` sends PUBREC (after the put), and a PUBREL is answered PUBCOMP."""

    def _handle_publish(self) -> MQTTErrorCode:
        header, packet = self._in_packet["command"], self._in_packet["packet"]
        if (header & 0x06) >> 1 != 2:
            return super()._handle_publish()
        result = _packet.decode_publish(header, packet, self._protocol)
        message = MQTTMessage(mid=result.mid, topic=result.topic)
        message.dup, message.qos, message.retain = result.dup, result.qos, result.retain
        message.properties, message.payload = result.properties, result.payload
        message.timestamp = time.monotonic()
        self._handle_on_message(message)
        return MQTTErrorCode.MQTT_ERR_SUCCESS

    def _handle_pubrel(self) -> MQTTErrorCode:
        result = _packet.decode_pubrel(self._in_packet["command"], self._in_packet["packet"], self._protocol)
        return self._send_pubcomp(result.mid)  # stored before its PUBREC: nothing left to do

    def ack(self, mid: int, qos: int) -> MQTTErrorCode:
        return self._send_pubrec(mid) if qos == 2 else super().ack(mid, qos)


def _properties(props: Properties | None) -> dict[str, Any]:
    return {} if props is None else {n: getattr(props, n) for n in _PROPERTY_NAMES if hasattr(props, n)}


class MqttInBridge(Bridge):
    """Subscribe to ``topics`` (filters) on a broker and put every PUBLISH on the queue."""

    direction = "in"

    @classmethod
    def check_config(cls, config: Mapping[str, Any]) -> dict[str, Any]:
        out = check_broker_config(config, _OWN)
        topics = out["topics"]
        if not isinstance(topics, list) or not topics or not all(isinstance(t, str) and t for t in topics):
            raise BridgeConfigError(
                "an mqtt-in bridge needs topics: a list of topic filters, e.g. ['sensors/#']")
        if out["qos"] not in (1, 2):
            raise BridgeConfigError(f"an mqtt-in bridge subscribes at QoS 1 or 2, not {out['qos']!r}")
        for key in ("session_expiry_s", "max_payload_bytes"):
            if isinstance(out[key], bool) or not isinstance(out[key], int) or out[key] < 1:
                raise BridgeConfigError(f"{key} must be a positive int, not {out[key]!r}")
        return out

    def __init__(self, definition: BridgeDefinition, qm: QueueManager, board: StatusBoard) -> None:
        super().__init__(definition, qm, board)
        self.settings = BrokerSettings.from_config(self.definition.config)

    def run(self, stop: threading.Event) -> None:
        with closing(reconnecting(stop, self._connect, self.board, self.settings.retry_max_s)) as connections:
            for conn in connections:
                while not stop.is_set() and not conn.lost.wait(0.1):
                    pass  # paho's thread puts and acknowledges (_received)

    def _connect(self) -> Connection:
        cfg = self.definition.config
        conn = Connection(self.settings, self.client_id, clean_start=False,
                          session_expiry_s=cfg["session_expiry_s"], on_message=self._received,
                          client_cls=_StoreFirstClient, manual_ack=True)
        if not conn.session_present:  # the first connection, or a broker that lost or expired the session
            log.info("bridge %s: the broker holds no session for client id %s: a new one starts (what a "
                     "lost one held is gone)", self.definition.name, self.client_id)
        try:
            conn.subscribe(list(cfg["topics"]), cfg["qos"])
        except BridgeError:
            conn.close()
            raise
        return conn

    def _received(self, client: Client, message: MQTTMessage) -> None:
        """Put one PUBLISH (or dead-letter it), then acknowledge it; runs in paho's network thread."""
        received = self.qm.now_ms()
        self.step("in.received")
        props = _properties(message.properties)
        topic = message._topic.decode("utf-8", "replace")  # paho's own check raises on bad UTF-8
        try:
            self._put(message, topic, props, received)
        except Exception as exc:  # the store refused (full, closed): not acknowledged, so redelivered
            self.board.error(f"could not store a PUBLISH on {topic!r} ({type(exc).__name__}: {exc}); "
                             "reconnecting to have it again")
            client.disconnect()
            return
        self.step("in.stored")
        client.ack(message.mid, message.qos)
        self.step("in.acked")

    def _put(self, message: MQTTMessage, topic: str, props: dict[str, Any], received: int) -> None:
        d = self.definition
        payload = bytes(message.payload)
        try:
            if message.retain:
                self.board.count("skipped")
                log.info("bridge %s: a retained PUBLISH on %r is not stored as live", d.name, topic)
                return
            if not any(topic_matches_sub(t, topic) for t in d.config["topics"]):
                raise PublishRefused(f"its topic {topic!r} maps to no queue (the bridge's filters: "
                                     f"{d.config['topics']})")
            if len(payload) > d.config["max_payload_bytes"]:
                raise PublishRefused(f"its payload is {len(payload)} bytes, over the bridge's "
                                     f"max_payload_bytes {d.config['max_payload_bytes']}")
            message.topic  # noqa: B018 - raises on a topic that is not UTF-8
            result = self._put_once(d.queue, message, topic, payload, props,
                                    lambda uid: incoming_message(topic, payload, props, received, uid))
        except (PublishRefused, UnicodeDecodeError) as exc:
            return self._refuse(message, topic, payload, props, received, str(exc))
        if isinstance(result.error, QueueFull):
            raise result.error  # not acknowledged: the broker keeps it until the queue has room
        if result.status == "refused":
            return self._refuse(message, topic, payload, props, received, result.detail)
        self.board.count({"duplicate": "duplicates", "expired": "skipped"}.get(result.status, "forwarded"))

    def _put_once(self, queue: str, message: MQTTMessage, topic: str, payload: bytes, props: dict[str, Any],
                  build: Callable[[MessageUID], Message]) -> PutResult:
        """Put what ``build`` makes of a PUBLISH under its uid: a redelivery (DUP) of one put already is
        a duplicate, a first delivery identical to an earlier one a distinct message (a salted uid)."""
        salt = 0
        while True:
            uid = incoming_uid(self.origin, message.mid, topic, payload, props, salt)
            result = self.qm.put_each(queue, [build(uid)])[0]
            if result.status != "duplicate" or message.dup:
                return result
            salt += 1

    def _refuse(self, message: MQTTMessage, topic: str, payload: bytes, props: dict[str, Any], received: int,
                why: str) -> None:
        """Put a refused PUBLISH on the dead-letter queue, saying why; raise if it cannot go there."""
        self.dead_letter(lambda dlq, build: self._put_once(dlq, message, topic, payload, props, build),
                         payload, received, why, {TOPIC: topic}, "a PUBLISH from the broker")

"""The MQTT 5 in-bridge: a persistent session subscribed to topic filters, each PUBLISH put on the
queue, acknowledged to the broker only after the put is durable (docs/bridges.md)."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from contextlib import closing
from dataclasses import dataclass
from queue import Empty, Full, Queue
from typing import TYPE_CHECKING, Any

from paho.mqtt import _packet
from paho.mqtt.client import Client, MQTTMessage, topic_matches_sub
from paho.mqtt.enums import MQTTErrorCode
from paho.mqtt.properties import Properties

from edgeq.errors import QueueFull
from edgeq.message import Message
from edgeq.results import PutResult
from edgeq.sync.bridges.base import PUT_COUNTERS, Bridge
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
                        "max_payload_bytes": 1 << 20, "batch": 64, "linger_ms": 5}
#: The largest batch, and the longest linger (ms); the Receive Maximum announced is twice the batch.
_LIMITS = {"batch": 1024, "linger_ms": 1000}
#: How long the bridge's thread waits for a first PUBLISH before looking at the connection again.
_IDLE_S = 0.1
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


@dataclass(slots=True)
class _Publish:
    """A PUBLISH of a batch, read once: its topic (bad UTF-8 replaced), payload, properties, when received."""

    message: MQTTMessage
    topic: str
    payload: bytes
    props: dict[str, Any]
    received: int


class _Inbox:
    """What paho's network thread received, for the bridge's thread to store: at most the Receive
    Maximum; when full the network thread waits (reading no more), whatever the broker sends."""

    def __init__(self, size: int) -> None:
        self.queue: Queue[MQTTMessage] = Queue(size)
        #: Set when the connection ends: a PUBLISH still waiting for room is dropped (redelivered).
        self.closed = threading.Event()

    def put(self, message: MQTTMessage) -> None:
        while not self.closed.is_set():
            try:
                return self.queue.put(message, timeout=_IDLE_S)
            except Full:
                pass


def _properties(props: Properties | None) -> dict[str, Any]:
    return {} if props is None else {n: getattr(props, n) for n in _PROPERTY_NAMES if hasattr(props, n)}


class MqttInBridge(Bridge):
    """Subscribe to ``topics`` (filters) on a broker and put every PUBLISH on the queue, a batch at a time."""

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
        for key, top in _LIMITS.items():
            low = 1 if key == "batch" else 0
            if isinstance(out[key], bool) or not isinstance(out[key], int) or not low <= out[key] <= top:
                raise BridgeConfigError(f"{key} must be an int from {low} to {top}, not {out[key]!r}")
        return out

    def __init__(self, definition: BridgeDefinition, qm: QueueManager, board: StatusBoard) -> None:
        super().__init__(definition, qm, board)
        self.settings = BrokerSettings.from_config(self.definition.config)
        self._inbox = _Inbox(1)  # the current connection's (_connect)

    def run(self, stop: threading.Event) -> None:
        with closing(reconnecting(stop, self._connect, self.board, self.settings.retry_max_s)) as connections:
            for conn in connections:
                inbox = self._inbox
                try:
                    while not stop.is_set() and not conn.lost.is_set():
                        batch = self._collect(inbox.queue)
                        if batch and not self._store(conn.client, batch):
                            break  # the rest is not acknowledged: the broker sends it again
                finally:
                    inbox.closed.set()  # before the connection is closed (its network thread joined)

    def _connect(self) -> Connection:
        cfg = self.definition.config
        inbox = _Inbox(2 * cfg["batch"])
        conn = Connection(self.settings, self.client_id, clean_start=False,
                          session_expiry_s=cfg["session_expiry_s"], on_message=lambda _c, m: inbox.put(m),
                          client_cls=_StoreFirstClient, manual_ack=True, accept_unacked=inbox.queue.maxsize)
        if not conn.session_present:  # the first connection, or a broker that lost or expired the session
            log.info("bridge %s: the broker holds no session for client id %s: a new one starts (what a "
                     "lost one held is gone)", self.definition.name, self.client_id)
        try:
            conn.subscribe(list(cfg["topics"]), cfg["qos"])
        except BridgeError:
            inbox.closed.set()
            conn.close()
            raise
        self._inbox = inbox
        return conn

    def _collect(self, inbox: Queue[MQTTMessage]) -> list[MQTTMessage]:
        """Up to ``batch`` PUBLISHes, waiting at most ``linger_ms`` after the first was received."""
        try:
            batch = [inbox.get(timeout=_IDLE_S)]
        except Empty:
            return []
        cfg = self.definition.config
        deadline = batch[0].timestamp + cfg["linger_ms"] / 1000
        try:
            while len(batch) < cfg["batch"]:
                batch.append(inbox.get(timeout=max(0.0, deadline - time.monotonic())))
        except Empty:
            pass
        return batch

    def _store(self, client: Client, batch: list[MQTTMessage]) -> bool:
        """Put a batch in one transaction and dead-letter its refused PUBLISHes, then acknowledge them in
        order; False if one could not be stored (it and those after it are left to be redelivered)."""
        now, mono, done, counts = self.qm.now_ms(), time.monotonic(), 0, Counter[str]()
        got = [_Publish(m, m._topic.decode("utf-8", "replace"), bytes(m.payload), _properties(m.properties),
                        now - int((mono - m.timestamp) * 1000)) for m in batch]  # paho's .topic raises
        for _ in got:
            self.step("in.received")
        try:
            why = [self._refusal(p) for p in got]
            built = {i: self._build(p, i, why) for i, p in enumerate(got) if why[i] is None}
            fresh = {i: m for i, m in built.items() if m is not None}
            put = self._put_salted(self.definition.queue, [got[i] for i in fresh], list(fresh.values()),
                                   self._message)
            results = dict(zip(fresh, put, strict=True))
            for p in got:
                counts[self._settle(p, why[done], results.get(done))] += 1
                done += 1
        except Exception as exc:  # the store refused (full, closed): not acknowledged, so redelivered
            self.board.error(f"could not store a PUBLISH on {got[done].topic!r} ({type(exc).__name__}: "
                             f"{exc}); reconnecting to have it again")
        for what, n in counts.items():
            if what:
                self.board.count(what, n)
        self.step("in.stored")
        for p in got[:done]:
            client.ack(p.message.mid, p.message.qos)
            self.step("in.acked")
        return done == len(got)

    def _refusal(self, p: _Publish) -> str | None:
        """Why a PUBLISH is refused before it is built, or None ("" for a retained one, never stored live)."""
        d = self.definition
        if p.message.retain:
            return ""
        if not any(topic_matches_sub(t, p.topic) for t in d.config["topics"]):
            return f"its topic {p.topic!r} maps to no queue (the bridge's filters: {d.config['topics']})"
        if len(p.payload) > d.config["max_payload_bytes"]:
            return (f"its payload is {len(p.payload)} bytes, over the bridge's max_payload_bytes "
                    f"{d.config['max_payload_bytes']}")
        try:
            p.message.topic  # noqa: B018 - raises on a topic that is not UTF-8
        except UnicodeDecodeError as exc:
            return str(exc)
        return None

    def _build(self, p: _Publish, i: int, why: list[str | None]) -> Message | None:
        """The message the ``i``th PUBLISH becomes (salt 0); None, why it is refused put in ``why``."""
        try:
            return self._message(p, 0)
        except PublishRefused as exc:
            why[i] = str(exc)
            return None

    def _message(self, p: _Publish, salt: int) -> Message:
        return incoming_message(p.topic, p.payload, p.props, p.received, self._uid(p, salt))

    def _uid(self, p: _Publish, salt: int) -> MessageUID:
        return incoming_uid(self.origin, p.message.mid, p.topic, p.payload, p.props, salt)

    def _settle(self, p: _Publish, why: str | None, result: PutResult | None) -> str:
        """The counter a PUBLISH of a stored batch adds to ("" once dead-lettered, counted there);
        raise if it must stay with the broker."""
        name = self.definition.name
        if why == "":
            log.info("bridge %s: a retained PUBLISH on %r is not stored as live", name, p.topic)
            return "skipped"
        if why is not None:
            self._refuse(p, why)
            return ""
        assert result is not None  # every PUBLISH not refused was put
        if isinstance(result.error, QueueFull):
            raise result.error  # not acknowledged: the broker keeps it until the queue has room
        if result.status == "refused":
            self._refuse(p, result.detail)
            return ""
        if result.status == "expired":
            log.info("bridge %s: a PUBLISH on %r expired before it was stored: dropped", name, p.topic)
        return PUT_COUNTERS.get(result.status, "forwarded")

    def _put_salted(self, queue: str, items: list[_Publish], first: list[Message],
                    build: Callable[[_Publish, int], Message]) -> list[PutResult]:
        """Put ``first`` (what ``build`` makes of ``items`` with salt 0) in one transaction: a redelivery
        (DUP) of one put already is a duplicate, a first delivery identical to an earlier one a distinct
        message, put again under a salted uid."""
        results: list[PutResult] = self.qm.put_each(queue, first)
        salt = 0
        todo = [i for i, r in enumerate(results) if r.status == "duplicate" and not items[i].message.dup]
        while todo:
            salt += 1
            again = self.qm.put_each(queue, [build(items[i], salt) for i in todo])
            for i, r in zip(todo, again, strict=True):
                results[i] = r
            todo = [i for i in todo if results[i].status == "duplicate" and not items[i].message.dup]
        return results

    def _refuse(self, p: _Publish, why: str) -> None:
        """Put a refused PUBLISH on the dead-letter queue, saying why; raise if it cannot go there."""

        def put(dlq: str, build: Callable[[MessageUID], Message]) -> PutResult:
            return self._put_salted(dlq, [p], [build(self._uid(p, 0))],
                                    lambda q, salt: build(self._uid(q, salt)))[0]

        self.dead_letter(put, p.payload, p.received, why, {TOPIC: p.topic}, "a PUBLISH from the broker")

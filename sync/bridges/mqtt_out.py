"""The MQTT 5 out-bridge: a batch of assured gets from the queue, a PUBLISH of each with what is left of
its expiry, and the gets confirmed together only after the broker's PUBACKs or PUBCOMPs
(docs/bridges.md)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from paho.mqtt.client import MQTTMessageInfo
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from edgeq.sync.bridges.base import Bridge
from edgeq.sync.bridges.broker import BrokerSettings, check_broker_config, reconnecting
from edgeq.sync.bridges.connection import Connection
from edgeq.sync.bridges.definition import BridgeDefinition
from edgeq.sync.bridges.errors import BridgeConfigError, BridgeError
from edgeq.sync.bridges.mapping import outgoing
from edgeq.sync.bridges.outbox import BATCH, Got, Outbox, check_batch

if TYPE_CHECKING:
    from edgeq.manager import QueueManager
    from edgeq.sync.bridges.status import StatusBoard
    from edgeq.uid import MessageUID

__all__ = ["MqttOutBridge"]

_OWN: dict[str, Any] = {"topics": None, "qos": 1, "batch": BATCH}
_POLL_S = 0.1
#: How long a bridge asked to stop still waits for the broker to acknowledge the messages in flight.
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
        check_batch(out)
        return out

    def __init__(self, definition: BridgeDefinition, qm: QueueManager, board: StatusBoard) -> None:
        super().__init__(definition, qm, board)
        d = self.definition
        self.settings = BrokerSettings.from_config(d.config)
        self.topic, self.qos = str(d.config["topics"][0]), int(d.config["qos"])
        self.outbox = Outbox(self)

    def run(self, stop: threading.Event) -> None:
        self.board.count("duplicates", self.outbox.undo_locked())  # each may have reached the broker
        connections = reconnecting(stop, self._connect, self.board, self.settings.retry_max_s,
                                   f"; the messages wait on queue {self.definition.queue}")
        with contextlib.closing(connections):
            for conn in connections:
                while not stop.is_set() and not conn.lost.is_set():
                    self._forward(conn, stop)

    def _connect(self) -> Connection:
        return Connection(self.settings, self.client_id, clean_start=True, max_inflight=self.outbox.batch)

    def _forward(self, conn: Connection, stop: threading.Event) -> None:
        """Publish a batch, each PUBLISH handed to paho only when its in-flight window has room (so its
        expiry interval is computed as it leaves), and confirm what the broker acknowledged."""
        pending = deque(self.outbox.get(_POLL_S))
        if not pending:
            return
        self.step("out.got")
        flight, window = _Flight(conn), min(self.outbox.batch, conn.receive_maximum)
        give_up: float | None = None  # once asked to stop, the acknowledgements are waited for a while
        while not conn.lost.is_set():
            if give_up is None and stop.is_set():
                give_up = time.monotonic() + _STOP_GRACE_S  # no more handed to paho; those in flight waited
            if pending and give_up is None and len(flight.waiting) < window:
                self._publish(flight, pending.popleft())
                if not pending:
                    self.step("out.sent")
            elif flight.waiting and (give_up is None or time.monotonic() <= give_up):
                flight.wait()
            else:
                break
        flight.unsent += [got.uid for got in pending]
        flight.settle()
        self.step("out.acknowledged")
        self.outbox.confirm(flight.acked)
        self.step("out.confirmed")
        self.outbox.put_back(flight.unsent, "was not confirmed by the broker (the connection ended first)")
        for uid, why in flight.refused:
            self.outbox.put_back([uid], why, count_backout=True)

    def _publish(self, flight: _Flight, got: Got) -> None:
        """Hand one message to paho, with what is left of its expiry now (or hold it, or refuse it)."""
        try:
            publish = outgoing(got.message, got.before_ms, self.qm.now_ms())
        except BridgeError as exc:
            flight.refused.append((got.uid, f"cannot be published ({exc})"))
            return
        if publish is None:  # under a second left: kept locked, never published, discarded once expired
            self.outbox.hold(got)
            return
        props = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
        for name, value in publish.properties.items():
            setattr(props, name, value)
        try:
            info = flight.conn.client.publish(self.topic, publish.payload, self.qos, properties=props)
        except ValueError as exc:  # paho's: a payload too large for MQTT
            flight.refused.append((got.uid, f"cannot be published ({exc})"))
            return
        flight.waiting.append((got, info))


class _Flight:
    """A batch's PUBLISHes handed to paho (``waiting``, oldest first), sorted as the broker answers."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.waiting: deque[tuple[Got, MQTTMessageInfo]] = deque()
        self.acked: list[MessageUID] = []
        self.unsent: list[MessageUID] = []
        self.refused: list[tuple[MessageUID, str]] = []  # the message at fault: its backout count raised

    def wait(self) -> None:
        """Wait a moment for the oldest PUBLISH in flight; sort it once the broker answered."""
        got, info = self.waiting[0]
        with contextlib.suppress(RuntimeError, ValueError):  # paho's: not sent (sorted below)
            info.wait_for_publish(_POLL_S)  # woken by the PUBACK/PUBCOMP, or after _POLL_S
        if info.rc != 0 or info.is_published():
            self.waiting.popleft()
            self._sort(got, info)

    def settle(self) -> None:
        """Sort what is still in flight (the connection ended, or the bridge stopped): late PUBACKs count."""
        while self.waiting:
            self._sort(*self.waiting.popleft())

    def _sort(self, got: Got, info: MQTTMessageInfo) -> None:
        try:
            published = info.is_published()
        except (RuntimeError, ValueError):  # paho's: not sent, or not confirmed
            published = False
        reason = self.conn.refused.pop(info.mid, None) if published else None
        if not published:
            self.unsent.append(got.uid)
        elif reason is None:
            self.acked.append(got.uid)
        else:
            self.refused.append((got.uid, f"the broker refused it ({reason})"))

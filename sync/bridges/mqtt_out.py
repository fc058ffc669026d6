"""The MQTT 5 out-bridge: a batch of assured gets from the queue, a PUBLISH of each with what is left of
its expiry, and the gets confirmed together only after the broker's PUBACKs or PUBCOMPs
(docs/bridges.md)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode

from edgeq.sync.bridges.base import Bridge
from edgeq.sync.bridges.broker import BrokerSettings, check_broker_config, reconnecting
from edgeq.sync.bridges.connection import PACKET_FAULTS, Connection
from edgeq.sync.bridges.definition import BridgeDefinition
from edgeq.sync.bridges.errors import BridgeConfigError, BridgeError
from edgeq.sync.bridges.mapping import outgoing
from edgeq.sync.bridges.outbox import BATCH, Got, Outbox, check_batch

if TYPE_CHECKING:
    from edgeq.manager import QueueManager
    from edgeq.sync.bridges.status import StatusBoard
    from edgeq.uid import MessageUID

__all__ = ["SUSPECT_DROPS", "MqttOutBridge"]

_OWN: dict[str, Any] = {"topics": None, "qos": 1, "batch": BATCH}
_POLL_S = 0.1
#: How long a bridge asked to stop still waits for the broker to acknowledge the messages in flight.
_STOP_GRACE_S = 5.0
#: The times the broker ends the connection at its answer to a message's PUBLISH before it is dead-lettered.
SUSPECT_DROPS = 3


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
                self._forward(conn, stop)

    def _connect(self) -> Connection:
        return Connection(self.settings, self.client_id, clean_start=True, max_inflight=self.outbox.batch)

    def _forward(self, conn: Connection, stop: threading.Event) -> None:
        """Forward over one connection until it ends or ``stop``: batches got while the one before is still
        going out, so the line never idles (an idle line lets Nagle and delayed ACKs stall the PUBACKs)."""
        flight = _Flight(self, conn, min(self.outbox.batch, conn.receive_maximum))
        conn.on_published = flight.answered
        try:
            while not stop.is_set() and not conn.lost.is_set():
                if len(flight.pending) < flight.low:
                    got = self.outbox.get(0 if flight.busy() else _POLL_S)
                    if got:
                        self.step("out.got")
                        flight.add(got)
                        self.step("out.sent")
                        continue
                flight.wait()
                self._settle(flight.take())
            flight.stop(stop)
        finally:
            conn.on_published = None
        self._settle(flight.take())

    def _settle(self, done: _Done) -> None:
        """Confirm what the broker acknowledged (one transaction); put back or hold the rest."""
        if done.acked:
            self.step("out.acknowledged")
            self.outbox.confirm(done.acked)
            self.step("out.confirmed")
        for got in done.held:
            self.outbox.hold(got)
        self.outbox.put_back(done.unsent, "was not confirmed by the broker (the connection ended first)")
        for uid, why in done.refused:
            self.outbox.put_back([uid], why, count_backout=True)
        dead = list(done.dead)
        for got, why in done.suspect:  # the connection ended at the broker's answer to its PUBLISH
            drops = got.message.backout_count + 1
            if drops >= SUSPECT_DROPS:
                dead.append((got.uid, f"the broker ended the connection at its answer to this PUBLISH "
                             f"{drops} times ({why}): it is over a limit the broker does not announce "
                             f"(mosquitto's message_size_limit?); payload {len(got.message.data)} bytes"))
            else:
                self.outbox.put_back([got.uid], f"ended the broker connection at the answer to its PUBLISH "
                                     f"({why}; dead-lettered at {SUSPECT_DROPS} times, this was {drops})",
                                     count_backout=True)
        self.outbox.give_up(dead)


@dataclass
class _Done:
    """What a flight's messages came to: acknowledged, refused (their fault), never publishable (``dead``),
    suspected of ending the connection, held back, not sent or not acknowledged."""

    acked: list[MessageUID] = field(default_factory=list)
    refused: list[tuple[MessageUID, str]] = field(default_factory=list)
    dead: list[tuple[MessageUID, str]] = field(default_factory=list)
    suspect: list[tuple[Got, str]] = field(default_factory=list)
    held: list[Got] = field(default_factory=list)
    unsent: list[MessageUID] = field(default_factory=list)


class _Flight:
    """The messages of a connection on their way: each PUBLISH handed to paho when the broker's window
    (``slots``) has room, the first ones by the bridge's thread and then one per acknowledgement (in
    paho's thread), so its expiry interval is computed as it leaves; sorted as the broker answers."""

    def __init__(self, bridge: MqttOutBridge, conn: Connection, window: int) -> None:
        self.bridge, self.conn, self.slots = bridge, conn, window
        self.batch = bridge.outbox.batch
        #: A PUBLISH's bytes after its fixed header besides properties and payload: topic and packet id.
        self.overhead = 2 + len(bridge.topic.encode()) + 2
        self.last_answered = 0  # the packet id of the last PUBACK or PUBCOMP
        #: Fewer messages than this waiting to be sent: time to get the next batch.
        self.low = max(self.batch // 2, 1)
        self.pending: deque[Got] = deque()
        self.flying: dict[int, Got] = {}  # by packet id
        self.early: dict[int, ReasonCode] = {}  # answers that came before their publish() returned
        self.done = _Done()
        self.stopping = self.closed = False  # no more sent; no more answers taken
        self.filling = False  # a thread is handing paho PUBLISHes (one at a time)
        self.changed = threading.Condition()

    def busy(self) -> bool:
        return bool(self.pending or self.flying)

    def add(self, batch: list[Got]) -> None:
        with self.changed:
            self.pending.extend(batch)
        self._fill()

    def answered(self, mid: int, rc: ReasonCode) -> None:
        """A PUBACK or PUBCOMP (paho's thread): sort its message, and send the next in its place."""
        with self.changed:
            if self.closed:
                return
            self.slots += 1
            self.last_answered = mid
            got = self.flying.pop(mid, None)
            if got is None:
                self.early[mid] = rc
            else:
                self._sort(got, rc)
        self._fill()

    def _fill(self) -> None:
        """Hand paho the next messages while the window has room (one held back or refused is passed), one
        thread at a time: packet ids then follow the order the PUBLISHes leave in (``stop`` relies on it)."""
        with self.changed:
            if self.filling:  # the thread filling sees the slot or message this one brought
                self._wake()
                return
            self.filling = True
        try:
            self._filling()
        except BaseException:
            with self.changed:
                self.filling = False
            raise

    def _filling(self) -> None:
        while True:
            with self.changed:
                if self.stopping or self.closed or not self.pending or not self.slots:
                    self.filling = False
                    self._wake()
                    return
                got = self.pending.popleft()
                self.slots -= 1
                if len(self.pending) == self.low - 1:
                    self.changed.notify_all()  # time to get the next batch
            publish = self._prepare(got)
            if publish is None:
                with self.changed:
                    self.slots += 1
                continue
            try:
                info = self.conn.client.publish(self.bridge.topic, publish.payload, self.bridge.qos,
                                                properties=publish.properties)
            except ValueError as exc:  # paho's: a payload too large for MQTT
                with self.changed:
                    self.slots += 1
                    self.done.refused.append((got.uid, f"cannot be published ({exc})"))
                continue
            with self.changed:
                early = self.early.pop(info.mid, None)
                if early is None:
                    self.flying[info.mid] = got  # not connected (rc): it may have gone out as the line fell
                else:
                    self._sort(got, early)  # answered already, its slot given back
                if info.rc != 0:  # not connected: the loss ends the flight
                    self.filling = False
                    return

    def _wake(self) -> None:
        """Wake :meth:`wait` if all is answered or a batch is there to confirm (``changed`` held)."""
        if not self.busy() or len(self.done.acked) >= self.batch:
            self.changed.notify_all()

    def _prepare(self, got: Got) -> _Publish | None:
        """The PUBLISH of ``got`` with what is left of its expiry now; None if held back or refused."""
        try:
            publish = outgoing(got.message, got.before_ms, self.bridge.qm.now_ms())
        except BridgeError as exc:
            with self.changed:
                self.done.refused.append((got.uid, f"cannot be published ({exc})"))
            return None
        if publish is None:  # under a second left: kept locked, never published, discarded once expired
            with self.changed:
                self.done.held.append(got)
            return None
        props = pack_publish_properties(publish.properties)
        most = self.conn.maximum_packet_size
        if most is not None:
            rest = self.overhead + len(props) + len(publish.payload)
            size = 1 + len(_length(rest)) + rest
            if size > most:
                with self.changed:
                    self.done.dead.append((got.uid, f"cannot be published: its PUBLISH is {size} bytes, over "
                                           f"the broker's Maximum Packet Size ({most} bytes, its CONNACK)"))
                return None
        return _Publish(publish.payload, _Packed(props))

    def _sort(self, got: Got, rc: ReasonCode) -> None:
        if rc.is_failure:
            self.done.refused.append((got.uid, f"the broker refused it ({rc})"))
        else:
            self.done.acked.append(got.uid)

    def wait(self) -> None:
        """Until a batch is acknowledged, the flight is idle, it is time to get more, or ``_POLL_S``."""
        with self.changed:
            if len(self.done.acked) < self.batch and self.busy():
                self.changed.wait(_POLL_S)

    def take(self) -> _Done:
        """What was answered (or came to nothing) since the last take; while the flight goes on, the
        acknowledged a whole batch or none: one length of confirm, so one prepared statement (sqlite3 keeps
        one per length of IN list: lengths that varied grew the memory with the messages forwarded)."""
        with self.changed:
            done, self.done = self.done, _Done()
            if self.busy() and not self.stopping:
                whole = self.batch if len(done.acked) >= self.batch else 0
                done.acked, self.done.acked = done.acked[:whole], done.acked[whole:]
            return done

    def stop(self, stop: threading.Event) -> None:
        """Send no more (the pending ones put back); asked to stop, wait up to ``_STOP_GRACE_S`` for the
        answers of those in flight; then take no more answers (the rest put back)."""
        give_up = time.monotonic() + _STOP_GRACE_S
        with self.changed:
            self.stopping = True
            self.done.unsent += [got.uid for got in self.pending]
            self.pending.clear()
            while stop.is_set() and self.flying and not self.conn.lost.is_set():
                if time.monotonic() > give_up:
                    break
                self.changed.wait(_POLL_S)
            self.closed = True
            if self.flying and self.conn.lost.is_set() and self.conn.reason_code in PACKET_FAULTS:
                # Answers come in order: the one it ended at is the PUBLISH after the last answered.
                oldest = min(self.flying, key=lambda mid: (mid - self.last_answered) % 65_536)
                self.done.suspect.append((self.flying.pop(oldest), self.conn.reason))
            self.done.unsent += [got.uid for got in self.flying.values()]
            self.flying.clear()


@dataclass(frozen=True, slots=True)
class _Publish:
    payload: bytes
    properties: Properties


class _Packed(Properties):
    """PUBLISH properties packed already (paho's own cost a tenth of a millisecond a message)."""

    data: bytes

    def __init__(self, data: bytes) -> None:  # not Properties': no tables built
        object.__setattr__(self, "data", data)

    def pack(self) -> bytes:
        return self.data

    def __str__(self) -> str:
        return f"[{len(self.data)} bytes of properties]"


#: The identifiers of the PUBLISH properties the mapping sets (MQTT 5, 3.3.2.3), by paho's names.
_IDS = {"PayloadFormatIndicator": 1, "MessageExpiryInterval": 2, "ContentType": 3, "ResponseTopic": 8,
        "CorrelationData": 9, "UserProperty": 38}


def _length(n: int) -> bytes:
    """MQTT's Variable Byte Integer."""
    out = bytearray()
    while True:
        n, digit = n >> 7, n & 0x7F
        out.append(digit | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _data(value: bytes) -> bytes:
    return len(value).to_bytes(2, "big") + value


def pack_publish_properties(props: Mapping[str, Any]) -> bytes:
    """The properties of a PUBLISH (:func:`outgoing`'s names) packed as MQTT 5 sends them."""
    body = bytearray()
    for name, value in props.items():
        ident = _IDS[name]
        if name == "UserProperty":
            for key, text in value:
                body += bytes([ident]) + _data(key.encode()) + _data(text.encode())
        elif name == "PayloadFormatIndicator":
            body += bytes([ident, value])
        elif name == "MessageExpiryInterval":
            body += bytes([ident]) + int(value).to_bytes(4, "big")
        else:
            body += bytes([ident]) + _data(value if isinstance(value, bytes) else value.encode())
    return _length(len(body)) + bytes(body)

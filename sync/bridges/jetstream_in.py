"""The JetStream in-bridge: a durable pull consumer on a stream, each message put on the queue and
acknowledged only after the put is durable; a redelivery recognised by its uid (docs/bridges.md)."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.client import JetStreamContext

from edgeq.errors import QueueFull
from edgeq.message import Message
from edgeq.results import PutResult
from edgeq.sync.bridges.base import PUT_COUNTERS, Bridge
from edgeq.sync.bridges.broker import NATS_SCHEMES, BrokerSettings, reconnecting
from edgeq.sync.bridges.definition import BridgeDefinition
from edgeq.sync.bridges.errors import BridgeConfigError, BridgeError, BrokerUnavailable, PublishRefused
from edgeq.sync.bridges.jetstream import UNAVAILABLE, JetStreamLink, check_jetstream_config, stream_for
from edgeq.sync.bridges.jsmapping import (
    MSG_ID_HEADER,
    SEQ,
    STREAM,
    SUBJECT,
    incoming_message,
    incoming_uid,
    parse_headers,
)
from edgeq.uid import MessageUID
from edgeq.values import Int64

if TYPE_CHECKING:
    from edgeq.manager import QueueManager
    from edgeq.sync.bridges.status import StatusBoard

__all__ = ["JetStreamInBridge"]

log = logging.getLogger("edgeq.bridges")

_OWN: dict[str, Any] = {"durable": None, "batch": 256, "ack_wait_s": 30.0, "max_payload_bytes": 1 << 20}
_FETCH_S = 0.5
_BAD_NAME = " .*>/\\\t"


def _stamp_ns(reply: str) -> int:
    """When the stream stored a message (ns since the epoch), from its reply subject (v1 or v2 form)."""
    tokens = reply.split(".")
    return int(tokens[7] if len(tokens) == 9 else tokens[9])


class JetStreamInBridge(Bridge):
    """Consume a stream (its ``topics`` subjects) through a durable pull consumer into the queue."""

    direction = "in"

    @classmethod
    def check_config(cls, config: Mapping[str, Any]) -> dict[str, Any]:
        out = check_jetstream_config(config, _OWN)
        durable = out["durable"]
        if durable is not None and (not isinstance(durable, str) or not durable
                                    or any(c in durable for c in _BAD_NAME)):
            raise BridgeConfigError(f"durable must be a consumer name without spaces, '.', '*', '>' or "
                                    f"slashes, not {durable!r}")
        for key, top in (("batch", 1024), ("max_payload_bytes", 1 << 30)):
            if isinstance(out[key], bool) or not isinstance(out[key], int) or not 1 <= out[key] <= top:
                raise BridgeConfigError(f"{key} must be an int from 1 to {top}, not {out[key]!r}")
        wait = out["ack_wait_s"]
        if isinstance(wait, bool) or not isinstance(wait, int | float) or wait < 1:
            raise BridgeConfigError(f"ack_wait_s must be a number of seconds >= 1, not {wait!r}")
        return out

    def __init__(self, definition: BridgeDefinition, qm: QueueManager, board: StatusBoard) -> None:
        super().__init__(definition, qm, board)
        cfg = self.definition.config
        self.settings = BrokerSettings.from_config(cfg, NATS_SCHEMES)
        self.durable = str(cfg["durable"] or "".join("_" if c in _BAD_NAME else c for c in self.client_id))
        self.stream, self.timeout_s = str(cfg["stream"]), float(cfg["ack_timeout_s"])
        #: When the stream was made (a stream made anew restarts its sequences): part of each uid.
        self._created = ""
        self._pull: JetStreamContext.PullSubscription | None = None
        #: When the consumer was last seen to exist: checked every ack_wait_s while idle (nats-py's fetch
        #: from a deleted consumer just waits).
        self._checked = time.monotonic()

    def run(self, stop: threading.Event) -> None:
        with contextlib.closing(reconnecting(stop, self._connect, self.board,
                                             self.settings.retry_max_s)) as connections:
            for link in connections:
                while not stop.is_set() and not link.lost.is_set():
                    self._fetch(link)

    def _connect(self) -> JetStreamLink:
        cfg = self.definition.config
        link = JetStreamLink(self.settings, self.client_id, self.timeout_s, self.board)
        topics = list(cfg["topics"])
        consumer = ConsumerConfig(
            name=self.durable, durable_name=self.durable, ack_policy=AckPolicy.EXPLICIT,
            deliver_policy=DeliverPolicy.ALL, ack_wait=float(cfg["ack_wait_s"]), max_deliver=-1,
            filter_subject=topics[0] if len(topics) == 1 else None,
            filter_subjects=topics if len(topics) > 1 else None)
        try:
            info = stream_for(link, self.stream)
            self._created = info.created.isoformat() if info.created else ""
            if not self._consumer_exists(link):
                log.info("bridge %s: stream %s has no consumer %s: a new one delivers the stream from its "
                         "first message (a consumer made anew: what the queue holds or remembers is "
                         "recognised, older messages are stored again)", self.definition.name, self.stream,
                         self.durable)
            link.call(link.js.add_consumer(self.stream, consumer))  # made, or its subjects brought up to date
            self._pull = link.call(link.js.pull_subscribe_bind(durable=self.durable, stream=self.stream))
        except UNAVAILABLE as exc:
            link.close()
            raise BrokerUnavailable(f"JetStream did not answer about stream {self.stream} ({exc!r})") from exc
        except nats.js.errors.APIError as exc:
            link.close()
            raise BridgeError(f"JetStream refused consumer {self.durable} on stream {self.stream}: "
                              f"{exc.description}") from exc
        except BaseException:
            link.close()
            raise
        return link

    def _fetch(self, link: JetStreamLink) -> None:
        """Fetch up to ``batch`` messages and store them (:meth:`_store`)."""
        assert self._pull is not None  # set by _connect
        try:
            batch = link.call(self._pull.fetch(int(self.definition.config["batch"]), timeout=_FETCH_S),
                              _FETCH_S + self.timeout_s)
        except UNAVAILABLE:  # nothing to fetch, the stream changing leader, or (nats-py alike) no consumer
            if time.monotonic() - self._checked > float(self.definition.config["ack_wait_s"]):
                self._check_consumer(link)
            return
        except nats.errors.Error as exc:
            if self._check_consumer(link):
                self.board.error(f"fetching from stream {self.stream} failed ({exc}); reconnecting")
                link.close()
            return
        if batch:
            self._store(link, batch)

    def _check_consumer(self, link: JetStreamLink) -> bool:
        """Whether the consumer exists (or JetStream cannot say now); one that is gone is reported and the
        connection dropped: the next one makes it again."""
        self._checked = time.monotonic()
        try:
            if self._consumer_exists(link):
                return True
        except UNAVAILABLE:
            return True
        self.board.error(f"consumer {self.durable} of stream {self.stream} is gone; reconnecting makes it "
                         "again")
        link.close()
        return False

    def _consumer_exists(self, link: JetStreamLink) -> bool:
        try:
            link.call(link.js.consumer_info(self.stream, self.durable))
        except nats.js.errors.NotFoundError:
            return False
        return True

    def _store(self, link: JetStreamLink, batch: list[Msg]) -> None:
        """Put a fetched batch in one transaction and dead-letter its refused messages, then acknowledge
        them; from the first that cannot be stored on, give them back (JetStream delivers them again)."""
        received, done, counts = self.qm.now_ms(), 0, Counter[str]()
        for _ in batch:
            self.step("in.received")
        try:
            built = [self._message(msg, received) for msg in batch]
            fresh = [i for i, m in enumerate(built) if isinstance(m, Message)]
            put = self.qm.put_each(self.definition.queue, [m for m in built if isinstance(m, Message)])
            results = dict(zip(fresh, put, strict=True))
            for msg, m in zip(batch, built, strict=True):
                counts[self._settle(msg, m, results.get(done), received)] += 1
                done += 1
        except Exception as exc:  # the store refused (full, closed): not acknowledged, so delivered again
            self.board.error(f"could not store message {batch[done].metadata.sequence.stream} of stream "
                             f"{self.stream} ({type(exc).__name__}: {exc}); JetStream delivers it again")
        for what, n in counts.items():
            if what:
                self.board.count(what, n)
        self.step("in.stored")
        self._answer(link, batch[:done], batch[done:])

    def _answer(self, link: JetStreamLink, acked: list[Msg], given_back: list[Msg]) -> None:
        """Acknowledge ``acked`` and give back ``given_back``, in one call (no waiting on each)."""

        async def answer() -> None:
            for msg in acked:
                await msg.ack()  # a publish, not a request: nats-py sends it with the next flush
                self.step("in.acked")
            for msg in given_back:
                await msg.nak(delay=self.settings.retry_max_s)

        try:
            link.call(answer())
        except (nats.errors.Error, *UNAVAILABLE) as exc:  # they come again after ack_wait_s: recognised
            self.board.error(f"could not acknowledge or give back messages of stream {self.stream} "
                             f"({exc!r}); they are delivered again")

    def _message(self, msg: Msg, received: int) -> Message | PublishRefused:
        """The message a stream message becomes, or why it is refused."""
        d, seq, payload = self.definition, msg.metadata.sequence.stream, bytes(msg.data)
        try:
            if len(payload) > d.config["max_payload_bytes"]:
                raise PublishRefused(f"its payload is {len(payload)} bytes, over the bridge's "
                                     f"max_payload_bytes {d.config['max_payload_bytes']}")
            raw = getattr(msg.headers, "raw", b"")
            return incoming_message(msg.subject, payload, parse_headers(raw) if raw else [], self.stream,
                                    seq, _stamp_ns(msg.reply), received, self._uid(msg))
        except PublishRefused as exc:
            return exc

    def _uid(self, msg: Msg) -> MessageUID:
        msg_id = (msg.headers or {}).get(MSG_ID_HEADER)  # nats-py's reading: the same on every redelivery
        return incoming_uid(self.origin, self.stream, self._created, msg.metadata.sequence.stream, msg_id)

    def _settle(self, msg: Msg, built: Message | PublishRefused, result: PutResult | None,
                received: int) -> str:
        """The counter a message of a stored batch adds to ("" once dead-lettered, counted there);
        raise if it must stay with the stream."""
        if isinstance(built, PublishRefused):
            self._refuse(msg, bytes(msg.data), received, str(built))
            return ""
        assert result is not None  # every built message was put
        if isinstance(result.error, QueueFull):
            raise result.error  # not acknowledged: JetStream keeps it until the queue has room
        if result.status == "refused":
            self._refuse(msg, bytes(msg.data), received, result.detail)
            return ""
        if result.status == "expired":
            log.info("bridge %s: message %s of stream %s expired before it was stored: dropped",
                     self.definition.name, msg.metadata.sequence.stream, self.stream)
        return PUT_COUNTERS.get(result.status, "forwarded")

    def _refuse(self, msg: Msg, payload: bytes, received: int, why: str) -> None:
        seq, uid = msg.metadata.sequence.stream, self._uid(msg)
        self.dead_letter(lambda dlq, build: self.qm.put_each(dlq, [build(uid)])[0], payload, received, why,
                         {SUBJECT: msg.subject, STREAM: self.stream, SEQ: Int64(seq)},
                         f"message {seq} of stream {self.stream}")

"""The JetStream out-bridge: a batch of assured gets from the queue, published concurrently, each with
``Nats-Msg-Id`` its uid and what is left of its expiry as ``Nats-TTL``, the gets confirmed together only
after the stream's PubAcks (docs/bridges.md)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import nats.errors
import nats.js.errors
from nats.js.api import Header, PubAck

from edgeq.sync.bridges.base import Bridge
from edgeq.sync.bridges.broker import NATS_SCHEMES, BrokerSettings, reconnecting
from edgeq.sync.bridges.definition import BridgeDefinition
from edgeq.sync.bridges.errors import BridgeConfigError, BridgeError, BrokerUnavailable
from edgeq.sync.bridges.jetstream import (
    UNAVAILABLE,
    JetStreamLink,
    check_jetstream_config,
    check_ttl_support,
    stream_for,
)
from edgeq.sync.bridges.jsmapping import JsOutgoing, outgoing
from edgeq.sync.bridges.outbox import BATCH, Got, Outbox, check_batch

if TYPE_CHECKING:
    from edgeq.manager import QueueManager
    from edgeq.sync.bridges.status import StatusBoard
    from edgeq.uid import MessageUID

__all__ = ["JetStreamOutBridge"]

log = logging.getLogger("edgeq.bridges")

#: ``ttl_margin_ms``: taken off the TTL sent, as the server stamps a message a moment after it is sent.
_OWN: dict[str, Any] = {"ttl_margin_ms": 100, "batch": BATCH}
_POLL_S = 0.1
#: A publish's answer: the PubAck and when it came (the queue manager's clock), or the error it met.
_Answer = tuple[PubAck, int] | BaseException
#: The header block's bytes besides its lines (``NATS/1.0`` and the blank line, CRLFs) and each line's
#: besides its name and value (``: `` and CRLF), as nats-py writes them.
_HEADER_BLOCK, _HEADER_LINE = 12, 4


def _check_stream(link: JetStreamLink, stream: str, subject: str) -> None:
    """Refuse a stream that does not store ``subject``, lacks a per-message TTL, or keeps no duplicates."""
    info = stream_for(link, stream, subject)
    check_ttl_support(link.version(), info.config)
    if not info.config.duplicate_window:
        raise BridgeConfigError(f"stream {stream} has no duplicate window: a resend after a crash would be "
                                "stored twice; give it one (duplicate_window, 2 minutes by default)")


class JetStreamOutBridge(Bridge):
    """Forward the queue's messages into a JetStream stream, on one subject, exactly once."""

    direction = "out"

    @classmethod
    def check_config(cls, config: Mapping[str, Any]) -> dict[str, Any]:
        out = check_jetstream_config(config, _OWN)
        (subject, *more) = out["topics"]
        if more or any(c in subject for c in "*> "):
            raise BridgeConfigError(f"a jetstream-out bridge publishes to one subject without wildcards, "
                                    f"not {out['topics']!r}")
        margin = out["ttl_margin_ms"]
        if isinstance(margin, bool) or not isinstance(margin, int) or margin < 0:
            raise BridgeConfigError(f"ttl_margin_ms must be an int >= 0, not {margin!r}")
        check_batch(out)
        settings = BrokerSettings.from_config(out, NATS_SCHEMES)
        try:  # checked now, so that a stream that cannot carry expiry is refused when defined
            link = JetStreamLink(settings, "edgeq-bridge-define", float(out["ack_timeout_s"]))
        except BrokerUnavailable as exc:
            raise BridgeConfigError(f"{exc}: a jetstream-out bridge checks its stream when it is defined (it "
                                    "must take a per-message TTL): define it while NATS is up") from exc
        try:
            _check_stream(link, out["stream"], subject)
        except UNAVAILABLE as exc:
            raise BridgeConfigError(f"JetStream did not answer about stream {out['stream']} ({exc!r}): is "
                                    "JetStream enabled on the server, and the stream's cluster up?") from exc
        finally:
            link.close()
        return out

    def __init__(self, definition: BridgeDefinition, qm: QueueManager, board: StatusBoard) -> None:
        super().__init__(definition, qm, board)
        cfg = self.definition.config
        self.settings = BrokerSettings.from_config(cfg, NATS_SCHEMES)
        self.stream, self.subject = str(cfg["stream"]), str(cfg["topics"][0])
        self.timeout_s, self.margin_ms = float(cfg["ack_timeout_s"]), int(cfg["ttl_margin_ms"])
        self.outbox = Outbox(self)

    def run(self, stop: threading.Event) -> None:
        again = self.outbox.undo_locked()
        if again:
            log.info("bridge %s: %d message(s) a previous run got are sent again, with the same Nats-Msg-Id "
                     "(the stream drops those it has)", self.definition.name, again)
        connections = reconnecting(stop, self._connect, self.board, self.settings.retry_max_s,
                                   f"; the messages wait on queue {self.definition.queue}")
        with contextlib.closing(connections):
            for link in connections:
                while not stop.is_set() and not link.lost.is_set():
                    if not self._forward(link):
                        stop.wait(min(self.settings.retry_max_s, 0.5))  # JetStream busy: not a hot loop

    def _connect(self) -> JetStreamLink:
        link = JetStreamLink(self.settings, self.client_id, self.timeout_s, self.board)
        try:
            _check_stream(link, self.stream, self.subject)  # the stream may have changed since defined
        except UNAVAILABLE as exc:
            link.close()
            raise BrokerUnavailable(f"JetStream did not answer about stream {self.stream} ({exc!r})") from exc
        except BaseException:
            link.close()
            raise
        return link

    def _forward(self, link: JetStreamLink) -> bool:
        """Forward a batch, if any, its publishes concurrent; False if JetStream could not take some now
        (they are put back)."""
        batch = self.outbox.get(_POLL_S)
        if not batch:
            return True
        self.step("out.got")
        sent: list[tuple[Got, JsOutgoing]] = []
        dead: list[tuple[MessageUID, str]] = []
        most = link.client.max_payload
        for got in batch:
            try:
                publish = outgoing(got.message, got.before_ms, self.qm.now_ms(), self.margin_ms)
            except BridgeError as exc:
                self.outbox.put_back([got.uid], f"cannot be published ({exc})", count_backout=True)
                continue
            if publish is None:  # under a second left: kept locked, never published, discarded once expired
                self.outbox.hold(got)
                continue
            size = self._size(publish)
            if size > most:  # the server would close the connection: never sent
                dead.append((got.uid, f"cannot be published: it is {size} bytes with its headers, over the "
                             f"NATS server's max_payload ({most} bytes, its INFO)"))
                continue
            sent.append((got, publish))
        self.outbox.give_up(dead)
        answers = self._publish(link, [publish for _, publish in sent])
        self.step("out.acknowledged")
        acked: list[MessageUID] = []
        late: list[int] = []
        missed: list[tuple[MessageUID, BaseException]] = []
        for (got, publish), answer in zip(sent, answers, strict=True):
            if isinstance(answer, BaseException):
                missed.append((got.uid, answer))
                continue
            acked.append(got.uid)
            if answer[0].duplicate:
                self.board.count("duplicates")  # a resend the stream already had: dropped there
            if publish.ttl_s is not None and publish.deadline_ms is not None:
                late.append(answer[1] + publish.ttl_s * 1000 - publish.deadline_ms)
        self._check_late(late)
        self.outbox.confirm(acked)
        self.step("out.confirmed")
        full = [(uid, a) for uid, a in missed if _full(a)]
        if full:
            self.outbox.put_back([uid for uid, _ in full], f"was not taken: stream {self.stream} is full "
                                 f"({full[0][1]}) and discards new messages; kept, and sent again until it "
                                 "has room (raise its limits, or let it drain)")
        unanswered = [(uid, a) for uid, a in missed if not _refusal(a) and not _full(a)]
        if unanswered:
            self.outbox.put_back([uid for uid, _ in unanswered], f"was not acknowledged by JetStream "
                                 f"({unanswered[0][1] or repr(unanswered[0][1])}); sent again with the same "
                                 "Nats-Msg-Id")
        refused = [(uid, a) for uid, a in missed if _refusal(a)]
        return self._refused(link, refused) and not unanswered and not full

    def _size(self, publish: JsOutgoing) -> int:
        """The bytes of ``publish`` the server counts against its max_payload: payload and header block."""
        headers = {**publish.headers, Header.EXPECTED_STREAM: self.stream}
        return len(publish.payload) + _HEADER_BLOCK + sum(
            len(k.strip().encode()) + len(v.strip().encode()) + _HEADER_LINE for k, v in headers.items())

    def _publish(self, link: JetStreamLink, publishes: list[JsOutgoing]) -> list[_Answer]:
        """Publish them all at once; each one's PubAck and when it came (the clock), or the error it met."""
        if not publishes:
            return []

        async def one(p: JsOutgoing) -> tuple[PubAck, int]:
            ack = await link.js.publish(self.subject, p.payload, timeout=self.timeout_s, stream=self.stream,
                                        headers=p.headers)
            return ack, self.qm.now_ms()

        async def publish_all() -> list[_Answer]:
            return await asyncio.gather(*map(one, publishes), return_exceptions=True)

        future = link.submit(publish_all())
        self.step("out.sent")
        try:
            return future.result(self.timeout_s + 1)
        except UNAVAILABLE as exc:  # the PubAcks' own timeouts passed: the loop is stuck, or gone
            future.cancel()
            return [exc] * len(publishes)

    def _refused(self, link: JetStreamLink, refused: list[tuple[MessageUID, BaseException]]) -> bool:
        """Put back messages the stream refused: counted against them (backout) only if the stream itself
        still checks out; else the connection is dropped and the reconnection says what is wrong."""
        if not refused:
            return True
        try:
            _check_stream(link, self.stream, self.subject)
        except (BridgeError, *UNAVAILABLE) as why:
            self.outbox.put_back([uid for uid, _ in refused], f"was refused by stream {self.stream} "
                                 f"({refused[0][1]}), whose check fails ({why})")
            link.close()
            return False
        for uid, exc in refused:
            self.outbox.put_back([uid], f"was refused by stream {self.stream} ({exc})", count_backout=True)
        return True

    def _check_late(self, late: list[int]) -> None:
        """Say so if PubAcks came so late (``late``: their time plus the TTL, less the deadline, in ms) that
        the stream may keep messages past their deadline."""
        worst = max(late, default=0)
        if worst > 0:
            self.board.error(f"{sum(x > 0 for x in late)} message(s): the PubAck came after more than "
                             f"ttl_margin_ms ({self.margin_ms} ms): stream {self.stream} may keep them up to "
                             f"{worst} ms past their deadline; raise ttl_margin_ms")


def _full(answer: BaseException) -> bool:
    """Whether a publish's error is a stream at its limits that discards new messages (a 503 naming a
    limit exceeded): back-pressure, the message kept."""
    why = str(answer.description) if isinstance(answer, nats.js.errors.ServiceUnavailableError) else ""
    return "exceeded" in why or "insufficient resources" in why


def _refusal(answer: BaseException) -> bool:
    """Whether a publish's error is the stream refusing the message (an API error), not JetStream away."""
    return isinstance(answer, nats.errors.Error) and not isinstance(answer, UNAVAILABLE)

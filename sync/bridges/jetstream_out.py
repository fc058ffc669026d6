"""The JetStream out-bridge: an assured get from the queue, a publish with ``Nats-Msg-Id`` the uid and
what is left of its expiry as ``Nats-TTL``, the get confirmed only after the stream's PubAck
(docs/bridges.md)."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import nats.errors

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
from edgeq.sync.bridges.jsmapping import outgoing
from edgeq.sync.bridges.outbox import Got, Outbox

if TYPE_CHECKING:
    from edgeq.manager import QueueManager
    from edgeq.sync.bridges.status import StatusBoard

__all__ = ["JetStreamOutBridge"]

log = logging.getLogger("edgeq.bridges")

#: ``ttl_margin_ms``: taken off the TTL sent, as the server stamps a message a moment after it is sent.
_OWN: dict[str, Any] = {"ttl_margin_ms": 100}
_POLL_S = 0.1


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
                    if not self._forward_one(link):
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

    def _forward_one(self, link: JetStreamLink) -> bool:
        """Forward one message, if any; False if JetStream could not take it now (it is put back)."""
        got = self.outbox.get(_POLL_S)
        if got is None:
            return True
        self.step("out.got")
        try:
            publish = outgoing(got.message, got.before_ms, got.after_ms, self.margin_ms)
        except BridgeError as exc:
            self.outbox.put_back(got.uid, f"cannot be published ({exc})", count_backout=True)
            return True
        if publish is None:  # under a second left: kept locked, never published, discarded once expired
            self.outbox.hold(got)
            return True
        future = link.submit(link.js.publish(self.subject, publish.payload, timeout=self.timeout_s,
                                             stream=self.stream, headers=publish.headers))
        self.step("out.sent")
        try:
            ack = future.result(self.timeout_s + 1)
        except UNAVAILABLE as exc:
            future.cancel()
            self.outbox.put_back(got.uid, f"was not acknowledged by JetStream ({exc!r}); it is sent again "
                                 "with the same Nats-Msg-Id")
            return False
        except nats.errors.Error as exc:  # an APIError: the stream refused it
            return self._refused(link, got, exc)
        self.step("out.acknowledged")
        if publish.ttl_s is not None and publish.deadline_ms is not None:
            self._check_late(got, publish.ttl_s, publish.deadline_ms)
        if ack.duplicate:
            self.board.count("duplicates")  # a resend the stream already had: dropped there
        self.outbox.confirm(got.uid)
        self.step("out.confirmed")
        return True

    def _refused(self, link: JetStreamLink, got: Got, exc: Exception) -> bool:
        """Put back a message the stream refused: counted against it (backout) only if the stream itself
        still checks out; else the connection is dropped and the reconnection says what is wrong."""
        try:
            _check_stream(link, self.stream, self.subject)
        except (BridgeError, *UNAVAILABLE) as why:
            self.outbox.put_back(got.uid, f"was refused by stream {self.stream} ({exc}), whose check fails "
                                 f"({why})")
            link.close()
            return False
        self.outbox.put_back(got.uid, f"was refused by stream {self.stream} ({exc})", count_backout=True)
        return True

    def _check_late(self, got: Got, ttl_s: int, deadline_ms: int) -> None:
        """Say so if the PubAck came so late that the stream may keep the message past its deadline."""
        late = self.qm.now_ms() + ttl_s * 1000 - deadline_ms
        if late > 0:
            self.board.error(f"message {got.uid}: the PubAck came after more than ttl_margin_ms "
                             f"({self.margin_ms} ms): stream {self.stream} may keep it up to {late} ms past "
                             "its deadline; raise ttl_margin_ms")


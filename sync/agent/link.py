"""The agent's conversation with its home server, shared by push, pull and expiry reports: requests
with the store's identity and settled mark, the hello, and what each exchange teaches."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from edgeq import __version__
from edgeq.encoding.compression import Codec, available
from edgeq.manager import QueueManager
from edgeq.message import Message
from edgeq.sync import messages as wm
from edgeq.sync import protocol as p
from edgeq.sync.agent.clockbounds import ServerClockBounds
from edgeq.sync.agent.health import Health
from edgeq.sync.agent.reports import HelloInfo
from edgeq.sync.agent.transport import ServerRefused, SyncError, Transport, Unreachable
from edgeq.sync.framing import accepted
from edgeq.types import Clock

__all__ = ["Results", "ServerLink", "decode_results", "failure_code"]

log = logging.getLogger("edgeq.sync.agent")

#: An answer's per-message results: ``(uid, status, why)``.
Results = list[tuple[str, str, str | None]]


def decode_results(body: Mapping[str, Any], allowed: Sequence[str],
                   sent: Sequence[Message] | None = None) -> Results:
    """The checked per-message results of an answer, in the order of ``sent`` if given; a bad
    answer raises :class:`~edgeq.sync.agent.transport.Unreachable` (retry later)."""
    try:
        results = wm.decode_results(body, allowed)
    except p.ProtocolError as exc:
        raise Unreachable(f"bad answer from the server: {exc.detail}") from exc
    if sent is not None and [u for u, _, _ in results] != [str(m.uid) for m in sent]:
        raise Unreachable("the server's answer does not match the messages sent")
    return results


def failure_code(exc: SyncError) -> str:
    """A failed exchange's code: the server's if it refused (``forbidden``, ...), else ``unreachable``."""
    return exc.code if isinstance(exc, ServerRefused) else "unreachable"


class ServerLink:
    """Requests to the home server over ``transport`` on behalf of ``qm``; ``batch_size``: the most
    messages (or entries) in one request, within the server's limit. :attr:`lock` serialises pushes and
    pulls; a hello never takes it (the push's confirmer thread may need one mid-push)."""

    def __init__(
        self, qm: QueueManager, transport: Transport, *, clock: Clock, monotonic: Callable[[], float],
        batch_size: int,
    ) -> None:
        self.qm = qm
        self.transport = transport
        self.clock = clock
        self.monotonic = monotonic
        self.batch_size = batch_size
        #: bounds on the server's clock from this agent's exchanges (reset by each hello)
        self.server_clock = ServerClockBounds()
        self.lock = threading.RLock()
        #: whether the server answered the last exchange (a refusal is an answer)
        self.online = False
        #: each queue's sync: last success, last error, its own backoff
        self.health = Health(qm, clock=clock, monotonic=monotonic)
        #: the codecs each hello offers the server, the preferred first
        self.codecs: tuple[Codec, ...] = available()
        #: the codecs the server takes, from its last hello answer (none from an older server)
        self.server_codecs: tuple[Codec, ...] = ()
        self._hello: HelloInfo | None = None
        self._hello_due = True

    @property
    def info(self) -> HelloInfo:
        """The server's answer to the last hello (one must have been made)."""
        assert self._hello is not None, "no hello yet"
        return self._hello

    def codec(self, compression: str | None) -> Codec | None:
        """The codec a queue's ``compression`` comes to: that codec if the server took it at the
        last hello, else None (plain bodies)."""
        return next((c for c in self.server_codecs if c == compression), None)

    def call(self, path: str, body: dict[str, Any], expect: str, *,
             compression: str | None = None) -> dict[str, Any]:
        """One request and its answer of type ``expect``, with a new hello first if the server asks;
        a failure makes a hello due and, unless refused, marks the server offline."""
        # Every request says which store is calling and what it has settled: the server
        # forgets this store's confirmed uids below the mark (exactly once, no time window).
        qm = self.qm
        body = {"qmgr": qm.name, "origin": qm.origin, "settled": qm.exchange.settled_below(), **body}
        try:
            try:
                return self._exchange(path, body, expect, compression)
            except ServerRefused as exc:
                if exc.code != "hello-required":
                    raise
                log.info("server asks for a new hello", extra={"event": "rehello", "path": path})
                self.hello()
                return self._exchange(path, body, expect, compression)
        except ServerRefused:
            self._hello_due = True  # it answered: still online (puts still wake the daemon)
            raise
        except SyncError:
            self.online = False
            self._hello_due = True
            raise

    def _exchange(self, path: str, body: dict[str, Any], expect: str,
                  compression: str | None) -> dict[str, Any]:
        """One request and its answer, whose ``now_ms`` becomes a clock sample; the codec is
        chosen here, so a request repeated after a new hello follows that hello's answer."""
        sent = self.monotonic()
        answer = self.transport.call(path, body, expect, codec=self.codec(compression))
        self._sample(path, sent, answer.get("now_ms"), self.monotonic())
        return answer

    def _sample(self, path: str, sent: float, server_ms: object, received: float) -> None:
        """Add an exchange to the bounds on the server's clock; log if they had to restart."""
        if isinstance(server_ms, bool) or not isinstance(server_ms, int) or not 0 <= server_ms <= 2**62:
            return  # no usable reading: the endpoint's own checks report a bad answer
        if not self.server_clock.add(sent, server_ms, received):
            log.warning(
                "the server's clock moved outside the bounds measured so far (a step?): measuring afresh",
                extra={"event": "clock-reset", "path": path, "server_ms": server_ms},
            )

    def hello(self) -> HelloInfo:
        """Handshake: learn the server's name and limits, let it record this device's clock
        offset; restarts the bounds on the server's clock from this exchange."""
        sent = self.clock()
        started = self.monotonic()
        # Offered only if there is something to offer: a server hears from an agent without
        # codecs exactly what it heard before compression existed.
        offer = {"compression": list(self.codecs)} if self.codecs else {}
        try:
            body = self.transport.call(
                p.PATH_HELLO,
                {"type": "hello", "qmgr": self.qm.name, "now_ms": sent, "agent": f"edgeq/{__version__}",
                 "origin": self.qm.origin, "settled": self.qm.exchange.settled_below(), **offer},
                "hello",
            )
        except SyncError:
            self.online = False  # as for any failed exchange: puts stop waking the daemon
            self._hello_due = True
            raise
        received = self.monotonic()
        now = self.clock()
        try:
            server_now = p.req_int(body, "now_ms", high=2**62)
            info = HelloInfo(
                server=p.req_name(body, "server"),
                offset_ms=now - server_now,
                server_offset_ms=p.req_int(body, "offset_ms", low=-(2**62), high=2**62),
                rtt_ms=round((received - started) * 1000),
                max_body_bytes=p.req_int(body, "max_body_bytes", low=1024),
                max_batch=p.req_int(body, "max_batch", low=1),
            )
            settled, seen = p.opt_int(body, "settled"), p.opt_int(body, "seen")
        except p.ProtocolError as exc:
            raise Unreachable(f"bad hello answer from {self.transport.server_url}: {exc.detail}") from exc
        self._compare(info.server, settled, seen)
        self.server_clock.reset()
        self.server_clock.add(started, server_now, received)
        self.server_codecs = accepted(body.get("compression"), self.codecs)
        self._hello = info
        self._hello_due = False
        self.online = True
        log.info(
            "hello %s", info.server,
            extra={"event": "hello", "server": info.server, "offset_ms": info.offset_ms,
                   "rtt_ms": info.rtt_ms},
        )
        return info

    def _compare(self, server: str, settled: int | None, seen: int | None) -> None:
        """If the store is behind what the server has seen of it (restored from an older
        copy), it takes a new incarnation, said in a warning and the status."""
        found = self.qm.exchange.check_restored(server, settled=settled, seen=seen)
        if found is None:
            return
        log.warning(
            "this store was found restored from an older copy: %s had settled its origin %s below stamp %s "
            "and seen stamps up to %s; it now issues uids as %s, and the %d message(s) it holds of %s "
            "below that mark are answered by the server as already delivered",
            server, found.old_origin, found.resent_below, found.seen, found.new_origin, found.resends,
            found.old_origin,
            extra={"event": "restored", **found.as_dict()},
        )

    def ensure_hello(self) -> HelloInfo:
        """The last hello's answer, or a new hello's if none was made or one is due."""
        if self._hello is None or self._hello_due:
            return self.hello()
        return self._hello

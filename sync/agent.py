"""The device side: push remote queues to the home server, pull home-server queues from it.

    agent = SyncAgent(qm, "http://home:8470")
    report = agent.push_once()   # put + confirm batches until the transmission store is empty
    agent.run(interval_s=5)      # or a daemon: APScheduler ticks, backoff, wake on put

Each batch is MQe's two-stage transmission: **put** (the server stores it
locked), **confirm** (it becomes visible), then the local copies are deleted in
one local transaction (``qm.transmitted``). Every step is safe to repeat; the
crash-point reasoning is in ``docs/protocol.md``.

Expiry crosses the wire as remaining milliseconds. The agent times every exchange
on a monotonic clock to bound the server's clock
(:class:`~edgeq.sync.clockbounds.ServerClockBounds`, :attr:`SyncAgent.server_clock`):
a put carries the lower bound at the instant its batch was read (``server_ms``),
and pulled lifetimes are shortened by the most time the upper bound allows since
the server read them, so no deadline ever comes out later on the other side, and
neither wall clock (nor a step of one) matters.
"""

from __future__ import annotations

import contextlib
import logging
import random
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import httpx
from edgeq.rules import QueueRule
from edgeq.rules.base import RuleEvent
from edgeq.sync import protocol as p
from edgeq.sync.clockbounds import STALE_AFTER_S, ServerClockBounds
from edgeq.sync.reports import HelloInfo, Progress, PullReport, PushReport
from edgeq.sync.transport import ServerRefused, SyncError, Transport, Unreachable

from edgeq import __version__
from edgeq.clock import system_clock
from edgeq.errors import EdgeqError
from edgeq.manager import QueueManager
from edgeq.message import Message
from edgeq.queues import QueueAttributes
from edgeq.types import Clock
from edgeq.uid import MessageUID

if TYPE_CHECKING:
    from apscheduler.schedulers.background import BackgroundScheduler

__all__ = ["HelloInfo", "Progress", "PullReport", "PushReport", "SyncAgent", "SyncError"]

log = logging.getLogger("edgeq.sync.agent")

_PUT_STATUSES = ("stored", "replaced", "unconfirmed", "duplicate", "expired", "refused")
_CONFIRM_STATUSES = ("confirmed", "already", "unknown", "expired", "refused")
_PULL_CONFIRM_STATUSES = ("confirmed", "unknown", "expired")
_PER_MESSAGE_OVERHEAD = 96  # bytes of CBOR keys, uid, numbers per message (generous)
_MAX_REFUSALS_KEPT = 100


class _WakeRule(QueueRule):
    """Wakes the agent's daemon when a message is put on a remote queue."""

    def __init__(self, agent: SyncAgent) -> None:
        self._agent = agent

    def on_added(self, event: RuleEvent) -> None:
        """Wake the agent's daemon to push the new message."""
        self._agent._on_put()


class SyncAgent:
    """Synchronise one device queue manager with its home server.

    ``client``: an ``httpx.Client`` to use (else one is made, with keep-alive);
    ``clock``: the device clock in epoch ms (the queue manager's, normally);
    ``monotonic``: a clock in seconds that no wall-clock step moves (``time.monotonic``;
    tests inject one), on which the agent times its exchanges to bound the server's
    clock (:class:`~edgeq.sync.clockbounds.ServerClockBounds`) and rebase expiries;
    ``auth``: an ``httpx.Auth`` to sign requests (:class:`~edgeq.sync.signer.DeviceSigner`);
    ``ca_file``: the CA to verify an ``https://`` server with (None: the system
    store); plain ``http://`` to a non-loopback host is refused unless
    ``allow_insecure_http`` (:class:`~edgeq.sync.tls.InsecureTransport`). The agent registers itself as
    ``qm``'s transmitter, so ``put`` on a ``mode="sync"`` remote queue pushes at
    once. Thread-safe: pushes and pulls are serialised.
    """

    def __init__(
        self,
        qm: QueueManager,
        server_url: str,
        *,
        batch_size: int = 500,
        client: httpx.Client | None = None,
        clock: Clock | None = None,
        timeout: float = 30.0,
        auth: httpx.Auth | None = None,
        backoff_base_s: float = 1.0,
        backoff_max_s: float = 300.0,
        ca_file: Path | None = None,
        allow_insecure_http: bool = False,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, not {batch_size!r}")
        self.qm = qm
        self.batch_size = batch_size
        self.transport = Transport(server_url, client=client, timeout=timeout, auth=auth, ca_file=ca_file,
                                   allow_insecure_http=allow_insecure_http)
        self._clock: Clock = clock or system_clock
        self._monotonic = monotonic
        #: bounds on the server's clock from this agent's exchanges (reset by each hello)
        self.server_clock = ServerClockBounds()
        self._lock = threading.RLock()
        self._hello: HelloInfo | None = None
        self._hello_due = True
        # Messages put (stage one) and not yet known to be transmitted: a re-put
        # carries resend. Until the first complete push, every put is a possible
        # re-put (an earlier process may have sent it before crashing).
        self._attempted: set[MessageUID] = set()
        self._recovering = True
        # The server discarded these as expired: never put them again (they
        # expire here too, within the clocks' disagreement).
        self._server_expired: set[MessageUID] = set()
        self._backoff = (backoff_base_s, backoff_max_s)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._online = False
        self._scheduler: BackgroundScheduler | None = None
        self._worker: threading.Thread | None = None
        self._rules: list[tuple[str, _WakeRule]] = []
        #: whether the daemon's cycles also pull home-server queues
        self.pull_enabled = True
        self.progress: Callable[[Progress], None] | None = None
        self.progress_interval_s = 1.0
        self.last_push: PushReport | None = None
        self.last_pull: PullReport | None = None
        self._confirmer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="edgeq-sync-confirm")
        qm.set_transmitter(self._transmit)

    # -- lifecycle ---------------------------------------------------------------------

    def close(self) -> None:
        """Stop the daemon (if running), unregister the transmitter, close the HTTP client."""
        self.stop()
        self.qm.set_transmitter(None)
        self._confirmer.shutdown(wait=True)
        self.transport.close()

    def __enter__(self) -> SyncAgent:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @property
    def online(self) -> bool:
        """Whether the last exchange with the server succeeded."""
        return self._online

    # -- requests ------------------------------------------------------------------------

    def _call(self, path: str, body: dict[str, Any], expect: str) -> dict[str, Any]:
        # Every request says which store is calling and what it has settled: the server
        # forgets this store's confirmed uids below the mark (exactly once, no time window).
        body = {"qmgr": self.qm.name, "origin": self.qm.origin, "settled": self.qm.settled_below(), **body}
        try:
            try:
                return self._exchange(path, body, expect)
            except ServerRefused as exc:
                if exc.code != "hello-required":
                    raise
                log.info("server asks for a new hello", extra={"event": "rehello", "path": path})
                self.hello()
                return self._exchange(path, body, expect)
        except SyncError:
            self._online = False
            self._hello_due = True
            raise

    def _exchange(self, path: str, body: dict[str, Any], expect: str) -> dict[str, Any]:
        """One request and its answer; the answer's ``now_ms`` (the server's clock, read
        while the request was there) becomes a sample of :attr:`server_clock`."""
        sent = self._monotonic()
        answer = self.transport.call(path, body, expect)
        self._sample(path, sent, answer.get("now_ms"), self._monotonic())
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
        """Handshake: learn the server's name and limits, and let it record this device's clock offset.

        It also restarts the bounds on the server's clock (:attr:`server_clock`) from
        this exchange."""
        # Not under self._lock: the confirmer thread may need a hello mid-push.
        sent = self._clock()
        started = self._monotonic()
        body = self.transport.call(
            p.PATH_HELLO,
            {"type": "hello", "qmgr": self.qm.name, "now_ms": sent, "agent": f"edgeq/{__version__}"},
            "hello",
        )
        received = self._monotonic()
        now = self._clock()
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
        except p.ProtocolError as exc:
            raise Unreachable(f"bad hello answer from {self.transport.server_url}: {exc.detail}") from exc
        self.server_clock.reset()
        self.server_clock.add(started, server_now, received)
        self._hello = info
        self._hello_due = False
        self._online = True
        log.info(
            "hello %s", info.server,
            extra={"event": "hello", "server": info.server, "offset_ms": info.offset_ms, "rtt_ms": info.rtt_ms},
        )
        return info

    def _ensure_hello(self) -> HelloInfo:
        if self._hello is None or self._hello_due:
            return self.hello()
        return self._hello

    # -- push ------------------------------------------------------------------------------

    def push_once(self, *, progress: Callable[[Progress], None] | None = None) -> PushReport:
        """Transmit every remote queue addressed to this server until none is left,
        or until a failure (``report.error``); never raises for network problems."""
        report = PushReport()
        started = time.monotonic()
        forbidden: list[str] = []
        with self._lock:
            try:
                server = self._ensure_hello().server
                for attrs in self.qm.remote_queues():
                    if attrs.target_qmgr != server:
                        log.debug("skip %s: it targets %s", attrs.name, attrs.target_qmgr,
                                  extra={"event": "skip", "queue": attrs.name, "target": attrs.target_qmgr})
                        continue
                    try:
                        self._push_queue(attrs, report, progress or self.progress)
                    except ServerRefused as exc:
                        if exc.code != "forbidden":
                            raise
                        # Not this device's queue to push to: the others still go.
                        forbidden.append(str(exc))
                        log.warning("push of %s forbidden: %s", attrs.name, exc.detail,
                                    extra={"event": "forbidden", "queue": attrs.name, "detail": exc.detail})
                if forbidden:
                    report.error = "; ".join(forbidden)
                if not report.refused and not report.requeued:
                    self._recovering = False
                    self._server_expired.clear()
                report.expiries_reported = self._report_expiries()
            except SyncError as exc:
                report.error = str(exc)
            report.seconds = time.monotonic() - started
            self.last_push = report
        level = logging.WARNING if report.error else logging.INFO if report.sent else logging.DEBUG
        log.log(
            level, "push: %d transmitted%s", report.transmitted, f" ({report.error})" if report.error else "",
            extra={"event": "push", "sent": report.sent, "transmitted": report.transmitted,
                   "duplicates": report.duplicates, "expired": report.expired, "refused": report.refused,
                   "requeued": report.requeued, "batches": report.batches, "seconds": round(report.seconds, 3),
                   "error": report.error},
        )
        return report

    def _report_expiries(self) -> int:
        """Send this device's journaled expiries to the server, then trim them (a
        device journal is an outbox); returns how many were sent. At-least-once:
        the server keeps a report received twice once.

        Each expiry goes under the queue name the *server* knows: a remote queue's
        target queue, a home-server queue's ``<device>.<queue>`` on the server. The
        outbox is trimmed once the server has answered every entry (``recorded``,
        ``already``, ``ignored`` or ``refused``; refusals are logged, event
        ``expiry-refused``), so one bad entry can never hold up the rest."""
        if self.qm.journal_mode != "device":
            return 0
        sent = 0
        limit = min(self.batch_size, self._ensure_hello().max_batch)
        names = self._server_queue_names()
        while entries := [e for e in self.qm.journal_since(0, limit) if e.kind == "expired"]:
            wire = p.encode_expiries([replace(e, queue=names.get(e.queue, e.queue)) for e in entries])
            body = {"type": "expiries", "now_ms": self._clock(), "entries": wire}
            answer = self._call(p.PATH_EXPIRIES, body, "expiries")
            if "results" in answer:  # an older server answers only with a count
                results = self._results(answer, p.EXPIRY_STATUSES)
                if [u for u, _, _ in results] != [w["u"] for w in wire]:
                    raise Unreachable("the server's answer does not match the expiries sent")
                for (uid, status, why), sent_entry in zip(results, wire, strict=True):
                    if status == "refused":
                        log.warning(
                            "expiry of %s on %s refused: %s", uid, sent_entry["q"], why,
                            extra={"event": "expiry-refused", "uid": uid, "queue": sent_entry["q"],
                                   "why": why or "refused"},
                        )
            self.qm.journal_trim(entries[-1].id)
            sent += len(entries)
        return sent

    def _server_queue_names(self) -> dict[str, str]:
        """Local queue name -> the name the server knows it by, where they differ: a
        remote queue's target queue, a home-server queue's ``<device>.<queue>``."""
        names = {a.name: a.target_queue for a in self.qm.remote_queues() if a.target_queue}
        for attrs in self.qm.home_server_queues():
            with contextlib.suppress(ValueError):  # too long to be pulled: left as it is
                names[attrs.name] = p.device_queue_name(self.qm.name, attrs.name)
        return names

    def _push_queue(
        self, attrs: QueueAttributes, report: PushReport, progress: Callable[[Progress], None] | None
    ) -> None:
        """Push one remote queue as a two-deep pipeline: batch N+1's put overlaps batch
        N's confirm and local delete (each still one transaction per stage)."""
        name, target = attrs.name, attrs.target_queue or attrs.name
        last_shown = time.monotonic()
        started, done_at_start = last_shown, report.transmitted
        inflight: Future[list[tuple[str, str, str | None]]] | None = None
        inflight_uids: set[MessageUID] = set()
        self._fresh_clock_bounds()
        try:
            while True:
                read_ms = self._clock()  # remaining expiry is measured from (about) now
                read_mono = self._monotonic()  # and no earlier than this instant
                want = self.batch_size + len(inflight_uids)  # the store still holds the batch in flight
                batch = self.qm.next_for_transmission(name, want)
                drained = len(batch) < want
                batch = [m for m in batch if m.uid not in inflight_uids and m.uid not in self._server_expired]
                batch = batch[: self.batch_size]
                to_confirm: list[str] = []
                for chunk in self._chunks(batch, report):
                    to_confirm += self._put_stage(target, chunk, read_ms, read_mono, report)
                report.batches += bool(batch)
                moved = True
                if inflight is not None:
                    moved = self._settle(inflight.result(), report) > 0
                    inflight, inflight_uids = None, set()
                if to_confirm:
                    inflight = self._confirmer.submit(self._confirm_stage, name, target, to_confirm)
                    inflight_uids = {MessageUID.parse(u) for u in to_confirm}
                if progress is not None and time.monotonic() - last_shown >= self.progress_interval_s:
                    last_shown = time.monotonic()
                    self._show(progress, name, report.transmitted - done_at_start, started)
                if drained or not to_confirm or not moved:
                    break  # empty, or nothing moves (all refused or unknown): try again next round
            if inflight is not None:
                self._settle(inflight.result(), report)
                inflight = None
        except BaseException:
            if inflight is not None:  # never leave a confirm running; the first error is what counts
                with contextlib.suppress(SyncError):
                    self._settle(inflight.result(), report)
            raise
        if progress is not None and report.transmitted > done_at_start:
            self._show(progress, name, report.transmitted - done_at_start, started)

    def _show(self, progress: Callable[[Progress], None], queue: str, done: int, started: float) -> None:
        try:
            left: int | None = self.qm.depth(queue)
        except EdgeqError:
            left = None
        elapsed = time.monotonic() - started
        progress(Progress(queue, done, left, done / elapsed if elapsed > 0 else 0.0))

    def _chunks(self, batch: Sequence[Message], report: PushReport) -> Iterator[list[Message]]:
        """Split a batch so each request stays under the server's body limit."""
        assert self._hello is not None
        limit = self._hello.max_body_bytes * 9 // 10
        count_limit = self._hello.max_batch
        chunk: list[Message] = []
        size = 0
        for message in batch:
            weight = _weight(message)
            if weight > limit:
                report.refused += 1
                self._refusal(report, str(message.uid), f"larger than the server's request limit ({limit} bytes)")
                continue
            if chunk and (size + weight > limit or len(chunk) >= count_limit):
                yield chunk
                chunk, size = [], 0
            chunk.append(message)
            size += weight
        if chunk:
            yield chunk

    def _refusal(self, report: PushReport, uid: str, why: str) -> None:
        if len(report.refusals) < _MAX_REFUSALS_KEPT:
            report.refusals.append((uid, why))
        log.warning("refused %s: %s", uid, why, extra={"event": "refused", "uid": uid, "why": why})

    def _put_stage(
        self, target: str, chunk: list[Message], read_ms: int, read_mono: float, report: PushReport
    ) -> list[str]:
        """Stage one for a chunk whose remaining lifetimes were read at ``read_ms`` (device
        clock), no earlier than monotonic ``read_mono``; returns the uids to confirm."""
        wire = []
        for message in chunk:
            assert message.uid is not None
            resend = self._recovering or message.uid in self._attempted
            wire.append(p.WireMessage.from_message(message, resend=resend).to_wire())
            self._attempted.add(message.uid)
        epoch = self.server_clock.epoch
        body = {"type": "put", "now_ms": read_ms, "queue": target, "messages": wire,
                **self._server_ms(read_mono)}
        results = self._results(self._call(p.PATH_PUT, body, "put"), _PUT_STATUSES, chunk)
        report.sent += len(chunk)
        if self.server_clock.epoch != epoch:
            results = self._put_again(target, chunk, results, read_ms, read_mono, report)
        to_confirm: list[str] = []
        for uid, status, why in results:
            if status in ("stored", "replaced", "unconfirmed", "duplicate"):
                # A duplicate is confirmed too: confirming is harmless, and it
                # settles an unconfirmed copy the server already held.
                to_confirm.append(uid)
                report.duplicates += status in ("unconfirmed", "duplicate")
            elif status == "expired":
                report.expired += 1
                self._server_expired.add(MessageUID.parse(uid))
            else:
                report.refused += 1
                self._refusal(report, uid, why or "refused")
        return to_confirm

    def _server_ms(self, read_mono: float) -> dict[str, int]:
        """The put's ``server_ms``: the lower bound of the server's clock at ``read_mono``
        (nothing while there are no bounds: the server then uses the hello's offset)."""
        if self.server_clock.empty:
            return {}
        return {"server_ms": self.server_clock.lower(read_mono)}

    def _put_again(
        self, target: str, chunk: list[Message], results: list[tuple[str, str, str | None]], read_ms: int,
        read_mono: float, report: PushReport,
    ) -> list[tuple[str, str, str | None]]:
        """The bounds on the server's clock restarted while a put was prepared or under way
        (its answer showed the server's clock had stepped, or a new hello): the deadlines
        that put set may be late. The copies it stored are still locked and unconfirmed,
        so put them once more, as resends, rebased on the new bounds; returns the results
        with those of the second put in place of the first's."""
        again = [m for m, (_, status, _) in zip(chunk, results, strict=True)
                 if status in ("stored", "replaced", "unconfirmed")]
        if not again or self.server_clock.empty:
            return results
        wire = [p.WireMessage.from_message(m, resend=True).to_wire() for m in again]
        body = {"type": "put", "now_ms": read_ms, "queue": target, "messages": wire, **self._server_ms(read_mono)}
        log.info("put %d message(s) again, rebased on new bounds of the server's clock", len(again),
                 extra={"event": "put-again", "queue": target, "count": len(again)})
        answer = self._call(p.PATH_PUT, body, "put")
        redone = {u: (u, s, w) for u, s, w in self._results(answer, _PUT_STATUSES, again)}
        report.sent += len(again)
        return [redone.get(uid, (uid, status, why)) for uid, status, why in results]

    def _fresh_clock_bounds(self) -> None:
        """Before a push: bounds last sampled more than STALE_AFTER_S ago have widened by
        the drift allowance (12 ms each way by then, and growing): a hello samples the
        server's clock afresh, so a push after a long quiet spell loses no lifetime to it."""
        age = self.server_clock.age_s(self._monotonic())
        if age is None or age > STALE_AFTER_S:
            self.hello()

    def _confirm_stage(self, name: str, target: str, uids: list[str]) -> list[tuple[str, str, str | None]]:
        """Stage two (in the confirmer thread): confirm, then delete the local copies the
        server confirmed, in one local transaction."""
        body = {"type": "confirm", "now_ms": self._clock(), "queue": target, "uids": uids}
        results = self._results(self._call(p.PATH_CONFIRM, body, "confirm"), _CONFIRM_STATUSES)
        done = [uid for uid, status, _ in results if status in ("confirmed", "already")]
        if done:
            self.qm.transmitted(name, done)
        return results

    def _settle(self, results: list[tuple[str, str, str | None]], report: PushReport) -> int:
        """Account for a finished confirm stage; returns how many were transmitted."""
        done = 0
        for uid, status, why in results:
            if status in ("confirmed", "already"):
                done += 1
                self._attempted.discard(MessageUID.parse(uid))
            elif status == "expired":
                report.expired += 1
                self._server_expired.add(MessageUID.parse(uid))
            elif status == "unknown":
                report.requeued += 1
            else:
                report.refused += 1
                self._refusal(report, uid, why or "refused")
        report.transmitted += done
        return done

    @staticmethod
    def _results(
        body: dict[str, Any], allowed: Sequence[str], sent: Sequence[Message] | None = None
    ) -> list[tuple[str, str, str | None]]:
        try:
            results = p.decode_results(body, allowed)
        except p.ProtocolError as exc:
            raise Unreachable(f"bad answer from the server: {exc.detail}") from exc
        if sent is not None and [u for u, _, _ in results] != [str(m.uid) for m in sent]:
            raise Unreachable("the server's answer does not match the messages sent")
        return results

    def _transmit(self, queue: str) -> None:
        """The queue manager's transmitter, for ``mode="sync"`` remote queues: push now or raise."""
        with self._lock:
            attrs = self.qm.queue_attributes(queue)
            server = self._ensure_hello().server
            if attrs.target_qmgr != server:
                raise SyncError(f"queue {queue!r} targets {attrs.target_qmgr}, but this agent's server is {server}")
            report = PushReport()
            self._push_queue(attrs, report, None)
            if report.refused or report.expired or report.requeued:
                why = "; ".join(w for _, w in report.refusals) or "not every message was accepted"
                raise SyncError(f"{server} did not take the message: {why}")

    # -- pull --------------------------------------------------------------------------------

    def pull_once(self) -> PullReport:
        """Fetch every home-server queue's messages from the server (assured get, then
        a local assured put, then a confirm to the server). Never raises for network problems."""
        report = PullReport()
        with self._lock:
            try:
                server = self._ensure_hello().server
                for attrs in self.qm.home_server_queues():
                    if attrs.server == server:
                        self._pull_queue(attrs.name, report)
            except SyncError as exc:
                report.error = str(exc)
            self.last_pull = report
        if report.batches or report.error:
            log.log(
                logging.WARNING if report.error else logging.INFO, "pull: %d received", report.received,
                extra={"event": "pull", "received": report.received, "duplicates": report.duplicates,
                       "expired": report.expired, "refused": report.refused,
                       "acknowledged": report.acknowledged, "error": report.error},
            )
        return report

    def _pull_queue(self, name: str, report: PullReport) -> None:
        assert self._hello is not None
        limit = min(self.batch_size, self._hello.max_batch)
        while True:
            asked = self._monotonic()
            body = self._call(p.PATH_PULL, {"type": "pull", "now_ms": self._clock(), "queue": name, "max": limit}, "pull")
            now = self._clock()  # the deadlines count from here: read before ``answered``
            answered = self._monotonic()
            try:
                wire = p.decode_messages(body, "messages", max_len=limit)
                sent = p.req_int(body, "now_ms", high=2**62)
            except p.ProtocolError as exc:
                raise Unreachable(f"bad pull answer from the server: {exc.detail}") from exc
            self._settle_pulled(name, body)
            if not wire:
                return
            report.batches += 1
            # The server measured the remaining lifetimes no earlier than its clock read
            # ``sent``: at most this long ago, by the bounds on its clock (this exchange's own
            # included), so ``now + x - transit`` is never later than its deadline.
            transit = self.server_clock.read_age_ms(sent, asked, answered)
            messages = [w.to_message(now, transit, resend=True) for w in wire]
            ack: list[str] = []
            to_confirm = []
            for result in self.qm.put_each(name, messages, confirm_id=secrets.randbelow(2**63 - 1) + 1):
                if result.status in ("stored", "replaced", "unconfirmed"):
                    to_confirm.append(result.uid)
                elif result.status == "duplicate":
                    report.duplicates += 1
                    ack.append(str(result.uid))
                elif result.status == "expired":
                    report.expired += 1
                    ack.append(str(result.uid))
                else:
                    report.refused += 1
            for confirmed in self.qm.confirm_put_each(name, to_confirm) if to_confirm else []:
                if confirmed.status in ("confirmed", "already", "expired"):
                    ack.append(str(confirmed.uid))
                    report.received += confirmed.status == "confirmed"
                    report.expired += confirmed.status == "expired"
            if ack:
                answer = self._call(
                    p.PATH_PULL_CONFIRM,
                    {"type": "pull-confirm", "now_ms": self._clock(), "queue": name, "uids": ack}, "pull-confirm",
                )
                report.acknowledged += sum(s == "confirmed" for _, s, _ in self._results(answer, _PULL_CONFIRM_STATUSES))
            if not body.get("more") or not ack:
                return

    def _settle_pulled(self, name: str, body: dict[str, Any]) -> None:
        """Forget the pulled uids the server can no longer offer again (below what it
        holds, per origin): the device remembers exactly what is still in doubt."""
        held = body.get("held")
        if held is None:
            return  # an older server: pulled uids are forgotten by age
        if not isinstance(held, dict) or not all(
            isinstance(o, str) and isinstance(s, int) and not isinstance(s, bool) for o, s in held.items()
        ):
            raise Unreachable("bad pull answer from the server: 'held' must map origins to stamps")
        try:
            self.qm.settle_queue(name, held)
        except EdgeqError as exc:
            raise Unreachable(f"bad pull answer from the server: 'held': {exc}") from exc

    # -- daemon ------------------------------------------------------------------------------

    def _on_put(self) -> None:
        if self._online:
            self._wake.set()

    def start(self, interval_s: float = 5.0) -> None:
        """Run in the background: a cycle (push, then pull) every ``interval_s`` seconds
        (APScheduler), at once after a put while online, and with exponential backoff
        plus jitter after a failure. :meth:`stop` ends it."""
        if interval_s <= 0:
            raise ValueError(f"interval_s must be positive, not {interval_s!r}")
        if self._worker is not None:
            raise RuntimeError("the sync agent is already running")
        from apscheduler.schedulers.background import BackgroundScheduler

        self._stop.clear()
        for attrs in self.qm.remote_queues():
            rule = _WakeRule(self)
            self.qm.add_rule(attrs.name, rule)
            self._rules.append((attrs.name, rule))
        scheduler = BackgroundScheduler(daemon=True)
        scheduler.add_job(self._wake.set, "interval", seconds=interval_s, id="edgeq-sync-tick",
                          max_instances=1, coalesce=True)
        scheduler.start()
        self._scheduler = scheduler
        self._worker = threading.Thread(target=self._loop, name="edgeq-sync-agent", daemon=True)
        self._worker.start()
        log.info("agent started", extra={"event": "start", "server": self.transport.server_url,
                                         "interval_s": interval_s})

    def run(self, interval_s: float = 5.0) -> None:
        """:meth:`start`, then block until :meth:`stop` (or Ctrl-C)."""
        self.start(interval_s)
        try:
            self._stop.wait()
        finally:
            self.stop()

    def request_stop(self) -> None:
        """Ask :meth:`run` to return (safe from a signal handler); it stops the agent."""
        self._stop.set()
        self._wake.set()

    def stop(self) -> None:
        """Stop the background cycle, waiting for one in progress. No-op if not running."""
        self._stop.set()
        self._wake.set()
        scheduler, self._scheduler = self._scheduler, None
        if scheduler is not None:
            scheduler.shutdown(wait=True)
        worker, self._worker = self._worker, None
        if worker is not None and worker is not threading.current_thread():
            worker.join()
        for queue, rule in self._rules:
            self.qm.remove_rule(queue, rule)
        self._rules.clear()

    def _loop(self) -> None:
        failures = 0
        while not self._stop.is_set():
            ok = self._cycle()
            if ok:
                failures = 0
                self._wake.wait()
                self._wake.clear()
            else:
                failures += 1
                base, most = self._backoff
                delay = min(most, base * 2 ** min(failures - 1, 30))
                delay = random.uniform(delay / 2, delay)  # jitter: devices do not retry in step
                log.info("retry in %.1fs", delay, extra={"event": "backoff", "failures": failures,
                                                          "delay_s": round(delay, 3)})
                self._stop.wait(delay)

    def _cycle(self) -> bool:
        try:
            push = self.push_once()
            if not push.ok:
                return False
            return not self.pull_enabled or self.pull_once().ok
        except Exception:
            log.exception("sync cycle failed", extra={"event": "cycle-error"})
            return False


def _weight(message: Message) -> int:
    """An upper bound on a message's encoded size, to split batches under the body limit."""
    size = len(message.data) + _PER_MESSAGE_OVERHEAD + len(message.correlation_id or b"")
    for name, value in message.fields.items():
        size += len(name) + 16 + (len(value) if isinstance(value, (str, bytes)) else 8) * (
            4 if isinstance(value, str) else 1
        )
    return size

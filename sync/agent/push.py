"""The device's push: every remote queue addressed to the home server, as MQe's two-stage
transmission (put, confirm, local delete), two batches deep. Queues fail alone (docs/protocol.md)."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from edgeq.errors import EdgeqError
from edgeq.exchange.transmit import DEFAULT_REFUSAL_LIMIT
from edgeq.message import Message
from edgeq.queues.attributes import QueueAttributes
from edgeq.sync import messages as wm
from edgeq.sync import protocol as p
from edgeq.sync.agent.clockbounds import STALE_AFTER_S
from edgeq.sync.agent.expiries import ExpiryReporter
from edgeq.sync.agent.health import QUEUE_CODES
from edgeq.sync.agent.link import Results, ServerLink, decode_results, failure_code
from edgeq.sync.agent.reports import Progress, PushReport, QueueReport
from edgeq.sync.agent.transport import SyncError
from edgeq.sync.refusals import forbidden_hint, plain_refusal, refusal_code, refusal_hint
from edgeq.types import CONFIRM_STATUSES, PUT_STATUSES
from edgeq.uid import MessageUID

__all__ = ["Pusher"]

log = logging.getLogger("edgeq.sync.agent")

_PER_MESSAGE_OVERHEAD = 96  # bytes of CBOR keys, uid, numbers per message (generous)
_MAX_REFUSALS_KEPT = 100
_MAX_SKIPPED = 50_000  # messages refused in one push, not offered again until the next: past this, stop
_READ_AHEAD = 4  # batches read at once: the batch in flight is read past once per read, not per batch
_READ_AHEAD_BYTES = 16 * 1024 * 1024  # ... unless the messages last read were larger than this allows


class Pusher:
    """Push the remote queues of the link's queue manager to its server, remembering across pushes
    which messages were put (a resend next) or discarded as expired. :meth:`close` stops the confirmer."""

    def __init__(self, link: ServerLink, expiries: ExpiryReporter) -> None:
        self.link = link
        self.qm = link.qm
        self.expiries = expiries
        #: at least this long (seconds) between two calls of a push's progress callback
        self.progress_interval_s = 1.0
        #: what the last :meth:`push_once` did
        self.last: PushReport | None = None
        # Messages put (stage one) and not yet known to be transmitted: a re-put
        # carries resend. Until the first complete push, every put is a possible
        # re-put (an earlier process may have sent it before crashing).
        self._attempted: set[MessageUID] = set()
        self._recovering = True
        # The server discarded these as expired: never put them again (they
        # expire here too, within the clocks' disagreement).
        self._server_expired: set[MessageUID] = set()
        # Refused since they were last counted: (uid, why), counted after each stage.
        self._pending: list[tuple[str, str]] = []
        self._target = ""  # the server's queue of the remote queue being pushed (for refusal reasons)
        self._compression: str | None = None  # the codec of the remote queue being pushed (its attribute)
        self._confirmer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="edgeq-sync-confirm")
        self._weight_seen = _PER_MESSAGE_OVERHEAD  # the largest message of the last read (_weight)

    def close(self) -> None:
        """Wait for a confirm in flight, then stop the confirmer thread."""
        self._confirmer.shutdown(wait=True)

    def push_once(
        self, progress: Callable[[Progress], None] | None = None, *, due_only: bool = False
    ) -> PushReport:
        """Transmit every remote queue addressed to this server until none is left or a failure
        (``report.error``); never raises for network problems. ``due_only``: as :meth:`Puller.pull_once`."""
        report = PushReport()
        started = time.monotonic()
        health = self.link.health
        with self.link.lock:
            try:
                server = self.link.ensure_hello().server
                health.agent(server=server, stopped=False, next_retry_ms=None)
                failed: list[str] = []  # queues whose requests the server refused
                waiting = False  # a queue was left to its own backoff
                for attrs in self.qm.remote_queues():
                    if attrs.target_qmgr != server:
                        log.debug("skip %s: it targets %s", attrs.name, attrs.target_qmgr,
                                  extra={"event": "skip", "queue": attrs.name, "target": attrs.target_qmgr})
                        continue
                    if due_only and not health.due(attrs.name, "push"):
                        waiting = True
                    elif self._push_one(attrs, server, report, progress):
                        failed.append(f"{attrs.name}: {report.queues[attrs.name].error}")
                report.error = "; ".join(failed) or None
                if not report.refused and not report.requeued and not waiting and not failed:
                    self._recovering = False
                    self._server_expired.clear()
                report.expiries_reported = self.expiries.report()
            except SyncError as exc:
                report.error, report.stopped = str(exc), True
                health.agent(stopped=True, last_error=str(exc), last_error_code=failure_code(exc),
                             last_error_ms=self.link.clock())
            report.seconds = time.monotonic() - started
            self.last = report
            health.flush()
        level = logging.WARNING if report.error else logging.INFO if report.sent else logging.DEBUG
        log.log(
            level, "push: %d transmitted%s", report.transmitted, f" ({report.error})" if report.error else "",
            extra={"event": "push", "sent": report.sent, "transmitted": report.transmitted,
                   "duplicates": report.duplicates, "expired": report.expired, "refused": report.refused,
                   "dead_lettered": report.dead_lettered, "requeued": report.requeued,
                   "batches": report.batches,
                   "seconds": round(report.seconds, 3), "error": report.error},
        )
        return report

    def _push_one(
        self, attrs: QueueAttributes, server: str, report: PushReport,
        progress: Callable[[Progress], None] | None,
    ) -> bool:
        """Push one queue and record how it went; return whether the server refused its requests
        (it fails alone). A server that cannot be reached, or refuses this device, raises."""
        name, target = attrs.name, attrs.target_queue or attrs.name
        queue = report.queues[name] = QueueReport(name, "push")
        before = (report.transmitted, report.refused, report.dead_lettered, report.dlq_kept)
        last_why, refused_request = None, False
        try:
            last_why = self._push_queue(attrs, report, progress)
        except SyncError as exc:
            refused_request = True
            queue.code = failure_code(exc)
            queue.error = str(exc)
            if queue.code not in QUEUE_CODES:
                self._tally(queue, report, before)
                self.link.health.failed(name, "push", queue.code, queue.error, moved=queue.moved > 0)
                raise
            if queue.code == "forbidden":
                queue.error = forbidden_hint(self.qm.name, server, target, queue.error)
            log.warning("push of %s refused by the server: %s", name, queue.error,
                        extra={"event": queue.code, "queue": name, "detail": str(exc)})
        self._tally(queue, report, before)
        if queue.error is None and queue.refused and last_why is not None:
            queue.code = refusal_code(last_why)
            limit = DEFAULT_REFUSAL_LIMIT if attrs.refusal_limit is None else attrs.refusal_limit
            queue.error = refusal_hint(server, target, queue.code, last_why, limit,
                                       dlq=self.qm.dead_letter_queue(), refused=queue.refused,
                                       moved=queue.dead_lettered, kept=queue.dlq_kept)
            log.warning("%d message(s) of %s refused (%s): %s", queue.refused, name, queue.code, queue.error,
                        extra={"event": "refused", "queue": name, "target": target, "count": queue.refused,
                               "dead_lettered": queue.dead_lettered, "dlq_kept": queue.dlq_kept,
                               "code": queue.code, "why": last_why})
        if queue.dead_lettered:
            self.link.health.moved_to_dlq(name, queue.dead_lettered)
        if queue.error is None:
            self.link.health.succeeded(name, "push")
        else:
            self.link.health.failed(name, "push", queue.code or "refused", queue.error, moved=queue.moved > 0)
        return refused_request

    @staticmethod
    def _tally(queue: QueueReport, report: PushReport, before: tuple[int, int, int, int]) -> None:
        queue.moved = report.transmitted - before[0]
        queue.refused = report.refused - before[1]
        queue.dead_lettered = report.dead_lettered - before[2]
        queue.dlq_kept = report.dlq_kept - before[3]

    def _push_queue(
        self, attrs: QueueAttributes, report: PushReport, progress: Callable[[Progress], None] | None,
        *, count_refusals: bool = True,
    ) -> str | None:
        """Push one remote queue, batch N+1's put overlapping batch N's confirm and local delete.
        Refused messages are counted and not offered again in this push; returns the last refusal's reason."""
        name, target = attrs.name, attrs.target_queue or attrs.name
        last_shown = time.monotonic()
        started, done_at_start = last_shown, report.transmitted
        inflight: Future[Results] | None = None
        inflight_uids: set[MessageUID] = set()
        skipped: set[MessageUID] = set()  # refused in this push: offered again at the next
        self._target, self._compression = target, attrs.compression
        last_why: str | None = None
        ahead: list[Message] = []  # read, not put yet: the next batches
        read_ms, read_mono, all_read, waiting = 0, 0.0, False, 0
        self._pending.clear()
        self._fresh_clock_bounds()
        try:
            while True:
                if not ahead:
                    read_ms = self.link.clock()  # remaining expiry is measured from (about) now
                    read_mono = self.link.monotonic()  # and no earlier than this instant
                    ahead, all_read = self._read_ahead(name, inflight_uids, skipped)
                    waiting = self._depth(name) - len(inflight_uids)  # the backlog: not being confirmed
                batch, ahead = ahead[: self.link.batch_size], ahead[self.link.batch_size :]
                drained = all_read and not ahead
                to_confirm: list[str] = []
                for chunk in self._chunks(batch, report):
                    to_confirm += self._put_stage(target, chunk, read_ms, read_mono, report, max(0, waiting))
                waiting -= len(batch)
                report.batches += bool(batch)
                moved = True
                if inflight is not None:
                    moved = self._settle(inflight.result(), report) > 0
                    inflight, inflight_uids = None, set()
                last_why = self._count_refusals(name, skipped, report, count_refusals) or last_why
                if to_confirm:
                    inflight = self._confirmer.submit(self._confirm_stage, name, target, to_confirm,
                                                      attrs.compression)
                    inflight_uids = set(p.parse_uids(to_confirm))
                if progress is not None and time.monotonic() - last_shown >= self.progress_interval_s:
                    last_shown = time.monotonic()
                    self._show(progress, name, report.transmitted - done_at_start, started)
                if drained or not to_confirm or not moved or len(skipped) >= _MAX_SKIPPED:
                    break  # empty, or nothing moves (all refused or unknown): try again next round
            if inflight is not None:
                self._settle(inflight.result(), report)
                inflight = None
            last_why = self._count_refusals(name, skipped, report, count_refusals) or last_why
        except BaseException:
            if inflight is not None:  # never leave a confirm running; the first error is what counts
                with contextlib.suppress(SyncError):
                    self._settle(inflight.result(), report)
            with contextlib.suppress(EdgeqError):  # what was refused so far still counts
                self._count_refusals(name, skipped, report, count_refusals)
            raise
        if progress is not None and report.transmitted > done_at_start:
            self._show(progress, name, report.transmitted - done_at_start, started)
        return last_why

    def _read_ahead(self, name: str, inflight: set[MessageUID],
                    skipped: set[MessageUID]) -> tuple[list[Message], bool]:
        """The next batches of ``name`` (up to :data:`_READ_AHEAD`, within :data:`_READ_AHEAD_BYTES`)
        and whether that is all it holds; read past what is in flight or refused, still stored."""
        size = self.link.batch_size
        batches = max(1, min(_READ_AHEAD, _READ_AHEAD_BYTES // max(1, size * self._weight_seen)))
        want = size * batches + len(inflight) + len(skipped)
        read = self.qm.exchange.next_for_transmission(name, want)
        if read:
            self._weight_seen = max(_weight(m) for m in read)
        return [m for m in read if m.uid not in inflight and m.uid not in self._server_expired
                and m.uid not in skipped], len(read) < want

    def _count_refusals(self, name: str, skipped: set[MessageUID], report: PushReport,
                        count: bool) -> str | None:
        """Count the refusals since the last call in the store (one transaction), moving
        those at their limit to the dead-letter queue; returns the last reason, if any."""
        pending, self._pending = self._pending, []
        if not pending:
            return None
        skipped.update(p.parse_uids(uid for uid, _ in pending))
        if count:
            why = dict(pending)
            outcomes = self.qm.exchange.refused(name, pending)
            dlq = self.qm.dead_letter_queue() if any(o.dead_lettered for o in outcomes) else ""
            for outcome in outcomes:
                if outcome.dead_lettered:
                    report.dead_lettered += 1
                    self._attempted.discard(outcome.uid)
                    log.warning("%s of %s refused %d times: moved to dead-letter queue %s", outcome.uid, name,
                                outcome.count, dlq,
                                extra={"event": "dead-lettered", "queue": name, "uid": str(outcome.uid),
                                       "refusals": outcome.count, "why": why.get(str(outcome.uid)),
                                       "dlq": dlq})
                elif outcome.kept:
                    report.dlq_kept += 1
        return pending[-1][1]

    def _show(self, progress: Callable[[Progress], None], queue: str, done: int, started: float) -> None:
        try:
            left: int | None = self.qm.depth(queue)
        except EdgeqError:
            left = None
        elapsed = time.monotonic() - started
        progress(Progress(queue, done, left, done / elapsed if elapsed > 0 else 0.0))

    def _chunks(self, batch: Sequence[Message], report: PushReport) -> Iterator[list[Message]]:
        """Split a batch so each request stays under the server's body limit."""
        limit = self.link.info.max_body_bytes * 9 // 10
        count_limit = self.link.info.max_batch
        chunk: list[Message] = []
        size = 0
        for message in batch:
            weight = _weight(message)
            if weight > limit:
                report.refused += 1
                self._refusal(report, str(message.uid),
                              f"larger than the server's request limit ({limit} bytes)")
                continue
            if chunk and (size + weight > limit or len(chunk) >= count_limit):
                yield chunk
                chunk, size = [], 0
            chunk.append(message)
            size += weight
        if chunk:
            yield chunk

    def _refusal(self, report: PushReport, uid: str, why: str) -> None:
        why = plain_refusal(why, self.link.info.server, self._target)
        if len(report.refusals) < _MAX_REFUSALS_KEPT:
            report.refusals.append((uid, why))
        self._pending.append((uid, why))
        # One warning per queue and push says what to do (Pusher._push_one); each here is detail.
        log.debug("refused %s: %s", uid, why, extra={"event": "refused-message", "uid": uid, "why": why})

    def _depth(self, name: str) -> int:
        """Messages queue ``name`` holds, as stored (in flight and refused ones included): one read."""
        return next((q.depth for q in self.qm.store_usage().queues if q.name == name), 0)

    def _put_stage(
        self, target: str, chunk: list[Message], read_ms: int, read_mono: float, report: PushReport,
        waiting: int,
    ) -> list[str]:
        """Stage one for a chunk whose lifetimes were read at ``read_ms`` (device clock), no earlier than
        monotonic ``read_mono``, reporting ``waiting`` (the backlog); returns the uids to confirm."""
        wire = []
        for message in chunk:
            assert message.uid is not None
            resend = self._recovering or message.uid in self._attempted
            wire.append(wm.WireMessage.from_message(message, resend=resend).to_wire())
            self._attempted.add(message.uid)
        epoch = self.link.server_clock.epoch
        body = {"type": "put", "now_ms": read_ms, "queue": target, "messages": wire, "backlog": waiting,
                **self._server_ms(read_mono)}
        results = decode_results(self.link.call(p.PATH_PUT, body, "put", compression=self._compression),
                                 PUT_STATUSES, chunk)
        report.sent += len(chunk)
        if self.link.server_clock.epoch != epoch:
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
        (nothing without bounds: the server then uses the hello's offset)."""
        if self.link.server_clock.empty:
            return {}
        return {"server_ms": self.link.server_clock.lower(read_mono)}

    def _put_again(
        self, target: str, chunk: list[Message], results: Results, read_ms: int,
        read_mono: float, report: PushReport,
    ) -> Results:
        """The clock bounds restarted while a put was under way, so its deadlines may be late:
        put the still-unconfirmed copies again as resends, rebased; returns the second put's results."""
        again = [m for m, (_, status, _) in zip(chunk, results, strict=True)
                 if status in ("stored", "replaced", "unconfirmed")]
        if not again or self.link.server_clock.empty:
            return results
        wire = [wm.WireMessage.from_message(m, resend=True).to_wire() for m in again]
        body = {"type": "put", "now_ms": read_ms, "queue": target, "messages": wire,
                **self._server_ms(read_mono)}
        log.info("put %d message(s) again, rebased on new bounds of the server's clock", len(again),
                 extra={"event": "put-again", "queue": target, "count": len(again)})
        answer = self.link.call(p.PATH_PUT, body, "put", compression=self._compression)
        redone = {u: (u, s, w) for u, s, w in decode_results(answer, PUT_STATUSES, again)}
        report.sent += len(again)
        return [redone.get(uid, (uid, status, why)) for uid, status, why in results]

    def _fresh_clock_bounds(self) -> None:
        """Before a push, a hello if the bounds' latest sample is older than
        STALE_AFTER_S: a push after a quiet spell loses no lifetime to their widening."""
        age = self.link.server_clock.age_s(self.link.monotonic())
        if age is None or age > STALE_AFTER_S:
            self.link.hello()

    def _confirm_stage(self, name: str, target: str, uids: list[str],
                       compression: str | None = None) -> Results:
        """Stage two (confirmer thread): confirm, cut to the server's ``max_batch``, then
        delete the confirmed local copies in one transaction; ``compression``: the queue's."""
        limit = self.link.info.max_batch
        results: Results = []
        waiting = max(0, self._depth(name) - len(uids))  # the backlog once these are confirmed
        for start in range(0, len(uids), limit):
            body = {"type": "confirm", "now_ms": self.link.clock(), "queue": target,
                    "uids": uids[start : start + limit], "backlog": waiting}
            answer = self.link.call(p.PATH_CONFIRM, body, "confirm", compression=compression)
            results += decode_results(answer, CONFIRM_STATUSES)
        done = [uid for uid, status, _ in results if status in ("confirmed", "already")]
        if done:
            self.qm.exchange.transmitted(name, p.parse_uids(done))
        return results

    def _settle(self, results: Results, report: PushReport) -> int:
        """Account for a finished confirm stage; returns how many were transmitted."""
        done = 0
        origins: set[str] = set()  # each checked once (p.decode_uid)
        for uid, status, why in results:
            if status in ("confirmed", "already"):
                done += 1
                self._attempted.discard(p.decode_uid(uid, origins))
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

    def transmit(self, queue: str) -> None:
        """The queue manager's transmitter, for ``mode="sync"`` remote queues: push now or raise."""
        with self.link.lock:
            attrs = self.qm.queue_attributes(queue)
            server = self.link.ensure_hello().server
            if attrs.target_qmgr != server:
                raise SyncError(
                    f"queue {queue!r} targets {attrs.target_qmgr}, but this agent's server is {server}")
            report = PushReport()
            # Not counted: a sync-mode put that is not taken is taken back from the queue at once.
            self._push_queue(attrs, report, None, count_refusals=False)
            if report.refused or report.expired or report.requeued:
                why = "; ".join(w for _, w in report.refusals) or "not every message was accepted"
                raise SyncError(f"{server} did not take the message: {why}")


def _weight(message: Message) -> int:
    """An upper bound on a message's encoded size, to split batches under the body limit."""
    size = len(message.data) + _PER_MESSAGE_OVERHEAD + len(message.correlation_id or b"")
    for name, value in message.fields.items():
        size += len(name) + 16 + (len(value) if isinstance(value, (str, bytes)) else 8) * (
            4 if isinstance(value, str) else 1
        )
    return size

"""The device's pull: per home-server queue, an assured get on the server, an assured put here (a
batch offered again is stored once), then a pull-confirm. Queues fail alone (docs/protocol.md)."""

from __future__ import annotations

import logging
import secrets
from typing import Any

from edgeq.admin.wire import ADMIN_QUEUE
from edgeq.errors import EdgeqError
from edgeq.sync import messages as wm
from edgeq.sync import protocol as p
from edgeq.sync.agent.health import QUEUE_CODES
from edgeq.sync.agent.link import ServerLink, decode_results, failure_code
from edgeq.sync.agent.reports import PullReport, QueueReport
from edgeq.sync.agent.transport import SyncError, Unreachable
from edgeq.sync.refusals import missing_hint, refusal_code
from edgeq.types import MAX_CONFIRM_ID

__all__ = ["Puller"]

log = logging.getLogger("edgeq.sync.agent")


class Puller:
    """Pull the home-server queues of the link's queue manager from its server."""

    def __init__(self, link: ServerLink) -> None:
        self.link = link
        self.qm = link.qm

    def pull_once(self, *, due_only: bool = False) -> PullReport:
        """Fetch every home-server queue's messages from the server; never raises for network
        problems. With ``due_only`` (the daemon's cycles) a queue still in its backoff is left for later."""
        report = PullReport()
        health = self.link.health
        with self.link.lock:
            try:
                server = self.link.ensure_hello().server
                health.agent(server=server, stopped=False, next_retry_ms=None)
                failed: list[str] = []  # queues the server refused or does not hold
                for attrs in self.qm.home_server_queues():
                    if attrs.server == server and (not due_only or health.due(attrs.name, "pull")) and \
                            self._pull_one(attrs.name, server, report, attrs.compression):
                        failed.append(f"{attrs.name}: {report.queues[attrs.name].error}")
                report.error = "; ".join(failed) or None
            except SyncError as exc:
                report.error, report.stopped = str(exc), True
                health.agent(stopped=True, last_error=str(exc), last_error_code=failure_code(exc),
                             last_error_ms=self.link.clock())
            health.flush()
        if report.batches or report.error:
            log.log(
                logging.WARNING if report.error else logging.INFO, "pull: %d received", report.received,
                extra={"event": "pull", "received": report.received, "duplicates": report.duplicates,
                       "expired": report.expired, "refused": report.refused,
                       "acknowledged": report.acknowledged, "error": report.error},
            )
        return report

    def _pull_one(self, name: str, server: str, report: PullReport,
                  compression: str | None = None) -> bool:
        """Pull one queue and record how it went; return whether the server refused its requests
        or does not hold it (it fails alone)."""
        queue = report.queues[name] = QueueReport(name, "pull")
        before = (report.received, report.refused)
        missing, last_why, refused_request = False, None, False
        try:
            missing, last_why = self._pull_queue(name, report, compression)
            # The server makes a device's admin queue with the first request for it: until
            # then it holds none, and there is nothing to pull (docs/admin.md).
            missing = missing and name != ADMIN_QUEUE
        except SyncError as exc:
            refused_request = True
            queue.code = failure_code(exc)
            queue.error = str(exc)
            if queue.code not in QUEUE_CODES:
                queue.moved, queue.refused = report.received - before[0], report.refused - before[1]
                self.link.health.failed(name, "pull", queue.code, queue.error, moved=queue.moved > 0)
                raise
            log.warning("pull of %s refused by the server: %s", name, queue.error,
                        extra={"event": queue.code, "queue": name, "detail": str(exc)})
        queue.moved, queue.refused = report.received - before[0], report.refused - before[1]
        if missing:
            try:
                held = p.device_queue_name(self.qm.name, name)
            except ValueError:
                held = f"{self.qm.name}.{name}"
            queue.code = "no-queue"
            queue.error = missing_hint(server, held,
                                       f" (where it keeps {name} messages for {self.qm.name})")
            log.warning("pull of %s: %s", name, queue.error,
                        extra={"event": "no-queue", "queue": name, "held": held})
        elif queue.error is None and queue.refused and last_why is not None:
            queue.code = refusal_code(last_why)
            queue.error = (f"{queue.refused} pulled message(s) could not be stored here: {last_why}; "
                           "they stay on the server and are pulled again")
            log.warning("pull of %s: %s", name, queue.error,
                        extra={"event": "refused", "queue": name, "count": queue.refused, "code": queue.code})
        if queue.error is None:
            self.link.health.succeeded(name, "pull")
        else:
            self.link.health.failed(name, "pull", queue.code or "refused", queue.error,
                                    moved=queue.moved > 0)
        return refused_request or missing

    def _pull_queue(self, name: str, report: PullReport,
                    compression: str | None = None) -> tuple[bool, str | None]:
        """Pull one queue until the server has no more; return whether the server holds no such
        queue, and why the last message refused here was refused, if any."""
        limit = min(self.link.batch_size, self.link.info.max_batch)
        last_why: str | None = None
        while True:
            asked = self.link.monotonic()
            body = self.link.call(p.PATH_PULL,
                                  {"type": "pull", "now_ms": self.link.clock(), "queue": name, "max": limit},
                                  "pull", compression=compression)
            now = self.link.clock()  # the deadlines count from here: read before ``answered``
            answered = self.link.monotonic()
            try:
                wire = wm.decode_messages(body, "messages", max_len=limit)
                sent = p.req_int(body, "now_ms", high=2**62)
            except p.ProtocolError as exc:
                raise Unreachable(f"bad pull answer from the server: {exc.detail}") from exc
            self._settle_pulled(name, body)
            if not wire:
                return body.get("missing") is True, last_why
            report.batches += 1
            # The server measured the remaining lifetimes no earlier than its clock read
            # ``sent``: at most this long ago, by the bounds on its clock (this exchange's own
            # included), so ``now + x - transit`` is never later than its deadline.
            transit = self.link.server_clock.read_age_ms(sent, asked, answered)
            messages = [w.to_message(now, transit, resend=True) for w in wire]
            ack: list[str] = []
            to_confirm = []
            for result in self.qm.put_each(name, messages,
                                           confirm_id=secrets.randbelow(MAX_CONFIRM_ID) + 1):
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
                    last_why = result.detail or "refused"
            for confirmed in self.qm.confirm_put_each(name, to_confirm) if to_confirm else []:
                if confirmed.status in ("confirmed", "already", "expired"):
                    ack.append(str(confirmed.uid))
                    report.received += confirmed.status == "confirmed"
                    report.expired += confirmed.status == "expired"
            if ack:
                answer = self.link.call(
                    p.PATH_PULL_CONFIRM,
                    {"type": "pull-confirm", "now_ms": self.link.clock(), "queue": name, "uids": ack},
                    "pull-confirm", compression=compression,
                )
                report.acknowledged += sum(
                    s == "confirmed" for _, s, _ in decode_results(answer, p.PULL_CONFIRM_STATUSES))
            if not body.get("more") or not ack:
                return False, last_why

    def _settle_pulled(self, name: str, body: dict[str, Any]) -> None:
        """Forget the pulled uids the server can no longer offer again (below what it holds,
        per origin): the device remembers exactly what is still in doubt."""
        held = body.get("held")
        if held is None:
            return  # an older server: pulled uids are forgotten by age
        if not isinstance(held, dict) or not all(
            isinstance(o, str) and isinstance(s, int) and not isinstance(s, bool) for o, s in held.items()
        ):
            raise Unreachable("bad pull answer from the server: 'held' must map origins to stamps")
        try:
            self.qm.exchange.settle_queue(name, held)
        except EdgeqError as exc:
            raise Unreachable(f"bad pull answer from the server: 'held': {exc}") from exc

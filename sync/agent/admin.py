"""The sync agent's part in remote administration: after each hello, the device's two admin queues;
after each pull, the requests executed. See docs/admin.md, 'Transport'."""

from __future__ import annotations

import logging

from edgeq.admin.wire import ADMIN_QUEUE, ADMIN_REPLY_QUEUE
from edgeq.errors import EdgeqError, QueueExists
from edgeq.sync.agent.link import ServerLink
from edgeq.sync.agent.reports import PushReport, QueueReport

__all__ = ["AdminRelay", "merged"]

log = logging.getLogger("edgeq.sync.agent")


class AdminRelay:
    """Set up the admin queues of the link's queue manager and execute the requests pulled;
    ``enabled``: True always, False never, None once the device trusts an operator key."""

    def __init__(self, link: ServerLink, enabled: bool | None = None) -> None:
        self.link = link
        self.qm = link.qm
        self.enabled = enabled

    def active(self) -> bool:
        """Whether this device takes part in remote administration now."""
        if self.enabled is not None:
            return self.enabled
        return bool(self.qm.admin_keys())

    def prepare(self) -> None:
        """Define ``SYSTEM.ADMIN`` (filled from the last hello's server) and
        ``SYSTEM.ADMIN.REPLY`` (to it) if this device takes part and lacks them. Call it after a hello."""
        if not self.active():
            return
        server = self.link.info.server
        try:
            self._define(server)
        except EdgeqError as exc:
            log.error("the admin queues could not be defined: %s", exc,
                      extra={"event": "admin-failed", "detail": str(exc)})

    def _define(self, server: str) -> None:
        names = set(self.qm.queue_names())
        try:
            if ADMIN_QUEUE not in names:
                self.qm.define_home_server_queue(ADMIN_QUEUE, server=server)
                log.info("defined %s, filled from %s", ADMIN_QUEUE, server,
                         extra={"event": "admin-queue", "queue": ADMIN_QUEUE, "server": server})
            if ADMIN_REPLY_QUEUE not in names:
                self.qm.define_remote_queue(ADMIN_REPLY_QUEUE, target_qmgr=server)
                log.info("defined %s, transmitted to %s", ADMIN_REPLY_QUEUE, server,
                         extra={"event": "admin-queue", "queue": ADMIN_REPLY_QUEUE, "server": server})
        except QueueExists:
            pass  # defined meanwhile (another process on this store): as good
        attrs = self.qm.queue_attributes(ADMIN_QUEUE)
        if attrs.kind != "home" or attrs.server != server:
            log.warning(
                "%s is not a home-server queue of %s (it is a %s queue%s): no admin request from %s "
                "reaches this device; delete it (edgeq queue delete %s) to let the agent define it again",
                ADMIN_QUEUE, server, attrs.kind, f" of {attrs.server}" if attrs.server else "", server,
                ADMIN_QUEUE,
                extra={"event": "admin-queue-mismatch", "queue": ADMIN_QUEUE, "server": server})

    def process(self) -> int:
        """Execute the requests waiting on ``SYSTEM.ADMIN``, each once; return how many replies
        were queued. A failure is logged, not raised: the rest of the sync goes on."""
        attrs = next((a for a in self.qm.home_server_queues() if a.name == ADMIN_QUEUE), None)
        if attrs is None:
            return 0
        try:
            replies = self.qm.process_admin()
        except EdgeqError as exc:
            log.error("admin requests could not be executed: %s", exc,
                      extra={"event": "admin-failed", "detail": str(exc)})
            return 0
        for reply in replies:
            log.info("admin request %s: %s", reply.request_id, reply.rc,
                     extra={"event": "admin-executed", "request_id": reply.request_id, "rc": reply.rc})
        return len(replies)


def merged(first: PushReport, second: PushReport) -> PushReport:
    """One report for a cycle's two pushes (the second carries the admin replies): counts add up; a
    queue's error is the later push's."""
    queues = dict(first.queues)
    for name, later in second.queues.items():
        earlier = queues.get(name)
        queues[name] = later if earlier is None else QueueReport(
            name, later.direction, earlier.moved + later.moved, earlier.refused + later.refused,
            earlier.dead_lettered + later.dead_lettered, earlier.dlq_kept + later.dlq_kept, later.error,
            later.code)
    return PushReport(
        sent=first.sent + second.sent, transmitted=first.transmitted + second.transmitted,
        duplicates=first.duplicates + second.duplicates, expired=first.expired + second.expired,
        refused=first.refused + second.refused, dead_lettered=first.dead_lettered + second.dead_lettered,
        dlq_kept=first.dlq_kept + second.dlq_kept,
        requeued=first.requeued + second.requeued, batches=first.batches + second.batches,
        expiries_reported=first.expiries_reported + second.expiries_reported,
        seconds=first.seconds + second.seconds,
        error=second.error, refusals=(first.refusals + second.refusals)[:100], queues=queues,
        stopped=second.stopped,
    )

"""The device's expiry reports: its journal is an outbox of expiries (and of dead-letter moves and
deletions), sent to the home server (``/v1/expiries``) after each push and trimmed once answered."""

from __future__ import annotations

import contextlib
import logging
from dataclasses import replace

from edgeq.store.journal import DEVICE_KINDS
from edgeq.sync import expiryreports as xr
from edgeq.sync import protocol as p
from edgeq.sync.agent.link import ServerLink, decode_results
from edgeq.sync.agent.transport import Unreachable

__all__ = ["ExpiryReporter"]

log = logging.getLogger("edgeq.sync.agent")



class ExpiryReporter:
    """Send the expiries journaled on the link's queue manager to its server."""

    def __init__(self, link: ServerLink) -> None:
        self.link = link
        self.qm = link.qm

    def report(self) -> int:
        """Send this device's journaled expiries (under the queue names the server knows),
        trimming each batch once the server has answered every entry; return how many were sent."""
        if self.qm.journal_mode != "device":
            return 0
        sent = 0
        limit = min(self.link.batch_size, self.link.ensure_hello().max_batch)
        names = self._server_queue_names()
        while entries := [e for e in self.qm.journal_since(0, limit) if e.kind in DEVICE_KINDS]:
            wire = xr.encode_expiries([replace(e, queue=names.get(e.queue, e.queue)) for e in entries])
            body = {"type": "expiries", "now_ms": self.link.clock(), "entries": wire}
            answer = self.link.call(p.PATH_EXPIRIES, body, "expiries")
            if "results" in answer:  # an older server answers only with a count
                results = decode_results(answer, p.EXPIRY_STATUSES)
                if [u for u, _, _ in results] != [w["u"] for w in wire]:
                    raise Unreachable("the server's answer does not match the expiries sent")
                for (uid, status, why), sent_entry in zip(results, wire, strict=True):
                    if status == "refused":
                        log.warning(
                            "expiry of %s on %s refused: %s", uid, sent_entry["q"], why,
                            extra={"event": "expiry-refused", "uid": uid, "queue": sent_entry["q"],
                                   "why": why or "refused"},
                        )
            self.qm.exchange.journal_trim(entries[-1].id)
            sent += len(entries)
        return sent

    def _server_queue_names(self) -> dict[str, str]:
        """Local queue name -> the name the server knows it by, where they differ."""
        names = {a.name: a.target_queue for a in self.qm.remote_queues() if a.target_queue}
        for attrs in self.qm.home_server_queues():
            with contextlib.suppress(ValueError):  # too long to be pulled: left as it is
                names[attrs.name] = p.device_queue_name(self.qm.name, attrs.name)
        return names

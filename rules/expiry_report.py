"""``expiry-report``: tell the sender, on its reply-to queue, that its message expired."""

from __future__ import annotations

from typing import Any

from edgeq.message import Message
from edgeq.rules.base import QueueRule, RuleEvent
from edgeq.values import Int64

__all__ = ["ExpiryReportRule"]

#: IBM MQ's MQRO_EXPIRATION_WITH_DATA keeps the first 100 bytes.
WITH_DATA_BYTES = 100


class ExpiryReportRule(QueueRule):
    """Puts an expiry report on the ``reply_to`` queue of each expired message that asked for one.

    As in IBM MQ, the report is made when the message is discarded; its fields: docs/rules.md. No config.

    >>> import tempfile, os
    >>> from edgeq import QueueManager, Message, Int64
    >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
    >>> qm.define_queue("REPLIES"); qm.define_queue("Q", rules=["expiry-report"])
    >>> m = Message(b"order 7", reply_to="REPLIES", expiry_report="with-data", expiry=Int64(1))
    >>> _ = qm.put("Q", m); report = qm.get("REPLIES")
    >>> report.data, report.fields["report.where"]
    (b'order 7', 'add')
    >>> qm.close()
    """

    def on_expired(self, event: RuleEvent) -> None:
        message, qm = event.message, self.queue_manager
        if message is None or qm is None or message.expiry_report == "none" or message.reply_to is None:
            return
        data = message.data[:WITH_DATA_BYTES] if message.expiry_report == "with-data" else message.data
        fields: dict[str, Any] = {
            "report": "expiry",
            "report.uid": str(message.uid),
            "report.queue": event.queue,
            "report.where": event.where or "",
            "report.at_ms": Int64(event.at_ms),
        }
        if event.id is not None:
            fields["report.event"] = Int64(event.id)
        qm.put(message.reply_to, Message(data, fields=fields, correlation_id=str(message.uid).encode()))

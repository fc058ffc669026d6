"""The rule interface: subclass :class:`QueueRule` and override the hooks you need."""

from __future__ import annotations

from edgeq.message import Message
from edgeq.types import RemovalReason, Where

__all__ = ["QueueRule"]


class QueueRule:
    """A queue rule, as MQe's: notified of a queue's events, never able to veto them.

    Every hook is a no-op here. Hooks run *after* the change has committed, in
    the thread that made it, outside any transaction, so a rule may itself put
    messages (for example a copy of an expired one onto a dead-letter queue).
    A hook that raises is logged on the ``edgeq.rules`` logger and otherwise
    ignored: the queue carries on as if the rule had not been called.

    >>> from edgeq import QueueManager, Message, Int64
    >>> class Counter(QueueRule):
    ...     def __init__(self): self.expired = []
    ...     def on_expired(self, message, where): self.expired.append(where)
    >>> import tempfile, os
    >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
    >>> qm.define_queue("Q"); rule = Counter(); qm.add_rule("Q", rule)
    >>> _ = qm.put("Q", Message(b"x", expiry=Int64(1)))   # already expired
    >>> rule.expired
    ['add']
    >>> qm.close()

    Messages passed to hooks are immutable copies; ``where`` is the MQe check
    point that discarded an expired message (``add``, ``get``, ``browse``,
    ``activate``, ``delete``, ``depth``) or ``sweep``.
    """

    def on_activated(self, queue: str) -> None:
        """The queue was activated (first used since the queue manager opened)."""

    def on_added(self, message: Message) -> None:
        """A message was stored on the queue (locked, if put with a confirm id)."""

    def on_removed(self, message: Message, reason: RemovalReason) -> None:
        """A message left the queue: ``got``, ``confirmed`` (assured get), ``deleted`` or ``purged``."""

    def on_expired(self, message: Message, where: Where) -> None:
        """An expired message was discarded at check point ``where``."""

    def on_queue_deleted(self, queue: str) -> None:
        """The queue was deleted."""

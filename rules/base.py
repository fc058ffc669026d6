"""The rule interface: subclass :class:`QueueRule` and override the hooks you need."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from edgeq.errors import InvalidArgument
from edgeq.message import Message
from edgeq.types import EventKind, RemovalReason, Where

if TYPE_CHECKING:
    from edgeq.uid import MessageUID

__all__ = ["EventKind", "QueueRule", "RuleEvent", "RuleHost"]



class RuleHost(Protocol):
    """What a rule may call on the queue manager it is attached to
    (:class:`edgeq.QueueManager` is one): rules see the queue manager through this,
    so the rules package never imports it."""

    name: str

    def put(self, queue: str, message: Message, *, confirm_id: int | None = None) -> MessageUID:
        """Put a message (see ``QueueManager.put``)."""
        ...

    def queue_names(self) -> list[str]:
        """The queues defined, sorted."""
        ...

    def apply_stats(self, queue: str, increments: Mapping[str, int], *, event_id: int | None = None) -> bool:
        """Add to a queue's persistent counters (see ``QueueManager.apply_stats``)."""
        ...


@dataclass(frozen=True, slots=True)
class RuleEvent:
    """What happened, as a rule hook receives it.

    ``id`` is stable for the events edgeq records durably (``expired`` and
    ``removed`` on queues with persisted rule bindings): after a crash the same
    event is delivered again with the same id, so a rule can deduplicate. Other
    events, and those on queues with only in-process rules, have ``id=None``.

    ``message`` is an immutable copy (None for queue-level events); ``where`` is
    set for ``expired`` (the MQe check point), ``reason`` for ``removed`` and
    ``duplicate``, ``depth`` for ``threshold``; ``at_ms`` is when it happened
    (epoch ms, from the queue manager's clock).
    """

    kind: EventKind
    queue: str
    queue_manager: str
    at_ms: int
    message: Message | None = None
    where: Where | None = None
    reason: RemovalReason | None = None
    depth: int | None = None
    id: int | None = None


class QueueRule:
    """A queue rule, as MQe's: told of a queue's events, never able to veto them.

    Every hook is a no-op here; override the ones you need. Hooks run *after*
    the change has committed, outside the caller's transaction, in the thread
    that made the change, in binding order. A rule may itself put messages (for
    example a copy of an expired one onto a dead-letter queue) through
    ``self.queue_manager``. A hook that raises is logged on the ``edgeq.rules``
    logger and never breaks the operation; for durable events it is retried and
    finally parked (see ``docs/rules.md``).

    >>> from edgeq import QueueManager, Message, Int64
    >>> from edgeq.rules import QueueRule
    >>> class Counter(QueueRule):
    ...     def __init__(self): self.expired = []
    ...     def on_expired(self, event): self.expired.append(event.where)
    >>> import tempfile, os
    >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
    >>> qm.define_queue("Q"); rule = Counter(); qm.add_rule("Q", rule)
    >>> _ = qm.put("Q", Message(b"x", expiry=Int64(1)))   # already expired
    >>> rule.expired
    ['add']
    >>> qm.close()

    To make a rule usable by name in ``define_queue(rules=[...])``, register the
    class under the ``edgeq.rules`` entry-point group; :meth:`from_config`
    builds it from the binding's JSON config.
    """

    queue_manager: RuleHost | None = None
    queue: str | None = None

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> QueueRule:
        """Build the rule from a binding's JSON config; raise ``InvalidArgument`` if it is bad.

        The default passes the config as keyword arguments to the constructor.
        """
        try:
            return cls(**config)
        except TypeError as exc:
            raise InvalidArgument(f"bad config {dict(config)!r}: {exc}") from exc

    def attach(self, queue_manager: RuleHost, queue: str) -> None:
        """Called once when the rule is bound to ``queue`` on ``queue_manager``."""
        self.queue_manager = queue_manager
        self.queue = queue

    def on_activated(self, event: RuleEvent) -> None:
        """The queue was activated (first used since the queue manager opened)."""

    def on_added(self, event: RuleEvent) -> None:
        """A message was stored on the queue (locked, if put with a confirm id)."""

    def on_removed(self, event: RuleEvent) -> None:
        """A message left the queue; ``event.reason`` says why (``edgeq.types.RemovalReason``):
        got, confirmed, deleted, purged, transmitted, quarantined, overflow, refused or
        backout (moved to the queue's backout queue)."""

    def on_expired(self, event: RuleEvent) -> None:
        """An expired message was discarded at check point ``event.where``."""

    def on_duplicate(self, event: RuleEvent) -> None:
        """A put was refused because the queue already holds that uid."""

    def on_threshold(self, event: RuleEvent) -> None:
        """The queue's depth rose to its ``depth_threshold`` (``event.depth``)."""

    def on_closed(self, event: RuleEvent) -> None:
        """The queue manager is closing (once per activated queue)."""

    def on_queue_deleted(self, event: RuleEvent) -> None:
        """The queue was deleted."""

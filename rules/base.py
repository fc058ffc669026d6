"""The rule interface: subclass :class:`QueueRule` and override the hooks you need."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import FrozenInstanceError
from typing import TYPE_CHECKING, Any, Protocol, cast

from edgeq.errors import InvalidArgument
from edgeq.message import Message
from edgeq.types import EventKind, RemovalReason, Where

if TYPE_CHECKING:
    from edgeq.uid import MessageUID

__all__ = ["EventKind", "QueueRule", "RuleEvent", "RuleHost"]



class RuleHost(Protocol):
    """What a rule may call on its queue manager: rules see it through this, never import it."""

    name: str

    def put(self, queue: str, message: Message, *, confirm_id: int | None = None) -> MessageUID:
        ...

    def queue_names(self) -> list[str]:
        ...

    def apply_stats(
        self, queue: str, increments: Mapping[str, int], *, event_id: int | None = None, durable: bool = True
    ) -> bool:
        ...

    def apply_stats_each(
        self, queue: str, batch: Sequence[tuple[Mapping[str, int], int | None]], *, durable: bool = True
    ) -> list[bool]:
        ...


class _Values:
    """The values of a :class:`RuleEvent`, assignable while it is made."""

    __slots__ = (
        "_load", "_message", "at_ms", "depth", "id", "kind", "queue", "queue_manager", "reason", "where",
    )
    kind: EventKind
    queue: str
    queue_manager: str
    at_ms: int
    where: Where | None
    reason: RemovalReason | None
    depth: int | None
    id: int | None
    _message: Message | None
    _load: Callable[[], Message | None] | None


class RuleEvent(_Values):
    """What happened, as a rule hook receives it (immutable); see docs/rules.md, 'Events and when they fire'.

    >>> RuleEvent("threshold", "Q", "DEV1", 5, depth=100)
    RuleEvent(kind='threshold', queue='Q', queue_manager='DEV1', at_ms=5, message=None, where=None, \
reason=None, depth=100, id=None)
    """

    __slots__ = ()

    def __new__(
        cls, kind: EventKind, queue: str, queue_manager: str, at_ms: int, message: Message | None = None,
        where: Where | None = None, reason: RemovalReason | None = None, depth: int | None = None,
        id: int | None = None, *, load: Callable[[], Message | None] | None = None,
    ) -> RuleEvent:
        # Filled as a plain _Values, then made a RuleEvent: immutable from then on, and made at a
        # third of what object.__setattr__ per field costs (every put of a watched queue makes one).
        event = _Values()
        event.kind, event.queue, event.queue_manager, event.at_ms = kind, queue, queue_manager, at_ms
        event.where, event.reason, event.depth, event.id = where, reason, depth, id
        event._message, event._load = message, load
        event.__class__ = cls
        return cast(RuleEvent, event)

    @property
    def message(self) -> Message | None:
        """The message's copy, made on first reading."""
        load = self._load
        if load is not None:
            object.__setattr__(self, "_message", load())
            object.__setattr__(self, "_load", None)
        return self._message

    def __setattr__(self, name: str, value: object) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}: a RuleEvent is immutable")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}: a RuleEvent is immutable")

    def _values(self) -> tuple[object, ...]:
        return (self.kind, self.queue, self.queue_manager, self.at_ms, self.message, self.where, self.reason,
                self.depth, self.id)

    def __eq__(self, other: object) -> bool:
        return self._values() == other._values() if isinstance(other, RuleEvent) else NotImplemented

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        names = ("kind", "queue", "queue_manager", "at_ms", "message", "where", "reason", "depth", "id")
        return f"RuleEvent({', '.join(f'{n}={v!r}' for n, v in zip(names, self._values(), strict=True))})"


class QueueRule:
    """A queue rule, as MQe's: told of a queue's events, never able to veto them.

    Every hook is a no-op here: override the ones you need. Hooks run after the commit, in the caller's
    thread; one that raises is logged, never breaks the operation (docs/rules.md).

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
    """

    queue_manager: RuleHost | None = None
    queue: str | None = None

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> QueueRule:
        """Build the rule from a binding's JSON config (as constructor keywords); bad: ``InvalidArgument``."""
        try:
            return cls(**config)
        except TypeError as exc:
            raise InvalidArgument(f"bad config {dict(config)!r}: {exc}") from exc

    def attach(self, queue_manager: RuleHost, queue: str) -> None:
        """Called once when the rule is bound to ``queue`` on ``queue_manager``."""
        self.queue_manager = queue_manager
        self.queue = queue

    def on_events(self, events: Sequence[RuleEvent]) -> None:
        """The events of one commit on this rule's queue, in order; the default calls each one's hook.

        Override it to handle them in one write (docs/rules.md, 'The batch hook')."""
        for event in events:
            getattr(self, f"on_{event.kind}")(event)

    def on_activated(self, event: RuleEvent) -> None:
        """The queue was activated (first used since the queue manager opened)."""

    def on_added(self, event: RuleEvent) -> None:
        """A message was stored on the queue (locked, if put with a confirm id)."""

    def on_removed(self, event: RuleEvent) -> None:
        """A message left the queue; ``event.reason`` says why (``edgeq.types.RemovalReason``)."""

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

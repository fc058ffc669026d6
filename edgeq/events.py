"""Dispatching queue events to rules, after the change that caused them commits."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from edgeq.rules import QueueRule

__all__ = ["Event", "RuleSet"]

log = logging.getLogger("edgeq.rules")


@dataclass(slots=True)
class Event:
    """One hook call owed to a queue's rules: ``hook(*args)``.

    ``args`` may hold a zero-argument callable in place of the message, so the
    copy is only built when a rule is there to receive it.
    """

    queue: str
    hook: str
    args: tuple[Any, ...] = field(default_factory=tuple)


class RuleSet:
    """The rule instances attached to each queue of one queue manager."""

    def __init__(self) -> None:
        self._rules: dict[str, tuple[QueueRule, ...]] = {}
        self._lock = threading.Lock()

    def add(self, queue: str, rule: QueueRule) -> None:
        with self._lock:
            self._rules[queue] = (*self._rules.get(queue, ()), rule)

    def remove(self, queue: str, rule: QueueRule) -> bool:
        with self._lock:
            rules = self._rules.get(queue, ())
            if rule not in rules:
                return False
            self._rules[queue] = tuple(r for r in rules if r is not rule)
            return True

    def drop(self, queue: str) -> None:
        with self._lock:
            self._rules.pop(queue, None)

    def of(self, queue: str) -> tuple[QueueRule, ...]:
        return self._rules.get(queue, ())

    def dispatch(self, events: list[Event]) -> None:
        """Call every rule for every event, in order; a failing rule is logged, never raised."""
        for event in events:
            rules = self.of(event.queue)
            if not rules:
                continue
            args = tuple(arg() if callable(arg) else arg for arg in event.args)
            for rule in rules:
                hook: Callable[..., None] = getattr(rule, event.hook)
                try:
                    hook(*args)
                except Exception:
                    # MQe: a rule that fails leaves the queue to its default behaviour.
                    log.exception("rule %r failed in %s on queue %s", rule, event.hook, event.queue)

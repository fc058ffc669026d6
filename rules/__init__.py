"""Queue rules: code that runs when things happen on a queue. See docs/rules.md and :class:`QueueRule`."""

from edgeq.rules.base import QueueRule

__all__ = ["QueueRule"]

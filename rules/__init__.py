"""Queue rules: code that runs when things happen on a queue (``edgeq.rules``).

Attach an instance with ``qm.add_rule("Q", rule)``. See :class:`QueueRule`.
"""

from edgeq.rules.base import QueueRule

__all__ = ["QueueRule"]

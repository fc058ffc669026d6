"""edgeq: a durable store-and-forward message queue for edge devices, in MQe's model.

The names below load on first use (PEP 562), so ``import edgeq`` and ``edgeq --version`` stay fast."""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: importing typing costs more than the rest of this module
if TYPE_CHECKING:
    from typing import Any

    from edgeq.clock import ManualClock
    from edgeq.manager import QueueManager
    from edgeq.message import Message
    from edgeq.queues.attributes import QueueAttributes
    from edgeq.uid import MessageUID
    from edgeq.values import Int32, Int64

__all__ = ["Int32", "Int64", "ManualClock", "Message", "MessageUID", "QueueAttributes", "QueueManager"]
__version__ = "0.1.0"

_HOMES = {  # each name -> the module it is defined in
    "Int32": "edgeq.values", "Int64": "edgeq.values", "ManualClock": "edgeq.clock",
    "Message": "edgeq.message", "MessageUID": "edgeq.uid", "QueueAttributes": "edgeq.queues.attributes",
    "QueueManager": "edgeq.manager",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'edgeq' has no attribute {name!r}")
    # __import__, not importlib.import_module: -X importtime lists only what goes through it
    value = getattr(__import__(home, fromlist=[name]), name)
    globals()[name] = value  # bound once, as an eager import would have: later lookups skip this
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])

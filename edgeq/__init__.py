"""edgeq: a durable store-and-forward message queue for edge devices, in MQe's model."""

from edgeq.clock import ManualClock
from edgeq.manager import QueueManager
from edgeq.message import Message
from edgeq.queues.attributes import QueueAttributes
from edgeq.uid import MessageUID
from edgeq.values import Int32, Int64

__all__ = ["Int32", "Int64", "ManualClock", "Message", "MessageUID", "QueueAttributes", "QueueManager"]
__version__ = "0.1.0"

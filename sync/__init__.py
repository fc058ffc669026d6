"""Store-and-forward between queue managers over HTTP: MQe's two-stage put/confirm (docs/protocol.md).
Importing it imports neither starlette nor httpx: a device that only queues locally needs neither."""

from edgeq.sync.protocol import CONTENT_TYPE, PROTOCOL_VERSION

__all__ = ["CONTENT_TYPE", "PROTOCOL_VERSION"]

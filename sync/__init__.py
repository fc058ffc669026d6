"""Store-and-forward between queue managers over HTTP: MQe's two-stage put/confirm.

* :mod:`edgeq.sync.protocol` -- the versioned CBOR wire format (pure, no HTTP), with
  :mod:`~edgeq.sync.messages` (messages) and :mod:`~edgeq.sync.expiryreports`;
* :mod:`edgeq.sync.server.app` -- the home server, a Starlette ASGI app over a
  :class:`~edgeq.QueueManager` (needs the ``server`` extra): a facade over
  :mod:`~edgeq.sync.server.home` (the protocol's logic, free of HTTP), :mod:`~edgeq.sync.server.sessions`
  (what it knows of each device: clock offsets, settled marks), :mod:`~edgeq.sync.server.routes`
  and :mod:`~edgeq.sync.server.middleware` (size, media type, authentication, error bodies,
  counting), with :mod:`~edgeq.sync.server.metrics` (the counters);
* :mod:`edgeq.sync.agent.agent` -- the device side, :class:`~edgeq.sync.agent.agent.SyncAgent`
  (needs the ``sync`` extra, i.e. httpx): a facade over :mod:`~edgeq.sync.agent.link` (its
  requests and hello), :mod:`~edgeq.sync.agent.push`, :mod:`~edgeq.sync.agent.pull`,
  :mod:`~edgeq.sync.agent.expiries` (the journal's expiry reports) and :mod:`~edgeq.sync.agent.daemon`
  (the background loop), with :mod:`edgeq.sync.agent.clockbounds` (its bounds on the
  server's clock, from its round trips; pure);
* security (``docs/security.md``): :mod:`~edgeq.sync.keys` (device key files),
  :mod:`~edgeq.sync.signing` (the canonical string, pure), :mod:`~edgeq.sync.agent.signer`
  (the device's ``httpx.Auth``), :mod:`~edgeq.sync.server.auth` and :mod:`~edgeq.sync.server.nonces`
  (the server's checks and replay memory), :mod:`~edgeq.sync.agent.tls` (the agent's TLS rules).

Importing this package imports neither starlette nor httpx: a device that only
queues locally never needs them. See ``docs/protocol.md``.
"""

from edgeq.sync.protocol import CONTENT_TYPE, PROTOCOL_VERSION

__all__ = ["CONTENT_TYPE", "PROTOCOL_VERSION"]

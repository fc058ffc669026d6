"""Store-and-forward between queue managers over HTTP: MQe's two-stage put/confirm.

* :mod:`edgeq.sync.protocol` -- the versioned CBOR wire format (pure, no HTTP);
* :mod:`edgeq.sync.server` -- the home server, a Starlette ASGI app over a
  :class:`~edgeq.QueueManager` (needs the ``server`` extra): a facade over
  :mod:`~edgeq.sync.home` (the protocol's logic, free of HTTP), :mod:`~edgeq.sync.sessions`
  (what it knows of each device: clock offsets, settled marks), :mod:`~edgeq.sync.routes`
  and :mod:`~edgeq.sync.middleware` (size, media type, authentication, error bodies,
  counting), with :mod:`~edgeq.sync.metrics` (the counters);
* :mod:`edgeq.sync.agent` -- the device side, :class:`~edgeq.sync.agent.SyncAgent`
  (needs the ``sync`` extra, i.e. httpx): a facade over :mod:`~edgeq.sync.link` (its
  requests and hello), :mod:`~edgeq.sync.push`, :mod:`~edgeq.sync.pull`,
  :mod:`~edgeq.sync.expiries` (the journal's expiry reports) and :mod:`~edgeq.sync.daemon`
  (the background loop), with :mod:`edgeq.sync.clockbounds` (its bounds on the
  server's clock, from its round trips; pure);
* security (``docs/security.md``): :mod:`~edgeq.sync.keys` (device key files),
  :mod:`~edgeq.sync.signing` (the canonical string, pure), :mod:`~edgeq.sync.signer`
  (the device's ``httpx.Auth``), :mod:`~edgeq.sync.auth` and :mod:`~edgeq.sync.nonces`
  (the server's checks and replay memory), :mod:`~edgeq.sync.tls` (the agent's TLS rules).

Importing this package imports neither starlette nor httpx: a device that only
queues locally never needs them. See ``docs/protocol.md``.
"""

from edgeq.sync.protocol import CONTENT_TYPE, PROTOCOL_VERSION

__all__ = ["CONTENT_TYPE", "PROTOCOL_VERSION"]

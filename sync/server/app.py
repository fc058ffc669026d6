"""The home server: a Starlette ASGI app over a :class:`~edgeq.QueueManager`.

>>> import tempfile, os
>>> from edgeq import QueueManager
>>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "home.db"), name="HOME")
>>> app = create_app(qm)
>>> sorted(r.path for r in app.routes)  # doctest: +NORMALIZE_WHITESPACE
['/healthz', '/metrics', '/v1/confirm', '/v1/expiries', '/v1/hello', '/v1/pull', '/v1/pull/confirm', '/v1/put']
>>> qm.close()

Run it with ``edgeq serve --db home.db --name HOME`` (uvicorn), or mount
``create_app(qm)`` in any ASGI server. Every endpoint under ``/v1`` takes and
returns ``application/cbor`` (see ``docs/protocol.md``); the request body is
size-checked before it is decoded, authenticated (where requests must be signed)
before it is decoded, decoded in a worker thread within bounds
(:mod:`edgeq.encoding.cbor`) and validated before anything is stored, and each stage
is one transaction, so a bad or failed request stores nothing. SQLite work runs in
Starlette's thread pool.

The app is a facade over three parts it builds once: the
:class:`~edgeq.sync.server.home.HomeService` (the protocol's logic and the device
sessions), its routes (:mod:`edgeq.sync.server.routes`) and, around each protocol
route, the HTTP concerns as middleware (:mod:`edgeq.sync.server.middleware`).
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from edgeq.encoding.cbor import DecodeLimits
from edgeq.manager import QueueManager
from edgeq.sync.protocol import body_limits
from edgeq.sync.server.auth import Authenticator, AuthGate, AuthMode, AuthRequest
from edgeq.sync.server.holds import HoldPolicy
from edgeq.sync.server.home import DEFAULT_MAX_BATCH, DEFAULT_MAX_BODY_BYTES, HomeService, ServerLimits
from edgeq.sync.server.metrics import Metrics
from edgeq.sync.server.middleware import BodyDecoder
from edgeq.sync.server.routes import HomeRoutes, http_error
from edgeq.types import Clock

__all__ = ["AuthMode", "AuthRequest", "Authenticator", "create_app"]


def create_app(
    qm: QueueManager,
    *,
    clock: Clock | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_batch: int = DEFAULT_MAX_BATCH,
    authenticate: Authenticator | None = None,
    auth: AuthMode | None = None,
    metrics: Metrics | None = None,
    holds: HoldPolicy | None = None,
    decode_limits: DecodeLimits | None = None,
    console_url: str | None = None,
) -> Starlette:
    """The ASGI app serving ``qm`` as a home server.

    ``clock`` should be the queue manager's clock (tests inject a ManualClock
    into both). ``max_body_bytes`` bounds a request body (413 beyond it, before
    decoding); ``max_batch`` bounds messages or uids per request (422).
    ``authenticate`` is asked about every ``/v1`` request before it is served
    (:class:`~edgeq.sync.server.auth.SignatureAuthenticator`) when ``auth``
    (:data:`~edgeq.sync.server.auth.AuthMode`) says: ``required`` (the default with an
    ``authenticate``), ``off`` (without), or ``auto``, as soon as ``qm`` has a
    registered device (:class:`~edgeq.sync.server.auth.AuthGate`, ``app.state.gate``).
    ``decode_limits`` bound what decoding a body may cost (default: what a batch of
    ``max_batch`` needs, :func:`~edgeq.sync.protocol.body_limits`); ``metrics`` counts;
    ``holds`` bounds unconfirmed puts (:class:`~edgeq.sync.server.holds.HoldPolicy`, whose
    timer is :class:`~edgeq.sync.server.holds.HoldKeeper`).
    The operator console is an app of its own (:func:`edgeq.sync.server.console.routes.console_app`, its
    own process under ``edgeq serve --console``); ``console_url`` (where it is) makes
    ``/console`` here a 404 saying so. The service is ``app.state.service``.
    """
    service = HomeService(
        qm, limits=ServerLimits(max_body_bytes, max_batch), clock=clock, metrics=metrics or Metrics(), holds=holds
    )
    gate = AuthGate(authenticate, mode=auth or ("off" if authenticate is None else "required"), qm=qm)
    routes = HomeRoutes(service, gate=gate, decoder=BodyDecoder(decode_limits or body_limits(max_batch)))
    extra: list[BaseRoute] = []
    if console_url is not None:
        elsewhere = PlainTextResponse(f"not found: the operator console is served on its own listener, "
                                      f"{console_url}", status_code=404)

        async def console_elsewhere(request: Request) -> Response:
            return elsewhere

        extra = [Route(path, console_elsewhere, methods=["GET", "POST"]) for path in ("/console", "/console/{rest:path}")]
    app = Starlette(routes=routes.routes + extra, exception_handlers={HTTPException: http_error})
    app.router.redirect_slashes = False  # "/v1/put/" is no endpoint: 404, not a redirect to re-sign
    app.state.service = service
    app.state.gate = gate
    return app

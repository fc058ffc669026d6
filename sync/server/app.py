"""The home server: a Starlette ASGI app over a :class:`~edgeq.QueueManager`.

>>> import tempfile, os
>>> from edgeq import QueueManager
>>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "home.db"), name="HOME")
>>> app = create_app(qm)
>>> sorted(r.path for r in app.routes)  # doctest: +NORMALIZE_WHITESPACE
['/healthz', '/metrics', '/v1/confirm', '/v1/expiries', '/v1/hello', '/v1/pull', '/v1/pull/confirm',
 '/v1/put']
>>> qm.close()

Run it with ``edgeq serve`` or mount it in any ASGI server (docs/protocol.md). The app is a facade
over the :class:`~edgeq.sync.server.home.HomeService`, its routes and their middleware.
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
    """The ASGI app serving ``qm`` as a home server (``app.state.service``, ``app.state.gate``).

    ``clock``: the queue manager's; ``authenticate`` asks about every ``/v1`` request when ``auth``
    says (``required``, ``off``, ``auto``: once a device is registered); ``console_url`` makes
    ``/console`` a 404 saying where the console's own app is. docs/protocol.md has the rest.
    """
    service = HomeService(
        qm, limits=ServerLimits(max_body_bytes, max_batch), clock=clock, metrics=metrics or Metrics(),
        holds=holds
    )
    gate = AuthGate(authenticate, mode=auth or ("off" if authenticate is None else "required"), qm=qm)
    routes = HomeRoutes(service, gate=gate, decoder=BodyDecoder(decode_limits or body_limits(max_batch)))
    extra: list[BaseRoute] = []
    if console_url is not None:
        elsewhere = PlainTextResponse(f"not found: the operator console and the management API (/api/v1) "
                                      f"are served on their own listener, {console_url}", status_code=404)

        async def console_elsewhere(request: Request) -> Response:
            return elsewhere

        extra = [Route(path, console_elsewhere, methods=["GET", "POST"])
                 for path in ("/console", "/console/{rest:path}", "/api", "/api/{rest:path}")]
    app = Starlette(routes=routes.routes + extra, exception_handlers={HTTPException: http_error})
    app.router.redirect_slashes = False  # "/v1/put/" is no endpoint: 404, not a redirect to re-sign
    app.state.service = service
    app.state.gate = gate
    return app

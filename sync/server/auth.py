"""Who is calling and what they may do, on a home server (docs/protocol.md, "Order of the checks")."""

from __future__ import annotations

import base64
import binascii
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeAlias, runtime_checkable

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from edgeq.admin.wire import ADMIN_QUEUE, ADMIN_REPLY_QUEUE
from edgeq.args import check_positive
from edgeq.clock import system_clock
from edgeq.errors import EdgeqError, InvalidArgument
from edgeq.manager import QueueManager
from edgeq.names import check_name, origin_qmgr
from edgeq.store.devices import DeviceRecord
from edgeq.sync import protocol as p
from edgeq.sync.server.nonces import NoncesFull, NonceStore
from edgeq.sync.signing import H_DEVICE, H_NONCE, H_SIGNATURE, H_TIMESTAMP, NONCE_RE, canonical
from edgeq.types import Clock

__all__ = [
    "DEFAULT_SKEW_MS",
    "AuthGate",
    "AuthMode",
    "AuthRequest",
    "Authenticator",
    "Forbidden",
    "HeaderChecker",
    "SignatureAuthenticator",
    "TwoStageAuthenticator",
    "Unauthorized",
]

# The server's log: these events are the server's.
log = logging.getLogger("edgeq.sync.server")

DEFAULT_SKEW_MS = 300_000

#: When requests must be authenticated: ``required`` always, ``off`` never (plain mode),
#: ``auto`` once any device is registered in the store (and from then on).
AuthMode: TypeAlias = Literal["required", "auto", "off"]


@dataclass(frozen=True, slots=True)
class AuthRequest:
    """What an authenticator sees; ``message`` (the decoded body) is None before decoding."""

    device: str | None
    path: str
    headers: Mapping[str, str]
    body: bytes
    message: Mapping[str, Any] | None = None
    method: str = "POST"


#: Called before a request is served; raise to refuse it: :class:`Forbidden`
#: answers 403 ``forbidden``, any other exception 401 ``unauthorized`` (with
#: the exception's text either way).
Authenticator = Callable[[AuthRequest], None]


class Unauthorized(EdgeqError):
    """Who sent the request cannot be established (401)."""


class Forbidden(EdgeqError):
    """The device is known but may not do this (403)."""


@runtime_checkable
class TwoStageAuthenticator(Protocol):
    """Authenticates from headers and raw body before decoding, authorises after: an
    unauthenticated body is never decoded."""

    def authenticate(self, request: AuthRequest) -> DeviceRecord:
        ...

    def authorize(self, device: DeviceRecord, request: AuthRequest) -> None:
        ...


@runtime_checkable
class HeaderChecker(Protocol):
    """An authenticator that can refuse a request from its headers alone, before its body is read."""

    def check_headers(self, headers: Mapping[str, str]) -> None:
        ...


class AuthGate:
    """Whether each request must be authenticated, decided as it arrives, and by whom.

    ``auto`` reads the device registry per request until a device (revoked ones count) is registered.

    >>> import tempfile, os; from edgeq import QueueManager
    >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "home.db"), name="HOME")
    >>> gate = AuthGate(lambda request: None, mode="auto", qm=qm)
    >>> before = gate.required(); _ = qm.register_device("DEV1", bytes(32)); before, gate.required()
    (False, True)
    >>> qm.close()
    """

    def __init__(self, authenticate: Authenticator | None, *, mode: AuthMode = "required",
                 qm: QueueManager | None = None) -> None:
        if mode != "off" and authenticate is None:
            raise InvalidArgument(f"auth mode {mode!r} needs an authenticator (authenticate=...)")
        if mode == "auto" and qm is None:
            raise InvalidArgument(
                "auth mode 'auto' needs the queue manager whose devices turn it on (qm=...)")
        self.authenticate = authenticate
        self.mode: AuthMode = mode
        self.qm = qm
        self._on = mode == "required"
        self._lock = threading.Lock()

    def required(self) -> bool:
        """Whether requests must be authenticated now. May read the store: call it from a worker thread."""
        if self._on or self.mode != "auto" or self.qm is None:
            return self._on
        if not self.qm.exchange.has_registered_device():
            return False
        with self._lock:
            turned, self._on = not self._on, True
        if turned:
            log.warning("a device is registered: authentication is on, every request must now be signed",
                        extra={"event": "auth-on", "auth": "required"})
        return True

    @property
    def settled(self) -> bool:
        """Whether :meth:`required` answers without reading the store (safe on the event loop)."""
        return self._on or self.mode != "auto"

    def check_headers(self, request: AuthRequest) -> None:
        """Stage zero, before the body is read: a :class:`HeaderChecker` may refuse here, by raising."""
        authenticate = self.authenticate
        if isinstance(authenticate, HeaderChecker) and self.required():
            authenticate.check_headers(request.headers)

    def admit(self, request: AuthRequest) -> Callable[[AuthRequest], None] | None:
        """Stage one, before decoding (worker thread): raise, or return stage two for the decoded
        request (None: nothing to check)."""
        authenticate = self.authenticate
        if authenticate is None or not self.required():
            return None
        if isinstance(authenticate, TwoStageAuthenticator):
            device = authenticate.authenticate(request)
            return lambda decoded: authenticate.authorize(device, decoded)
        return authenticate


class SignatureAuthenticator:
    """Verify Ed25519-signed requests from the devices registered in ``qm``.

    ``skew_ms``: the allowed clock difference, and so the replay window ``nonces`` covers.
    """

    def __init__(
        self, qm: QueueManager, nonces: NonceStore, *, skew_ms: int = DEFAULT_SKEW_MS,
        clock: Clock | None = None,
    ) -> None:
        check_positive(skew_ms, "skew_ms")
        self.qm = qm
        self.nonces = nonces
        self.skew_ms = skew_ms
        self.clock: Clock = clock or system_clock
        self._keys: dict[bytes, Ed25519PublicKey] = {}

    def __call__(self, request: AuthRequest) -> None:
        self.authorize(self.authenticate(request), request)

    def authorize(self, device: DeviceRecord, request: AuthRequest) -> None:
        if request.message is not None:
            authorize(device.name, request.path, request.message, device.queues)

    # -- authentication ------------------------------------------------------------------

    def authenticate(self, request: AuthRequest) -> DeviceRecord:
        """The verified device of ``request``; raises :class:`Unauthorized`."""
        headers = request.headers
        device, timestamp, nonce, now = self._check_headers(headers)
        record = self.qm.device(device)
        if record is None or record.public_key is None:
            raise Unauthorized(f"unknown device {device}: register it with edgeq server devices add {device}")
        if record.revoked_ms is not None:
            raise Unauthorized(f"device {device} is revoked (since {record.revoked_at})")
        signature = _signature(headers[H_SIGNATURE])
        payload = canonical(request.method, request.path, device, timestamp, nonce, request.body)
        try:
            self._public_key(record.public_key).verify(signature, payload)
        except InvalidSignature:
            raise Unauthorized(
                f"bad signature for device {device}: wrong key, or the request was altered") from None
        try:
            fresh = self.nonces.add(device, nonce, timestamp + self.skew_ms, now)
        except NoncesFull as exc:
            raise p.ProtocolError("busy", f"too many recent requests: {exc}") from exc
        if not fresh:
            raise Unauthorized(f"replayed request: nonce {nonce} of {device} was already used")
        return record

    def check_headers(self, headers: Mapping[str, str]) -> None:
        self._check_headers(headers)

    def _check_headers(self, headers: Mapping[str, str]) -> tuple[str, int, str, int]:
        missing = [h for h in (H_DEVICE, H_TIMESTAMP, H_NONCE, H_SIGNATURE) if not headers.get(h)]
        if missing:
            raise Unauthorized(
                f"missing {', '.join(missing)}: this server takes only signed requests "
                "(edgeq sync --key DEVICE.KEY)"
            )
        device = headers[H_DEVICE]
        try:
            check_name(device, "device name")
        except EdgeqError as exc:
            raise Unauthorized(str(exc)) from exc
        if "." in device:
            raise Unauthorized(f"device name {device!r} has a '.': not allowed with authenticated sync")
        timestamp = _timestamp(headers[H_TIMESTAMP])
        now = self.clock()
        if abs(now - timestamp) > self.skew_ms:
            raise Unauthorized(
                f"timestamp {timestamp} is {(timestamp - now) / 1000:+.0f} s off the server clock "
                f"(allowed ±{self.skew_ms / 1000:g} s): check the device clock (NTP)"
            )
        nonce = headers[H_NONCE]
        if not NONCE_RE.fullmatch(nonce):
            raise Unauthorized("bad X-Edgeq-Nonce: 16 to 64 characters of A-Z, a-z, 0-9, '_', '-'")
        return device, timestamp, nonce, now

    def _public_key(self, raw: bytes) -> Ed25519PublicKey:
        key = self._keys.get(raw)
        if key is None:
            if len(self._keys) > 10_000:
                self._keys.clear()
            key = self._keys[raw] = Ed25519PublicKey.from_public_bytes(raw)
        return key


# -- authorisation ---------------------------------------------------------------------------


def authorize(device: str, path: str, body: Mapping[str, Any], queues: tuple[str, ...] | None) -> None:
    """Raise :class:`Forbidden` unless ``device`` may send ``body`` to ``path``.

    Malformed parts are left to validation, which refuses the whole request.

    >>> try:
    ...     authorize("DEV1", "/v1/put", {"qmgr": "DEV1", "queue": "A", "messages": [{"u": "DEV2.5"}]}, None)
    ... except Forbidden as exc:
    ...     print(exc)
    DEV1 may only push its own messages: DEV2.5 comes from DEV2
    """
    claimed = body.get("qmgr")
    if claimed != device:
        raise Forbidden(f"signed by {device} but sent as qmgr {claimed!r}: a device speaks only for itself")
    if path not in (p.PATH_PUT, p.PATH_CONFIRM):
        return
    queue = body.get("queue")
    if isinstance(queue, str) and queue.endswith("." + ADMIN_QUEUE):
        raise Forbidden(
            f"{device} may not push to {queue}: it holds the operator's admin requests for a device")
    # Admin replies are pushed by every device that takes part: its queue list need not name them.
    if queues is not None and isinstance(queue, str) and queue not in queues and queue != ADMIN_REPLY_QUEUE:
        raise Forbidden(f"{device} may not push to queue {queue} (allowed: {', '.join(queues) or 'none'})")
    items = body.get("messages" if path == p.PATH_PUT else "uids")
    for item in items if isinstance(items, list) else ():
        text = item.get("u") if isinstance(item, dict) else item
        # The origin as MessageUID.parse reads it (the server parses it so later), less
        # the store's incarnation: any incarnation of the device speaks for it.
        qmgr = origin_qmgr(text.rpartition(".")[0]) if isinstance(text, str) else device
        if qmgr != device:
            raise Forbidden(f"{device} may only push its own messages: {text} comes from {qmgr}")


def _timestamp(text: str) -> int:
    if not text.isascii() or not text.isdigit() or len(text) > 16:
        raise Unauthorized(f"bad X-Edgeq-Timestamp {text[:20]!r}: epoch milliseconds expected")
    return int(text)


def _signature(text: str) -> bytes:
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise Unauthorized("bad X-Edgeq-Signature: not base64") from None
    if len(raw) != 64:
        raise Unauthorized(f"bad X-Edgeq-Signature: {len(raw)} bytes, an Ed25519 signature has 64")
    return raw

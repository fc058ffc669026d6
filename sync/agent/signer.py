"""The device side of signed sync: an ``httpx.Auth`` that signs every request.

>>> from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
>>> request = httpx.Request("POST", "http://home/v1/hello", content=b"\\xa0")
>>> signed = next(DeviceSigner("DEV1", Ed25519PrivateKey.generate()).auth_flow(request))
>>> sorted(k for k in signed.headers if k.startswith("x-edgeq"))
['x-edgeq-device', 'x-edgeq-nonce', 'x-edgeq-signature', 'x-edgeq-timestamp']
"""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path

import httpx
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from edgeq.clock import system_clock
from edgeq.sync.keys import load_private_key
from edgeq.sync.signing import sign_headers
from edgeq.types import Clock

__all__ = ["DeviceSigner"]


class DeviceSigner(httpx.Auth):
    """Sign each request as ``device`` with its Ed25519 ``key`` (one signing per request, about
    50 µs); ``clock`` gives the timestamp (epoch ms), which must be within the server's allowed skew."""

    requires_request_body = True

    def __init__(self, device: str, key: Ed25519PrivateKey, *, clock: Clock | None = None) -> None:
        self.device = device
        self._key = key
        self._clock: Clock = clock or system_clock

    @classmethod
    def from_file(cls, device: str, path: Path, *, clock: Clock | None = None) -> DeviceSigner:
        """A signer with the private key in ``path`` (PEM, mode 0600)."""
        return cls(device, load_private_key(path), clock=clock)

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        """Sign the request (the httpx auth hook) with the headers of :func:`sign_headers`."""
        request.headers.update(sign_headers(
            self._key, self.device, request.method, request.url.path, request.content, self._clock()
        ))
        yield request

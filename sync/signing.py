"""Request signatures: the canonical string a device signs, and the headers that carry it.

Every sync request is signed by the device's Ed25519 key over::

    edgeq-sig-v1
    POST
    /v1/put
    DEV1
    1763683200123
    9f86d081884c7d659a2feaa0c55ad015
    e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855

that is: the scheme, the HTTP method (upper case), the path (no query), the
device name, the timestamp (epoch ms on the device clock), the nonce (random,
16-64 characters of ``A-Za-z0-9_-``) and the lowercase hex SHA-256 of the exact
body bytes, joined by ``\\n`` (no trailing newline), UTF-8. The headers:

=====================  ==================================================
``X-Edgeq-Device``     the device (its queue manager name)
``X-Edgeq-Timestamp``  the timestamp, decimal epoch milliseconds
``X-Edgeq-Nonce``      the nonce
``X-Edgeq-Signature``  base64 (standard, padded) of the 64-byte signature
=====================  ==================================================

This module is pure (no HTTP client or server), so both ends share it.

>>> canonical("post", "/v1/hello", "DEV1", 5, "n0nce-n0nce-n0nce", b"").decode().splitlines()[:6]
['edgeq-sig-v1', 'POST', '/v1/hello', 'DEV1', '5', 'n0nce-n0nce-n0nce']
"""

from __future__ import annotations

import base64
import hashlib
import re
import secrets
from typing import Final

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

__all__ = [
    "H_DEVICE",
    "H_NONCE",
    "H_SIGNATURE",
    "H_TIMESTAMP",
    "NONCE_RE",
    "SCHEME",
    "canonical",
    "sign_headers",
]

SCHEME: Final = "edgeq-sig-v1"
H_DEVICE: Final = "X-Edgeq-Device"
H_TIMESTAMP: Final = "X-Edgeq-Timestamp"
H_NONCE: Final = "X-Edgeq-Nonce"
H_SIGNATURE: Final = "X-Edgeq-Signature"
NONCE_RE: Final = re.compile(r"[A-Za-z0-9_-]{16,64}")


def canonical(method: str, path: str, device: str, timestamp_ms: int, nonce: str, body: bytes) -> bytes:
    """The bytes a device signs for one request (see the module docstring)."""
    digest = hashlib.sha256(body).hexdigest()
    return "\n".join((SCHEME, method.upper(), path, device, str(timestamp_ms), nonce, digest)).encode()


def sign_headers(
    key: Ed25519PrivateKey, device: str, method: str, path: str, body: bytes, now_ms: int
) -> dict[str, str]:
    """The four signature headers for one request, with a fresh 128-bit nonce."""
    nonce = secrets.token_hex(16)
    signature = key.sign(canonical(method, path, device, now_ms, nonce, body))
    return {
        H_DEVICE: device,
        H_TIMESTAMP: str(now_ms),
        H_NONCE: nonce,
        H_SIGNATURE: base64.b64encode(signature).decode(),
    }

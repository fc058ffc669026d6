"""Request signatures: the canonical string a device signs and the headers that carry it
(docs/security.md, "Signed requests"). Pure (no HTTP), so both ends share it."""

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
    """The bytes a device signs for one request."""
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

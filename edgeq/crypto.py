"""Store keys for encryption at rest with AES-256-GCM (docs/security.md, "Encryption at rest")."""

from __future__ import annotations

import base64
import json
import os
import secrets
from collections.abc import Mapping
from pathlib import Path

from edgeq.errors import InvalidArgument, StoreError

__all__ = ["CIPHERS", "IntegrityError", "KeyMissing", "StoreKeys"]

#: The ciphers a queue may be defined with.
CIPHERS = ("aes-256-gcm",)
_NONCE = 12
#: Bytes a sealed part has beyond its plaintext: the nonce and the GCM tag.
SEAL_OVERHEAD = _NONCE + 16
_CHECK = b"edgeq store key check v1"
ENV_KEY = "EDGEQ_STORE_KEY"
ENV_KEY_FILE = "EDGEQ_STORE_KEY_FILE"


class IntegrityError(StoreError):
    """Raised when a message row fails its checksum or its authentication tag; it was quarantined."""


class KeyMissing(StoreError):
    """Raised when the store key an encrypted row or queue needs is not in the key ring."""


def _aad(qm: str, queue: str, uid: str, part: str) -> bytes:
    return f"edgeq/v1|{qm}|{queue}|{uid}|{part}".encode()


class StoreKeys:
    """A ring of named 256-bit store keys, one of them current (used for new rows).

    >>> keys = StoreKeys({"k1": bytes(32)}, "k1")
    >>> keys.open(*keys.seal(b"secret", "DEV1", "Q", "DEV1.5", "data"), "DEV1", "Q", "DEV1.5", "data")
    b'secret'
    """

    def __init__(self, keys: Mapping[str, bytes], current: str) -> None:
        if not keys or current not in keys:
            raise InvalidArgument(
                "a key ring needs at least one key, and its current key must be in it"
            )
        for kid, key in keys.items():
            if not kid or not isinstance(key, bytes) or len(key) != 32:
                raise InvalidArgument(f"store key {kid!r} must be 32 bytes (256 bits)")
        # cryptography is imported by the first key ring, not by `import edgeq`: a store without keys
        # never needs it
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        self._keys = dict(keys)
        self._ciphers = {kid: AESGCM(key) for kid, key in keys.items()}
        self._rejected = (InvalidTag, ValueError)  # what decrypting a wrong blob raises
        self.current = current

    @property
    def ids(self) -> list[str]:
        return sorted(self._keys)

    @classmethod
    def from_json(cls, text: str, source: str) -> StoreKeys:
        """Parse a key file's JSON text; ``source`` names it in the error if it is not one."""
        try:
            raw = json.loads(text)
            keys = {kid: base64.b64decode(value, validate=True) for kid, value in raw["keys"].items()}
            return cls(keys, raw["current"])
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise InvalidArgument(
                f"{source} is not an edgeq store key file ({exc}); "
                "make one with `edgeq keys new-store-key`"
            ) from exc

    @classmethod
    def load(cls, path: str | Path) -> StoreKeys:
        """Read a key file written by :meth:`generate` or :meth:`add_key`."""
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise InvalidArgument(f"cannot read the store key file {path}: {exc.strerror}") from exc
        return cls.from_json(text, str(path))

    @classmethod
    def from_env(cls) -> StoreKeys | None:
        """The key ring from ``EDGEQ_STORE_KEY`` (JSON) or ``EDGEQ_STORE_KEY_FILE``, if set."""
        if os.environ.get(ENV_KEY):
            return cls.from_json(os.environ[ENV_KEY], f"${ENV_KEY}")
        if os.environ.get(ENV_KEY_FILE):
            return cls.load(os.environ[ENV_KEY_FILE])
        return None

    def to_json(self) -> str:
        """The ring as a key file's JSON text (keys in base64), as :meth:`save` writes it."""
        keys = {kid: base64.b64encode(key).decode() for kid, key in sorted(self._keys.items())}
        return json.dumps({"current": self.current, "keys": keys}, indent=2) + "\n"

    def save(self, path: str | Path) -> None:
        """Write the ring to ``path`` (mode 0600), replacing it atomically."""
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(self.to_json())
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)

    @classmethod
    def generate(cls, key_id: str = "k1") -> StoreKeys:
        """A new ring holding one fresh random key."""
        return cls({key_id: secrets.token_bytes(32)}, key_id)

    def with_new_key(self) -> StoreKeys:
        """A ring with every key of this one plus a fresh current one (for rotation)."""
        n = 1 + max((int(k[1:]) for k in self._keys if k[:1] == "k" and k[1:].isdigit()), default=0)
        kid = f"k{n}"
        return StoreKeys({**self._keys, kid: secrets.token_bytes(32)}, kid)

    def seal(self, plaintext: bytes, qm: str, queue: str, uid: str, part: str) -> tuple[str, bytes]:
        """Encrypt under the current key; return (key id, nonce + ciphertext)."""
        nonce = secrets.token_bytes(_NONCE)
        sealed = self._ciphers[self.current].encrypt(nonce, plaintext, _aad(qm, queue, uid, part))
        return self.current, nonce + sealed

    def open(self, key_id: str, blob: bytes, qm: str, queue: str, uid: str, part: str) -> bytes:
        """Decrypt, or raise :class:`KeyMissing` / :class:`IntegrityError` (naming the uid)."""
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise KeyMissing(
                f"message {uid} on queue {queue!r} is sealed with store key {key_id!r}, which is not in the "
                f"key ring ({', '.join(self.ids)}): open the store with the key file that has it"
            )
        try:
            return cipher.decrypt(blob[:_NONCE], blob[_NONCE:], _aad(qm, queue, uid, part))
        except self._rejected as exc:
            raise IntegrityError(
                f"message {uid} on queue {queue!r} failed its integrity check ({part}): it was altered, "
                "or copied from another queue or message; it has been moved to the quarantine"
            ) from exc

    def check_value(self, key_id: str) -> bytes:
        """A known plaintext sealed under ``key_id``: the store keeps it to refuse a wrong key."""
        nonce = secrets.token_bytes(_NONCE)
        return nonce + self._ciphers[key_id].encrypt(nonce, _CHECK, None)

    def verify(self, key_id: str, check: bytes) -> bool:
        """Whether ``key_id`` here is the key that made ``check``."""
        try:
            return self._ciphers[key_id].decrypt(check[:_NONCE], check[_NONCE:], None) == _CHECK
        except (*self._rejected, KeyError):
            return False


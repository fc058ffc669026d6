"""Device key pairs for signed sync: Ed25519, as PEM files (docs/security.md, "Device identity")."""

from __future__ import annotations

import base64
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from edgeq.errors import EdgeqError

__all__ = [
    "KeyFileError",
    "KeyPair",
    "fingerprint",
    "load_private_key",
    "load_public_key",
    "loose_secret",
    "new_key_pair",
    "parse_public_key",
    "public_bytes",
]


class KeyFileError(EdgeqError):
    """A key file is missing, unreadable, of the wrong kind, or too widely readable."""


@dataclass(frozen=True, slots=True)
class KeyPair:
    """The files :func:`new_key_pair` wrote and the public key's fingerprint."""

    private_path: Path
    public_path: Path
    public_key: bytes
    fingerprint: str


def fingerprint(public_key: bytes) -> str:
    """``SHA256:`` and the unpadded base64 of the SHA-256 of the raw public key bytes, as OpenSSH shows keys.

    >>> fingerprint(bytes(32))
    'SHA256:Zmh6rfhivXdsj8GLjp+OIAiXFIVu4jOzkCpZHQ1fKSU'
    """
    digest = base64.b64encode(hashlib.sha256(public_key).digest()).decode().rstrip("=")
    return f"SHA256:{digest}"


def public_bytes(key: Ed25519PublicKey | Ed25519PrivateKey) -> bytes:
    """The 32 raw bytes of a public key (of a private key's public half)."""
    public = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    return public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def public_path_for(private_path: Path) -> Path:
    """``device.key`` -> ``device.pub`` (``name`` -> ``name.pub`` without a suffix)."""
    return private_path.with_suffix(".pub") if private_path.suffix else private_path.with_name(
        private_path.name + ".pub")


def new_key_pair(private_path: Path, *, overwrite: bool = False) -> KeyPair:
    """Write an Ed25519 key pair: the private key at ``private_path`` (PKCS#8, 0600), the public key
    beside it (``.pub``); refuses to overwrite unless told to."""
    public_path = public_path_for(private_path)
    if not private_path.parent.is_dir():
        raise KeyFileError(f"cannot write {private_path}: directory {private_path.parent} does not exist "
                           f"(create it first, e.g. mkdir -p {private_path.parent})")
    if not overwrite:
        for path in (private_path, public_path):
            if path.exists():
                raise KeyFileError(f"{path} exists: refusing to overwrite a key (pass --force to replace it)")
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    raw = public_bytes(key)
    if overwrite:
        private_path.unlink(missing_ok=True)
    fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(pem)
    os.chmod(private_path, 0o600)  # whatever the umask
    public_path.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                          serialization.PublicFormat.SubjectPublicKeyInfo))
    return KeyPair(private_path, public_path, raw, fingerprint(raw))


def loose_secret(path: Path, mode: int) -> str | None:
    """Why the secret file ``path`` (its ``st_mode``) must not be used: group or others may read it
    (POSIX); None if only its owner may."""
    if os.name == "posix" and mode & 0o077:
        return f"{path} is readable by others (mode {mode & 0o777:o}): run chmod 600 {path}"
    return None


def load_private_key(path: Path, what: str = "device key") -> Ed25519PrivateKey:
    """A private key (``what`` names it in errors); refused if the file is a public key, or if group
    or others may read it (POSIX)."""
    try:
        mode = path.stat().st_mode
        data = path.read_bytes()
    except OSError as exc:
        raise KeyFileError(f"cannot read the {what} {path}: {exc.strerror or exc}") from exc
    if b"-----BEGIN PUBLIC KEY-----" in data:
        private = (
            path.with_suffix(".key") if path.suffix != ".key" else path.with_name(path.stem + "-private.key")
        )
        raise KeyFileError(f"{path} is a public key; give the private key file, e.g. {private} (the {what})")
    loose = loose_secret(path, mode)
    if loose is not None:
        raise KeyFileError(loose)
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise KeyFileError(f"{path} is not an unencrypted PEM private key: {exc}") from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise KeyFileError(
            f"{path} holds a {type(key).__name__}, not an Ed25519 key (make one with edgeq keys new)"
        )
    return key


def load_public_key(path: Path) -> bytes:
    """The 32 raw bytes of the Ed25519 public key in a ``.pub`` (PEM) file."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise KeyFileError(f"cannot read the public key {path}: {exc.strerror or exc}") from exc
    return parse_public_key(data, str(path))


def parse_public_key(data: bytes, source: str = "the public key") -> bytes:
    """The 32 raw bytes of the Ed25519 public key ``data`` holds (a ``.pub`` file's PEM text);
    ``source`` names it in errors."""
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise KeyFileError(
            f"{source} is not a PEM public key (a device.pub from edgeq keys new): {exc}"
        ) from exc
    if not isinstance(key, Ed25519PublicKey):
        raise KeyFileError(f"{source} holds a {type(key).__name__}, not an Ed25519 public key")
    return public_bytes(key)

"""The device's transport security: ``https://`` verified against a CA file or the system's trust
store; plain ``http://`` refused unless on loopback or explicitly allowed (docs/security.md).

>>> check_server_url("http://127.0.0.1:8470"); check_server_url("https://home.example:8470")
>>> try:
...     check_server_url("http://home.example:8470")
... except InsecureTransport as exc:
...     print(str(exc)[:50])
refusing plain HTTP to http://home.example:8470: r
"""

from __future__ import annotations

import ipaddress
import ssl
from pathlib import Path
from urllib.parse import urlsplit

from edgeq.errors import EdgeqError

__all__ = ["InsecureTransport", "TLSConfigError", "check_server_url", "client_ssl_context", "is_loopback"]


class InsecureTransport(EdgeqError):
    """A plain-HTTP server URL that is not on loopback, without an explicit allowance."""


class TLSConfigError(EdgeqError):
    """A CA file (or certificate/key) that cannot be used."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` is this machine (``localhost`` or a loopback address)."""
    host = host.strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_server_url(url: str, *, allow_insecure_http: bool = False) -> None:
    """Raise :class:`InsecureTransport` for a URL the device must not use."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "https":
        return
    if scheme != "http":
        raise InsecureTransport(f"server URL {url!r} must start with https:// (or http:// on loopback)")
    if allow_insecure_http or is_loopback(parts.hostname or ""):
        return
    raise InsecureTransport(
        f"refusing plain HTTP to {url}: requests, signatures' metadata and messages would cross the "
        "network unencrypted and unauthenticated; serve TLS (edgeq serve --tls-cert/--tls-key) and use "
        "https://, or pass --allow-insecure-http on a trusted network"
    )


def client_ssl_context(ca_file: Path | None = None) -> ssl.SSLContext:
    """Verify servers (and host names) against ``ca_file`` or the system trust store; TLS 1.2+."""
    try:
        context = ssl.create_default_context(cafile=str(ca_file) if ca_file is not None else None)
    except (OSError, ssl.SSLError) as exc:
        raise TLSConfigError(f"cannot use CA file {ca_file}: {exc}") from exc
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context

"""The device's transport security: which server URLs it will talk to, and how it checks the server.

* ``https://`` URLs are verified against a CA file (``edgeq sync --ca-file``,
  e.g. the private CA that signed the home server's certificate) or, without
  one, the system's trust store; the host name must match the certificate.
* Plain ``http://`` is refused unless the server is on a loopback address
  (``127.0.0.0/8``, ``::1``, ``localhost``) or it is explicitly allowed
  (``--allow-insecure-http``, for trusted LANs and tests).

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
        f"refusing plain HTTP to {url}: requests, signatures' metadata and messages would cross the network "
        "unencrypted and unauthenticated; serve TLS (edgeq serve --tls-cert/--tls-key) and use https://, "
        "or pass --allow-insecure-http on a trusted network"
    )


def client_ssl_context(ca_file: Path | None = None) -> ssl.SSLContext:
    """Verify servers against ``ca_file`` (PEM) only, or the system trust store if None.

    Certificates and host names are always checked; TLS 1.2 is the minimum.
    """
    try:
        context = ssl.create_default_context(cafile=str(ca_file) if ca_file is not None else None)
    except (OSError, ssl.SSLError) as exc:
        raise TLSConfigError(f"cannot use CA file {ca_file}: {exc}") from exc
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context

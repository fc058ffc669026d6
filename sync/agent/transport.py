"""The device's HTTP client: CBOR bodies over one keep-alive httpx connection pool,
compressed where asked (:mod:`edgeq.sync.framing`)."""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx

from edgeq.encoding.compression import Codec
from edgeq.errors import EdgeqError
from edgeq.sync import protocol as p
from edgeq.sync.agent.tls import check_server_url, client_ssl_context
from edgeq.sync.framing import H_ACCEPT, H_ENCODING, MAX_ANSWER_BYTES, frame, unframe

__all__ = ["ServerRefused", "SyncError", "Transport", "Unreachable"]


class SyncError(EdgeqError):
    """Talking to the home server failed."""


class Unreachable(SyncError):
    """The server could not be reached, timed out, or failed (5xx): retry later."""


class ServerRefused(SyncError):
    """The server refused the request (4xx) with a protocol error ``code``."""

    def __init__(self, code: str, detail: str, status: int) -> None:
        super().__init__(f"server refused the request ({status} {code}): {detail}")
        self.code = code
        self.detail = detail
        self.status = status


class Transport:
    """POST CBOR bodies to ``server_url``; decoded response bodies come back. ``client`` may be given,
    else one is made (closed by :meth:`close`); plain ``http://`` off loopback needs ``allow_insecure_http``.
    """

    def __init__(
        self,
        server_url: str,
        *,
        client: httpx.Client | None = None,
        timeout: float = 30.0,
        auth: httpx.Auth | None = None,
        ca_file: Path | None = None,
        allow_insecure_http: bool = False,
    ) -> None:
        check_server_url(server_url, allow_insecure_http=allow_insecure_http)
        self.server_url = server_url.rstrip("/")
        self._own = client is None
        # Plain http:// never verifies anything (no redirects are followed): the CA bundle is read
        # (~30 ms of CPU a client) only for https://.
        tls = self.server_url.startswith("https://")
        self.client = client if client is not None else httpx.Client(
            timeout=timeout, verify=client_ssl_context(ca_file) if tls else False)
        self._auth = auth
        self._headers = {"content-type": p.CONTENT_TYPE, "accept": p.CONTENT_TYPE}

    def call(self, path: str, body: Mapping[str, Any], expect: str, *,
             codec: Codec | None = None) -> dict[str, Any]:
        """Send one request; return the answer of type ``expect`` (compressed with ``codec``). Raises
        :class:`Unreachable` for network failures, 5xx, 408, 429 and bad answers, else :class:`ServerRefused`.
        """
        raw, framing = frame(codec, p.encode_body(body))
        headers = {**self._headers, **framing, **({H_ACCEPT: codec} if codec is not None else {})}
        try:
            response = self.client.post(
                self.server_url + path, content=raw, headers=headers,
                auth=self._auth if self._auth is not None else httpx.USE_CLIENT_DEFAULT,
            )
        except httpx.HTTPError as exc:
            if _untrusted(exc):
                raise Unreachable(
                    f"cannot reach {self.server_url}: its TLS certificate is not trusted ({exc}): "
                    "pass the CA that signed it with --ca-file (ca_file=), and check the host name"
                ) from exc
            raise Unreachable(f"cannot reach {self.server_url}: {type(exc).__name__}: {exc}") from exc
        media = response.headers.get("content-type", "").split(";")[0].strip()
        decoded: dict[str, Any] | None = None
        problem = ""
        if media == p.CONTENT_TYPE:
            try:
                plain = unframe(response.headers.get(H_ENCODING), response.content,
                                max_bytes=MAX_ANSWER_BYTES)
                decoded = p.decode_body(plain)
            except p.ProtocolError as exc:
                problem = exc.detail
        else:
            problem = f"answer is {media or 'untyped'}, not CBOR"
        if response.status_code >= 400:
            code = str(decoded.get("code", "")) if decoded else ""
            detail = str(decoded.get("detail", "")) if decoded else problem or response.text[:200]
            if response.status_code >= 500 or response.status_code in (408, 429):
                raise Unreachable(f"{self.server_url} answered {response.status_code} {code}: {detail}")
            raise ServerRefused(code or "http", detail, response.status_code)
        if decoded is None or decoded.get("type") != expect:
            what = problem or f"type {decoded.get('type')!r}" if decoded is not None else problem
            raise Unreachable(f"{self.server_url} gave a bad {expect} answer: {what}")
        return decoded

    def close(self) -> None:
        """Close the HTTP client, if this transport made it."""
        if self._own:
            self.client.close()


def _untrusted(exc: BaseException) -> bool:
    """Whether a failed request failed on the server's certificate."""
    seen: BaseException | None = exc
    for _ in range(10):
        if seen is None:
            return False
        if isinstance(seen, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY_FAILED" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False

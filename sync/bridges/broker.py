"""Reaching an MQTT 5 broker: its URL, credentials (an environment variable or a file only its owner
may read) and TLS (``mqtts://``, a CA file, a client certificate), checked as the home server's are."""

from __future__ import annotations

import ipaddress
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from edgeq.sync.bridges.errors import BridgeConfigError

__all__ = ["BrokerSettings", "check_broker_config"]

_KEYS = {"url", "username", "password_env", "password_file", "ca_file", "cert_file", "key_file",
         "allow_insecure", "keepalive_s", "retry_max_s", "client_id"}
_DEFAULTS: dict[str, Any] = {"allow_insecure": False, "keepalive_s": 30, "retry_max_s": 5.0}


def _loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_broker_config(config: Mapping[str, Any], own: Mapping[str, Any]) -> dict[str, Any]:
    """The broker keys of ``config`` checked (the kind's own keys and defaults in ``own``)."""
    unknown = set(config) - _KEYS - set(own)
    if unknown:
        raise BridgeConfigError(f"unknown bridge setting(s) {sorted(unknown)}: known ones are "
                                f"{sorted(_KEYS | set(own))}")
    out = {**_DEFAULTS, **own, **config}
    BrokerSettings.from_config(out)  # refuses what cannot be used now, not when the bridge runs
    return out


@dataclass(frozen=True, slots=True)
class BrokerSettings:
    """Where the broker is and how to authenticate to it."""

    host: str
    port: int
    tls: bool
    username: str | None
    password_env: str | None
    password_file: Path | None
    ca_file: Path | None
    cert_file: Path | None
    key_file: Path | None
    keepalive_s: int
    retry_max_s: float

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> BrokerSettings:
        url = config.get("url")
        parts = urlsplit(url) if isinstance(url, str) else None
        if parts is None or parts.scheme not in ("mqtt", "mqtts") or not parts.hostname:
            raise BridgeConfigError(f"broker url {url!r} must look like mqtt://HOST:PORT or mqtts://HOST:PORT")
        tls = parts.scheme == "mqtts"
        credentials = any(config.get(k) for k in ("username", "password_env", "password_file"))
        if not tls and credentials and not _loopback(parts.hostname) and not config.get("allow_insecure"):
            raise BridgeConfigError(
                f"refusing to send credentials in clear to {url}: use mqtts:// (TLS), or set "
                "allow_insecure on a trusted network"
            )
        paths = {k: Path(config[k]) if config.get(k) else None
                 for k in ("password_file", "ca_file", "cert_file", "key_file")}
        for key, path in paths.items():
            if path is not None and not path.is_file():
                raise BridgeConfigError(f"bridge {key} {path} is not a readable file")
        try:
            port = parts.port or (8883 if tls else 1883)
        except ValueError as exc:
            raise BridgeConfigError(f"broker url {url!r} has a bad port: {exc}") from exc
        return cls(parts.hostname, port, tls, config.get("username"), config.get("password_env"),
                   paths["password_file"], paths["ca_file"], paths["cert_file"], paths["key_file"],
                   int(config.get("keepalive_s", 30)), float(config.get("retry_max_s", 5.0)))

    def password(self) -> str | None:
        """The password from its environment variable or file (refused if others may read the file)."""
        if self.password_env:
            value = os.environ.get(self.password_env)
            if value is None:
                raise BridgeConfigError(
                    f"environment variable {self.password_env} (the broker password) is unset")
            return value
        if self.password_file is None:
            return None
        mode = self.password_file.stat().st_mode
        if os.name == "posix" and mode & 0o077:
            raise BridgeConfigError(f"{self.password_file} is readable by others (mode {mode & 0o777:o}): "
                                    f"run chmod 600 {self.password_file}")
        return self.password_file.read_text(encoding="utf-8").strip()

    def ssl_context(self) -> ssl.SSLContext | None:
        """TLS 1.2+ verified against the CA file (or the system's), with the client certificate if given."""
        if not self.tls:
            return None
        try:
            context = ssl.create_default_context(cafile=str(self.ca_file) if self.ca_file else None)
            context.minimum_version = ssl.TLSVersion.TLSv1_2
            if self.cert_file is not None:
                if self.key_file is not None and os.name == "posix" and self.key_file.stat().st_mode & 0o077:
                    raise BridgeConfigError(
                        f"{self.key_file} is readable by others: run chmod 600 {self.key_file}")
                context.load_cert_chain(str(self.cert_file), str(self.key_file) if self.key_file else None)
        except (OSError, ssl.SSLError) as exc:
            raise BridgeConfigError(f"cannot use the broker's TLS files: {exc}") from exc
        return context

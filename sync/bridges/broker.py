"""Reaching a broker (MQTT 5, or NATS): its URL, credentials (an environment variable or a file only its
owner may read) and TLS (``mqtts://``/``tls://``, a CA file, a client certificate), checked as the home
server's are."""

from __future__ import annotations

import ipaddress
import os
import ssl
import threading
import time
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar
from urllib.parse import urlsplit

from edgeq.sync.bridges.errors import BridgeConfigError, BridgeError

if TYPE_CHECKING:
    from edgeq.sync.bridges.status import StatusBoard

__all__ = ["MQTT_SCHEMES", "NATS_SCHEMES", "BrokerSettings", "Link", "check_broker_config", "reconnecting"]

#: A protocol's URL schemes: whether each is TLS, and its default port.
MQTT_SCHEMES: dict[str, tuple[bool, int]] = {"mqtt": (False, 1883), "mqtts": (True, 8883)}
NATS_SCHEMES: dict[str, tuple[bool, int]] = {"nats": (False, 4222), "tls": (True, 4222)}

_KEYS = {"url", "username", "password_env", "password_file", "ca_file", "cert_file", "key_file",
         "allow_insecure", "keepalive_s", "retry_max_s", "client_id"}
_DEFAULTS: dict[str, Any] = {"allow_insecure": False, "keepalive_s": 30, "retry_max_s": 5.0}
_FIRST_RETRY_S = 0.1


class Link(Protocol):
    """A connection to a broker: ``lost`` set when it ends (``reason`` says why), ``close`` to end it."""

    lost: threading.Event
    reason: str

    def close(self) -> None: ...


L = TypeVar("L", bound=Link)


def _loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_broker_config(config: Mapping[str, Any], own: Mapping[str, Any],
                        schemes: Mapping[str, tuple[bool, int]] = MQTT_SCHEMES) -> dict[str, Any]:
    """The broker keys of ``config`` checked (the kind's own keys and defaults in ``own``)."""
    unknown = set(config) - _KEYS - set(own)
    if unknown:
        raise BridgeConfigError(f"unknown bridge setting(s) {sorted(unknown)}: known ones are "
                                f"{sorted(_KEYS | set(own))}")
    out = {**_DEFAULTS, **own, **config}
    BrokerSettings.from_config(out, schemes)  # refuses what cannot be used now, not when the bridge runs
    return out


@dataclass(frozen=True, slots=True)
class BrokerSettings:
    """Where the broker is (``urls``: NATS takes several, comma-separated) and how to authenticate to it."""

    urls: tuple[str, ...]
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
    def from_config(cls, config: Mapping[str, Any],
                    schemes: Mapping[str, tuple[bool, int]] = MQTT_SCHEMES) -> BrokerSettings:
        url = config.get("url")
        urls = tuple(u.strip() for u in url.split(",")) if isinstance(url, str) else ()
        forms = " or ".join(f"{s}://HOST:PORT" for s in schemes)
        several = schemes is NATS_SCHEMES
        parts = [urlsplit(u) for u in urls]
        if not parts or any(p.scheme not in schemes or not p.hostname for p in parts) or (
                len(parts) > 1 and not several):
            raise BridgeConfigError(f"broker url {url!r} must look like {forms}"
                                    + (" (several: comma-separated)" if several else ""))
        if len({schemes[p.scheme][0] for p in parts}) > 1:
            raise BridgeConfigError(f"broker urls {url!r} mix TLS and plain connections: use one kind")
        tls = schemes[parts[0].scheme][0]
        credentials = any(config.get(k) for k in ("username", "password_env", "password_file"))
        remote = any(p.hostname and not _loopback(p.hostname) for p in parts)
        if not tls and credentials and remote and not config.get("allow_insecure"):
            secure = next(s for s, (is_tls, _) in schemes.items() if is_tls)
            raise BridgeConfigError(f"refusing to send credentials in clear to {url}: use {secure}:// (TLS), "
                                    "or set allow_insecure on a trusted network")
        paths = {k: Path(config[k]) if config.get(k) else None
                 for k in ("password_file", "ca_file", "cert_file", "key_file")}
        for key, path in paths.items():
            if path is not None and not path.is_file():
                raise BridgeConfigError(f"bridge {key} {path} is not a readable file")
        try:
            ports = [p.port or schemes[p.scheme][1] for p in parts]
        except ValueError as exc:
            raise BridgeConfigError(f"broker url {url!r} has a bad port: {exc}") from exc
        return cls(urls, str(parts[0].hostname), ports[0], tls, config.get("username"),
                   config.get("password_env"), paths["password_file"], paths["ca_file"],
                   paths["cert_file"], paths["key_file"], int(config.get("keepalive_s", 30)),
                   float(config.get("retry_max_s", 5.0)))

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


def reconnecting(
    stop: threading.Event, connect: Callable[[], L], board: StatusBoard, retry_max_s: float,
    waiting: str = "",
) -> Generator[L, None, None]:
    """Connections made by ``connect``, one after another until ``stop``: a failed attempt is reported
    (with ``waiting``), and it or a dropped connection retried after a wait doubling up to
    ``retry_max_s`` (back to the shortest once a connection lasted that long)."""
    delay = _FIRST_RETRY_S
    while not stop.is_set():
        try:
            conn = connect()
        except BridgeError as exc:
            board.error(f"{exc}{waiting}")
            stop.wait(delay)
            delay = min(delay * 2, retry_max_s)
            continue
        board.connected(True)
        since = time.monotonic()
        try:
            yield conn
        finally:
            board.connected(False)
            conn.close()
        if not stop.is_set():
            board.error(f"lost the broker connection ({conn.reason}); reconnecting")
            delay = _FIRST_RETRY_S if time.monotonic() - since >= retry_max_s else min(delay * 2, retry_max_s)
            stop.wait(delay)

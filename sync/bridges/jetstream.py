"""One connection to a NATS server with JetStream (nats-py, its event loop in a thread of its own): made
whole or refused with :class:`BrokerUnavailable`; nats-py moves it within the cluster, ``lost`` once it
gives up. Also the check that a server and stream take a per-message TTL (docs/bridges.md)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Coroutine, Mapping
from typing import Any, TypeVar

import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.js.api import StreamConfig, StreamInfo

from edgeq.sync.bridges.broker import NATS_SCHEMES, BrokerSettings, check_broker_config
from edgeq.sync.bridges.errors import BridgeConfigError, BridgeError, BrokerUnavailable
from edgeq.sync.bridges.status import StatusBoard

__all__ = ["TTL_SERVER", "UNAVAILABLE", "JetStreamLink", "RawHeaders", "check_jetstream_config",
           "check_ttl_support", "stream_for"]

log = logging.getLogger("edgeq.bridges")

T = TypeVar("T")
#: The first nats-server release with per-message TTL (the ``Nats-TTL`` header, ADR-43).
TTL_SERVER = (2, 11)
#: The settings both JetStream kinds take besides the broker's.
_COMMON: dict[str, Any] = {"stream": None, "topics": None, "ack_timeout_s": 5.0}
#: The errors nats-py raises when the server or the stream cannot answer now (retried, never the message's).
UNAVAILABLE = (nats.errors.TimeoutError, nats.errors.NoRespondersError, nats.errors.ConnectionClosedError,
               nats.js.errors.ServiceUnavailableError, nats.js.errors.NoStreamResponseError,
               asyncio.TimeoutError, concurrent.futures.TimeoutError, OSError)


class RawHeaders(dict[str, str]):
    """nats-py's parsed headers, with the block as it came (``raw``): the in-bridge checks it itself."""

    raw: bytes = b""


class _Client(Client):
    """nats-py's client keeping each message's header block whole (it drops malformed lines quietly)."""

    async def _process_headers(self, headers: bytes) -> dict[str, str] | None:
        parsed = await super()._process_headers(headers)
        if not headers:
            return parsed
        kept = RawHeaders(parsed or {})
        kept.raw = bytes(headers)
        return kept


def check_jetstream_config(config: Mapping[str, Any], own: Mapping[str, Any]) -> dict[str, Any]:
    """The settings of a JetStream kind checked (its own keys and defaults in ``own``)."""
    out = check_broker_config(config, {**_COMMON, **own}, NATS_SCHEMES)
    stream = out["stream"]
    if not isinstance(stream, str) or not stream or any(c in stream for c in " .*>/\\\t"):
        raise BridgeConfigError(f"a JetStream bridge needs stream: the stream's name, not {stream!r}")
    topics = out["topics"]
    if not isinstance(topics, list) or not topics or not all(isinstance(t, str) and t for t in topics):
        raise BridgeConfigError(f"a JetStream bridge needs topics: a list of subjects, not {topics!r}")
    timeout = out["ack_timeout_s"]
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        raise BridgeConfigError(f"ack_timeout_s must be a positive number of seconds, not {timeout!r}")
    return out


def check_ttl_support(version: tuple[int, int, int], config: StreamConfig) -> None:
    """Refuse a server older than 2.11 or a stream without ``allow_msg_ttl``, saying what to change."""
    name = config.name
    if version[:2] < TTL_SERVER:
        raise BridgeConfigError(
            f"the NATS server is {'.'.join(map(str, version))}: a per-message TTL (Nats-TTL), which carries "
            f"each message's expiry into stream {name}, needs nats-server 2.11 or later: upgrade the servers")
    if not config.allow_msg_ttl:
        raise BridgeConfigError(
            f"stream {name} does not allow a per-message TTL, which carries each message's expiry: turn on "
            "allow_msg_ttl in its configuration (a stream update may turn it on, never off)")


def stream_for(link: JetStreamLink, stream: str, subject: str | None = None) -> StreamInfo:
    """Stream ``stream``'s info, refused clearly if missing or (``subject``) not the one capturing it."""
    try:
        info = link.call(link.js.stream_info(stream))
        if subject is not None and link.call(link.js.find_stream_name_by_subject(subject)) != stream:
            raise BridgeConfigError(f"subject {subject!r} is not stored by stream {stream}: add it to the "
                                    "stream's subjects, or name the stream that stores it")
    except nats.js.errors.NotFoundError as exc:
        where = ", ".join(link.settings.urls)
        raise BridgeConfigError(f"no JetStream stream {stream!r} (or none for subject {subject!r}) on "
                                f"{where}: create it first ({exc.description})") from exc
    except nats.js.errors.APIError as exc:
        raise BridgeError(f"JetStream refused to describe stream {stream!r}: {exc.description}") from exc
    return info


class JetStreamLink:
    """A connected nats-py client on an event loop of its own: :meth:`call` or :meth:`submit` coroutines."""

    def __init__(self, settings: BrokerSettings, name: str, timeout_s: float,
                 board: StatusBoard | None = None) -> None:
        self.settings, self.timeout_s, self._board = settings, timeout_s, board
        self.lost = threading.Event()
        self.reason = ""
        self._shut = False
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"nats-{name}", daemon=True)
        self._thread.start()
        self.client = _Client()
        try:
            self.call(self._connect(name), timeout_s + 1)
        except (nats.errors.Error, *UNAVAILABLE) as exc:
            self.close()
            why = f"{type(exc).__name__} {exc}".rstrip()
            last = f" (the last error: {self.reason})" if self.reason and self.reason != why else ""
            raise BrokerUnavailable(f"cannot reach NATS at {', '.join(settings.urls)}: {why}{last}") from exc
        except BaseException:
            self.close()
            raise
        self.js = self.client.jetstream(timeout=timeout_s)

    async def _connect(self, name: str) -> None:
        s = self.settings
        await self.client.connect(
            servers=list(s.urls), name=name, connect_timeout=max(1, round(self.timeout_s)),
            allow_reconnect=True, max_reconnect_attempts=3, reconnect_time_wait=0,  # reconnecting() waits
            ping_interval=s.keepalive_s, user=s.username, password=s.password(), tls=s.ssl_context(),
            error_cb=self._error,  # each server's certificate checked against its own host name
            disconnected_cb=self._disconnected, reconnected_cb=self._reconnected, closed_cb=self._closed)

    async def _error(self, exc: Exception) -> None:
        log.info("NATS connection: %s: %s", type(exc).__name__, exc)
        self.reason = f"{type(exc).__name__} {exc}".rstrip()

    async def _disconnected(self) -> None:
        if self._board is not None and not self.lost.is_set():
            self._board.connected(False)

    async def _reconnected(self) -> None:
        log.info("NATS connection moved to %s", self.client.connected_url)
        if self._board is not None:
            self._board.connected(True)

    async def _closed(self) -> None:
        self.reason = self.reason or "closed"
        self.lost.set()

    def version(self) -> tuple[int, int, int]:
        v = self.client.connected_server_version
        return v.major, v.minor, v.patch

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run ``coro`` on the connection's loop; its future."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def call(self, coro: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        """Run ``coro`` on the connection's loop and wait for its result (at most ``timeout_s``)."""
        future = self.submit(coro)
        try:
            return future.result(self.timeout_s + 1 if timeout_s is None else timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise

    def close(self) -> None:
        """Close the client (what it holds unacknowledged is redelivered) and stop the loop; once."""
        if self._shut:
            return
        self._shut = True
        self.lost.set()
        if self.client.is_connected or self.client.is_reconnecting:
            try:
                self.call(self.client.close(), 5)
            except (nats.errors.Error, *UNAVAILABLE) as exc:
                log.info("closing the NATS connection: %s", exc)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        if not self._thread.is_alive():
            self._loop.close()

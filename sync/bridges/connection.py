"""One connection to an MQTT 5 broker (paho-mqtt, its network loop in a thread): made whole or
refused with :class:`BrokerUnavailable`; a new one for every reconnection."""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Callable
from typing import Any

from paho.mqtt.client import Client, ConnectFlags, DisconnectFlags, MQTTMessage
from paho.mqtt.enums import CallbackAPIVersion, MQTTProtocolVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode
from paho.mqtt.subscribeoptions import SubscribeOptions

from edgeq.sync.bridges.broker import BrokerSettings
from edgeq.sync.bridges.errors import BridgeError, BrokerUnavailable

__all__ = ["PACKET_FAULTS", "BridgeClient", "Connection"]

_CONNECT_TIMEOUT_S = 5.0
#: MQTT 5's Receive Maximum when the CONNACK does not give one.
_RECEIVE_MAXIMUM = 65_535
#: Why a connection ends when a packet was at fault (MQTT 5 reason codes; paho says Protocol Error for an
#: answer it cannot read, as mosquitto's PUBACK 0x95 for a PUBLISH over its message_size_limit).
PACKET_FAULTS = frozenset({0x81, 0x82, 0x95, 0x99})  # Malformed, Protocol Error, Too Large, Payload Format


class BridgeClient(Client):
    """paho's client, closing the socket of a TLS handshake that failed (paho 2.2 leaves it open)."""

    def _ssl_wrap_socket(self, tcp_sock: socket.socket) -> ssl.SSLSocket:
        if self._ssl_context is None:
            raise BridgeError("TLS was asked for without a TLS context")
        ssl_sock = self._ssl_context.wrap_socket(tcp_sock, server_hostname=self._host,
                                                 do_handshake_on_connect=False)
        try:
            ssl_sock.settimeout(self._connect_timeout)
            ssl_sock.do_handshake()  # the context checks the host name (BrokerSettings.ssl_context)
        except BaseException:
            ssl_sock.close()
            raise
        return ssl_sock


class Connection:
    """A connected client: ``session_present`` from the CONNACK, ``lost`` set when it drops."""

    def __init__(
        self, settings: BrokerSettings, client_id: str, *, clean_start: bool, session_expiry_s: int = 0,
        on_message: Callable[[Client, MQTTMessage], None] | None = None,
        client_cls: type[BridgeClient] = BridgeClient, manual_ack: bool = False, max_inflight: int = 20,
        accept_unacked: int | None = None,
    ) -> None:
        self.lost = threading.Event()
        self.session_present = False
        self.reason = ""
        #: The reason code the connection ended with (None: open, or it never connected).
        self.reason_code: int | None = None
        #: The broker's Maximum Packet Size (CONNACK), or None if it announces none.
        self.maximum_packet_size: int | None = None
        #: The broker's Receive Maximum (CONNACK): how many QoS 1/2 PUBLISHes it takes unacknowledged.
        self.receive_maximum = _RECEIVE_MAXIMUM
        #: Called (in paho's thread) with each PUBACK's or PUBCOMP's packet id and reason code.
        self.on_published: Callable[[int, ReasonCode], None] | None = None
        self._ready = threading.Event()
        client = client_cls(CallbackAPIVersion.VERSION2, client_id=client_id,
                            protocol=MQTTProtocolVersion.MQTTv5, manual_ack=manual_ack,
                            reconnect_on_failure=False)
        client.max_inflight_messages_set(max_inflight)  # paho's window; the broker's own is receive_maximum
        if settings.username or settings.password_env or settings.password_file:
            client.username_pw_set(settings.username, settings.password())
        context = settings.ssl_context()
        if context is not None:
            client.tls_set_context(context)
        client.on_connect = self._connected
        client.on_disconnect = self._disconnected
        client.on_publish = self._published
        if on_message is not None:
            client.on_message = lambda c, _u, message: on_message(c, message)
        props = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
        props.SessionExpiryInterval = session_expiry_s
        if accept_unacked is not None:  # our Receive Maximum: QoS 1/2 PUBLISHes the broker may send unacked
            props.ReceiveMaximum = min(accept_unacked, 65_535)
        self.client = client
        try:
            client.connect(settings.host, settings.port, settings.keepalive_s, clean_start=clean_start,
                           properties=props)
        except OSError as exc:
            raise BrokerUnavailable(
                f"cannot reach the broker at {settings.host}:{settings.port}: {exc}") from exc
        client.loop_start()
        if not self._ready.wait(_CONNECT_TIMEOUT_S) or self.lost.is_set():
            self.close()
            raise BrokerUnavailable(f"the broker at {settings.host}:{settings.port} did not accept the "
                                    f"connection ({self.reason or 'no CONNACK in time'})")

    def _connected(self, _c: Client, _u: Any, flags: ConnectFlags, rc: ReasonCode, props: Any) -> None:
        if rc.is_failure:
            self.reason = str(rc)
            self.lost.set()
        else:
            self.session_present = flags.session_present
            self.receive_maximum = int(getattr(props, "ReceiveMaximum", _RECEIVE_MAXIMUM))
            size = getattr(props, "MaximumPacketSize", None)
            self.maximum_packet_size = None if size is None else int(size)
        self._ready.set()

    def _disconnected(self, _c: Client, _u: Any, _f: DisconnectFlags, rc: ReasonCode, _p: Any) -> None:
        self.reason, self.reason_code = str(rc), rc.value
        self.lost.set()
        self._ready.set()

    def subscribe(self, topics: list[str], qos: int) -> None:
        """Subscribe to topic filters and wait for the SUBACK; a filter the broker refuses is an error."""
        done = threading.Event()
        codes: list[ReasonCode] = []

        def acked(_c: Client, _u: Any, _mid: int, reason_codes: list[ReasonCode], _p: Any) -> None:
            codes.extend(reason_codes)
            done.set()

        self.client.on_subscribe = acked
        self.client.subscribe([(t, SubscribeOptions(qos=qos)) for t in topics])
        if not done.wait(_CONNECT_TIMEOUT_S):
            raise BrokerUnavailable("the broker did not answer the subscription (no SUBACK in time)")
        refused = [f"{t!r}: {c}" for t, c in zip(topics, codes, strict=False) if c.is_failure]
        if refused:
            raise BridgeError(f"the broker refused the subscription to {', '.join(refused)}")

    def _published(self, _c: Client, _u: Any, mid: int, rc: ReasonCode, _p: Any) -> None:
        if self.on_published is not None:
            self.on_published(mid, rc)

    def close(self) -> None:
        """Disconnect (the broker keeps a persistent session) and stop the network thread."""
        self.lost.set()
        self.client.disconnect()
        self.client.loop_stop()

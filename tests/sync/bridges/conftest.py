"""Fixtures for the bridges' tests: a real mosquitto (Debian's) on a free loopback port with a config
file written here, one per test module; paho-mqtt clients as the devices."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from paho.mqtt.client import Client, MQTTMessage, MQTTMessageInfo
from paho.mqtt.enums import CallbackAPIVersion, MQTTProtocolVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.subscribeoptions import SubscribeOptions

from tests.sync.bridges.natscluster import NatsCluster
from tests.sync.conftest import free_port
from tests.waits import until

MOSQUITTO = shutil.which("mosquitto") or shutil.which("mosquitto", path="/usr/sbin")


class Broker:
    """A mosquitto process with persistence, stopped and started again on the same port."""

    def __init__(self, workdir: Path) -> None:
        assert MOSQUITTO, "mosquitto is not installed: make test installs it (apt-get install mosquitto)"
        self.port = free_port()
        self.url = f"mqtt://127.0.0.1:{self.port}"
        self.config = workdir / "mosquitto.conf"
        self.config.write_text(
            f"listener {self.port} 127.0.0.1\nallow_anonymous true\npersistence true\n"
            f"persistence_location {workdir}/\nautosave_interval 1\nlog_dest stderr\nlog_type error\n"
            "max_inflight_messages 20\nmax_queued_messages 10000\n"
            # run as root (CI), mosquitto would switch to its own user, who cannot write the snapshot here
            f"user {pwd.getpwuid(os.getuid()).pw_name}\n"
        )
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen([str(MOSQUITTO), "-c", str(self.config)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        until(self._listening, f"mosquitto listening on port {self.port}", timeout=10)

    def _listening(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            said = self.process.stderr.read().decode() if self.process.stderr else ""
            raise AssertionError(f"mosquitto exited: {said}")
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
        except OSError:
            return False
        return True

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(10)
            if self.process.stderr is not None:
                self.process.stderr.close()
            self.process = None


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    b = Broker(tmp_path_factory.mktemp("mosquitto"))
    b.start()
    yield b
    b.stop()


class Device:
    """An MQTT 5 device (paho): publishes, and collects what its subscriptions receive."""

    def __init__(self, broker: Broker, client_id: str, *, clean_start: bool = True) -> None:
        self.received: list[MQTTMessage] = []
        self.changed = threading.Condition()
        self.client = Client(CallbackAPIVersion.VERSION2, client_id=client_id,
                             protocol=MQTTProtocolVersion.MQTTv5)
        self.client.on_message = self._message
        self.client.reconnect_delay_set(1, 1)  # back soon after a broker restarts
        props = Properties(PacketTypes.CONNECT)
        props.SessionExpiryInterval = 0 if clean_start else 3600
        self.client.connect("127.0.0.1", broker.port, clean_start=clean_start, properties=props)
        self.client.loop_start()
        until(self.client.is_connected, "the device connected", timeout=10)

    def _message(self, _c: Client, _u: Any, message: MQTTMessage) -> None:
        with self.changed:
            self.received.append(message)
            self.changed.notify_all()

    def subscribe(self, topic: str, qos: int = 2) -> None:
        done = threading.Event()
        self.client.on_subscribe = lambda *_: done.set()
        self.client.subscribe(topic, options=SubscribeOptions(qos=qos))
        assert done.wait(10), "no SUBACK"

    def publish(self, topic: str, payload: bytes, qos: int = 2, *, retain: bool = False, wait: bool = True,
                **properties: Any) -> MQTTMessageInfo:
        """Publish, waiting for the broker's acknowledgement unless ``wait`` is False."""
        props = Properties(PacketTypes.PUBLISH)
        for name, value in properties.items():
            setattr(props, name, value)
        info = self.client.publish(topic, payload, qos, retain=retain, properties=props)
        if wait:
            info.wait_for_publish(10)
        return info

    def wait_for(self, count: int, timeout: float = 15) -> list[MQTTMessage]:
        with self.changed:
            assert self.changed.wait_for(lambda: len(self.received) >= count, timeout), (
                f"{len(self.received)} of {count} messages arrived")
            return list(self.received)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


@pytest.fixture
def device(broker: Broker, request: pytest.FixtureRequest) -> Iterator[Device]:
    d = Device(broker, f"device-{request.node.name}"[:60])
    yield d
    d.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsCluster]:
    """A three-node JetStream cluster for the module (tests/sync/bridges/natscluster.py)."""
    c = NatsCluster(tmp_path_factory.mktemp("nats"))
    try:
        c.start()  # a node that fails to start leaves the others running: stopped below
        yield c
    finally:
        c.stop()

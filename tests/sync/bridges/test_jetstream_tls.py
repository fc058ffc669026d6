"""TLS to NATS as to an MQTT broker: a jetstream-out bridge reaches a nats-server serving TLS only
(``tls://``) when its certificate is signed by the bridge's ``ca_file``, and is refused when defined
against a CA that did not sign it."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
from pathlib import Path

import nats
import pytest
from nats.js.api import StreamConfig

from edgeq import Message, QueueManager
from edgeq.sync.bridges.book import define_bridge
from edgeq.sync.bridges.errors import BridgeConfigError
from tests.sync.agent.test_tls import make_pki
from tests.sync.bridges.kit import running
from tests.sync.bridges.natscluster import server_binary
from tests.sync.conftest import free_port
from tests.waits import until


def test_tls_verifies_the_server_against_the_ca_file(tmp_path: Path) -> None:
    pki, stranger = make_pki(tmp_path / "pki", "nats"), make_pki(tmp_path / "other", "stranger")
    port = free_port()
    config = tmp_path / "tls.conf"
    config.write_text(f'listen: 127.0.0.1:{port}\njetstream {{ store_dir: "{tmp_path / "js"}" }}\n'
                      f'tls {{ cert_file: "{pki.cert}", key_file: "{pki.key}" }}\n')
    with (tmp_path / "server.log").open("wb") as log:
        server = subprocess.Popen([str(server_binary()), "-c", str(config)], stdout=subprocess.DEVNULL,
                                  stderr=log)
    url = f"tls://127.0.0.1:{port}"
    context = ssl.create_default_context(cafile=str(pki.ca))

    async def add_stream() -> bool:
        try:
            nc = await nats.connect(url, tls=context, connect_timeout=1, max_reconnect_attempts=0)
        except Exception:  # not listening yet
            return False
        try:
            await nc.jetstream().add_stream(StreamConfig(name="T", subjects=["t.>"], allow_msg_ttl=True))
        finally:
            await nc.close()
        return True

    try:
        until(lambda: asyncio.run(add_stream()), "the TLS server up, with stream T", 15)
        with QueueManager(tmp_path / "dev.db", name="DEV1") as qm:
            qm.define_queue("OUT")
            base = {"url": url, "stream": "T", "topics": ["t.out"], "ack_timeout_s": 1}
            with pytest.raises(BridgeConfigError, match=r"cannot reach NATS .*CERTIFICATE_VERIFY_FAILED"):
                define_bridge(qm, "untrusted", "jetstream-out", "OUT", {**base, "ca_file": str(stranger.ca)})
            define_bridge(qm, "trusted", "jetstream-out", "OUT", {**base, "ca_file": str(pki.ca)})
            qm.put("OUT", Message(b"over TLS"))
            with running(qm, ["trusted"]):
                until(lambda: qm.depth("OUT") == 0, "forwarded over TLS")
    finally:
        server.terminate()
        server.wait(10)

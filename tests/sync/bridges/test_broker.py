"""Credentials and TLS for the broker, as the home server's: a password from an environment variable or a
file only its owner may read, a broker certificate checked against a CA file; a broker that refuses
them, or is not trusted, is an error the bridge's status shows."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from edgeq import QueueManager
from edgeq.sync.bridges.book import define_bridge
from edgeq.sync.bridges.broker import BrokerSettings
from edgeq.sync.bridges.errors import BridgeConfigError
from tests.sync.agent.test_tls import Pki, make_pki
from tests.sync.bridges.conftest import Broker
from tests.sync.bridges.kit import running
from tests.waits import until


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """A broker that wants a user name and password (sensor / s3cret)."""
    workdir = tmp_path_factory.mktemp("mosquitto-auth")
    passwords = workdir / "passwd"
    subprocess.run(["mosquitto_passwd", "-c", "-b", str(passwords), "sensor", "s3cret"], check=True,
                   capture_output=True)
    b = Broker(workdir)
    b.config.write_text(b.config.read_text().replace("allow_anonymous true", "allow_anonymous false")
                        + f"password_file {passwords}\n")
    passwords.chmod(0o644)  # mosquitto reads it as its own user
    b.start()
    yield b
    b.stop()


def test_the_password_comes_from_the_environment_or_a_private_file(
    tmp_path: Path, broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tmp_path / "password"
    secret.write_text("s3cret\n")
    secret.chmod(0o644)
    config = {"url": broker.url, "username": "sensor", "password_file": str(secret)}
    settings = BrokerSettings.from_config(config)
    with pytest.raises(BridgeConfigError, match=r"readable by others .* chmod 600"):
        settings.password()
    secret.chmod(0o600)
    assert settings.password() == "s3cret"
    unset = BrokerSettings.from_config({"url": broker.url, "username": "sensor", "password_env": "NOT_SET_X"})
    with pytest.raises(BridgeConfigError, match=r"NOT_SET_X .* is unset"):
        unset.password()
    monkeypatch.setenv("BRIDGE_PASSWORD", "wrong")
    with QueueManager(tmp_path / "dev.db", name="DEV1") as qm:
        qm.define_queue("IN")
        base = {"url": broker.url, "topics": ["auth/#"], "username": "sensor", "retry_max_s": 0.2}
        define_bridge(qm, "env", "mqtt-in", "IN", {**base, "password_env": "BRIDGE_PASSWORD"})
        define_bridge(qm, "file", "mqtt-in", "IN", {**base, "password_file": str(secret)})
        with running(qm, connect=False) as runner:
            env, file = runner.bridges
            until(lambda: file.board.state().connected, "the bridge with the password file connected")
            until(lambda: env.board.state().errors > 0, "the wrong password refused")
            assert not env.board.state().connected
            assert "did not accept the connection" in (env.board.state().last_error or "")


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Broker, Pki]]:
    """A broker serving MQTT over TLS only, with a certificate for 127.0.0.1 from a throw-away CA."""
    workdir = tmp_path_factory.mktemp("mosquitto-tls")
    pki = make_pki(workdir / "pki", "broker")
    b = Broker(workdir)
    b.url = b.url.replace("mqtt://", "mqtts://")
    b.config.write_text(b.config.read_text() + f"cafile {pki.ca}\ncertfile {pki.cert}\nkeyfile {pki.key}\n")
    b.start()
    yield b, pki
    b.stop()


def test_tls_verifies_the_broker_against_the_ca_file(
    tmp_path: Path, tls_broker: tuple[Broker, Pki], tmp_path_factory: pytest.TempPathFactory
) -> None:
    broker, pki = tls_broker
    stranger = make_pki(tmp_path_factory.mktemp("other-pki"), "stranger")
    with QueueManager(tmp_path / "dev.db", name="DEV1") as qm:
        qm.define_queue("IN")
        base = {"url": broker.url, "topics": ["tls/#"], "retry_max_s": 0.2}
        define_bridge(qm, "trusted", "mqtt-in", "IN", {**base, "ca_file": str(pki.ca)})
        define_bridge(qm, "untrusted", "mqtt-in", "IN", {**base, "ca_file": str(stranger.ca)})
        with running(qm, connect=False) as runner:
            trusted, untrusted = runner.bridges
            until(lambda: trusted.board.state().connected, "the bridge trusting the broker's CA connected")
            until(lambda: untrusted.board.state().errors > 0, "the other refused")
            assert not untrusted.board.state().connected
            assert "CERTIFICATE_VERIFY_FAILED" in (untrusted.board.state().last_error or "")

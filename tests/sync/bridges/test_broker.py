"""Credentials for the broker, as the home server's: an environment variable, or a file only its owner
may read; a broker that refuses them is an error the bridge's status shows."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from edgeq import QueueManager
from edgeq.sync.bridges.book import define_bridge
from edgeq.sync.bridges.broker import BrokerSettings
from edgeq.sync.bridges.errors import BridgeConfigError
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

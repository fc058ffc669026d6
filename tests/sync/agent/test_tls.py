"""Sync over HTTPS: a throw-away CA and server certificate (made here with
``cryptography``), a real uvicorn TLS server, and the agent's refusals: an
untrusted certificate, and plain HTTP to a host that is not loopback."""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import re
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from edgeq import ManualClock, Message, QueueManager
from edgeq.sync.agent.agent import SyncAgent
from edgeq.sync.agent.tls import (
    InsecureTransport,
    TLSConfigError,
    check_server_url,
    client_ssl_context,
    is_loopback,
)
from edgeq.sync.keys import new_key_pair
from tests.sync.conftest import EDGEQ, LiveServer, _Server, edgeq_serve, free_port


@dataclass(frozen=True)
class Pki:
    ca: Path
    cert: Path
    key: Path


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def make_pki(where: Path, label: str) -> Pki:
    """A CA, and a server certificate it signs for 127.0.0.1, ::1 and localhost."""
    where.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder().subject_name(_name(f"{label} test CA"))
        .issuer_name(_name(f"{label} test CA"))
        .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False, encipher_only=False,
                                     decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder().subject_name(_name("edgeq home")).issuer_name(ca.subject)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([
            x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
            x509.IPAddress(ipaddress.ip_address("::1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pki = Pki(where / "ca.crt", where / "server.crt", where / "server.key")
    pki.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    pki.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pki.key.write_bytes(_pem_key(key))
    pki.key.chmod(0o600)
    return pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"), "right")


@pytest.fixture(scope="module")
def other_pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("other-pki"), "wrong")


class TLSServer(LiveServer):
    """:class:`LiveServer`, serving HTTPS with ``pki``'s server certificate."""

    def __init__(self, qm: QueueManager, clock: ManualClock | None, pki: Pki, **app_options: Any) -> None:
        super().__init__(qm, clock, **app_options)
        config = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_config=None, lifespan="off",
                                access_log=False, ssl_certfile=str(pki.cert), ssl_keyfile=str(pki.key))
        self.server = _Server(config, self._ready)
        self.url = f"https://127.0.0.1:{self.port}"


@pytest.fixture
def tls_server(home_qm: QueueManager, server_clock: ManualClock, pki: Pki) -> Iterator[TLSServer]:
    server = TLSServer(home_qm, server_clock, pki)
    server.start()
    yield server
    server.stop()


def test_sync_over_tls_with_the_ca_file(
    tls_server: TLSServer, pki: Pki, home_qm: QueueManager, device_qm: QueueManager,
    make_agent: Callable[..., SyncAgent],
) -> None:
    device_qm.put_many("ORDERS", [Message(b"m%d" % i) for i in range(50)])
    report = make_agent(device_qm, tls_server.url, ca_file=pki.ca).push_once()
    assert report.error is None and report.transmitted == 50
    assert home_qm.depth("ORDERS") == 50


def test_the_host_name_localhost_matches_too(
    tls_server: TLSServer, pki: Pki, device_qm: QueueManager, make_agent: Callable[..., SyncAgent]
) -> None:
    agent = make_agent(device_qm, f"https://localhost:{tls_server.port}", ca_file=pki.ca)
    assert agent.hello().server == "HOME"


@pytest.mark.parametrize("trust", ["wrong-ca", "system-store"])
def test_an_untrusted_certificate_is_refused(
    trust: str, tls_server: TLSServer, other_pki: Pki, home_qm: QueueManager, device_qm: QueueManager,
    make_agent: Callable[..., SyncAgent],
) -> None:
    device_qm.put("ORDERS", Message(b"secret"))
    agent = make_agent(device_qm, tls_server.url, ca_file=other_pki.ca if trust == "wrong-ca" else None)
    report = agent.push_once()
    assert report.error is not None and "TLS certificate is not trusted" in report.error
    assert "--ca-file" in report.error
    assert home_qm.depth("ORDERS") == 0 and device_qm.depth("ORDERS") == 1


def test_plain_http_to_a_remote_host_is_refused_unless_allowed(
    device_qm: QueueManager, make_agent: Callable[..., SyncAgent]
) -> None:
    with pytest.raises(InsecureTransport, match=re.escape("refusing plain HTTP to http://192.0.2.10:8470")):
        make_agent(device_qm, "http://192.0.2.10:8470")
    with pytest.raises(InsecureTransport, match="must start with https://"):
        make_agent(device_qm, "ftp://home:8470")
    agent = make_agent(device_qm, "http://192.0.2.10:8470", allow_insecure_http=True)
    assert agent.transport.server_url == "http://192.0.2.10:8470"


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.8.9.1", True), ("::1", True), ("[::1]", True), ("localhost", True),
    ("LOCALHOST", True), ("10.0.0.1", False), ("home", False), ("localhost.evil.example", False), ("", False),
])
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_check_server_url() -> None:
    check_server_url("https://10.0.0.1:8470")
    check_server_url("http://[::1]:8470")
    check_server_url("http://10.0.0.1:8470", allow_insecure_http=True)
    with pytest.raises(InsecureTransport):
        check_server_url("http://10.0.0.1:8470")


def test_a_bad_ca_file_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "ca.crt"
    bad.write_text("not a certificate")
    with pytest.raises(TLSConfigError, match="cannot use CA file"):
        client_ssl_context(bad)


# -- the command line: edgeq serve --tls-cert/--tls-key, edgeq sync --ca-file/--key ------------------


def test_edgeq_serve_tls_and_signed_sync_end_to_end(tmp_path: Path, pki: Pki, other_pki: Pki) -> None:
    home, device = tmp_path / "home.db", tmp_path / "device.db"
    pair = new_key_pair(tmp_path / "dev1.key")
    with QueueManager(home, name="HOME") as qm:
        qm.define_queue("ORDERS")
        qm.register_device("DEV1", pair.public_key)
    with QueueManager(device, name="DEV1") as qm:
        qm.define_remote_queue("ORDERS", target_qmgr="HOME")
        qm.put_many("ORDERS", [Message(b"m%d" % i) for i in range(200)])
    port = free_port()
    with edgeq_serve(home, port, "--auth", "--tls-cert", str(pki.cert), "--tls-key", str(pki.key)):
        url = f"https://localhost:{port}"
        sync = [*EDGEQ, "sync", "--db", str(device), "--server", url, "--once", "--key",
                str(pair.private_path)]
        wrong = subprocess.run([*sync, "--ca-file", str(other_pki.ca)], capture_output=True, text=True,
                               timeout=60)
        assert (wrong.returncode == 1
                and "certificate is not trusted" in json.loads(wrong.stdout)["pushed"]["error"])
        done = subprocess.run([*sync, "--ca-file", str(pki.ca)], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
        assert json.loads(done.stdout)["pushed"]["transmitted"] == 200
        plain = subprocess.run([*EDGEQ, "sync", "--db", str(device), "--server", "http://192.0.2.10:8470",
                                "--once"],
                               capture_output=True, text=True, timeout=60)
        assert plain.returncode == 2 and "refusing plain HTTP" in plain.stderr  # a usage mistake
    with QueueManager(home) as qm:
        assert qm.depth("ORDERS") == 200

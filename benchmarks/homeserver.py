"""``edgeq serve`` as the fleet, TLS and wire cases run it: a subprocess on a free loopback
port, plain HTTP or HTTPS (with a throw-away CA and certificate made here), signatures
required or not, stopped with SIGTERM; and the devices' keys, registered in its store.

A device's key and its registration are made by :func:`register_devices` (in a setup
child, before the server starts); the device side signs with
``DeviceSigner.from_file(name, key_file(where, name))``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import ipaddress
import ssl
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from benchmarks.peers.mqtt_peer import cpu_seconds, free_port, stop_process
from benchmarks.runner import ROOT, ChildError, Context, child_env

__all__ = ["HomeServer", "Pki", "key_file", "make_pki", "register_devices"]

SERVER_NAME = "HOME"
_READY_DEADLINE_S = 60.0


@dataclass(frozen=True)
class Pki:
    """A CA certificate, and a server certificate it signed (for 127.0.0.1) with its key."""

    ca: Path
    cert: Path
    key: Path


def make_pki(where: Path) -> Pki:
    """A throw-away CA and a server certificate for 127.0.0.1 and localhost, valid a day."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    def name(text: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, text)])

    def signed(subject: str, key: Any, issuer: str, issuer_key: Any, ca: bool) -> x509.Certificate:
        now = dt.datetime.now(dt.UTC)
        builder = (x509.CertificateBuilder().subject_name(name(subject)).issuer_name(name(issuer))
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - dt.timedelta(minutes=5))
                   .not_valid_after(now + dt.timedelta(days=1))
                   .add_extension(x509.BasicConstraints(ca=ca, path_length=0 if ca else None), critical=True))
        if not ca:
            builder = builder.add_extension(x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False)
        return builder.sign(issuer_key, hashes.SHA256())

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = signed("edgeq bench CA", ca_key, "edgeq bench CA", ca_key, True)
    cert = signed("edgeq bench home", key, "edgeq bench CA", ca_key, False)
    pki = Pki(where / "ca.pem", where / "home.pem", where / "home.key")
    pki.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    pki.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pki.key.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    return pki


def key_file(where: Path, device: str) -> Path:
    """Where a device's private key is kept (in the scratch directory)."""
    return where / "keys" / f"{device}.pem"


def register_devices(server_db: Path, where: Path, devices: list[str], queues: list[str]) -> None:
    """Make each device's key pair (private key in :func:`key_file`) and register it in the
    server's store, allowed to push to ``queues`` (child side: imports edgeq)."""
    from edgeq import QueueManager
    from edgeq.sync.keys import new_key_pair

    (where / "keys").mkdir(parents=True, exist_ok=True)
    with QueueManager(server_db) as home:
        for device in devices:
            home.register_device(device, new_key_pair(key_file(where, device)).public_key, queues=queues)


class HomeServer:
    """``edgeq serve --durability full`` over ``server_db`` (which must exist), started on
    entry and stopped on exit. ``auth``: require signatures; ``pki``: serve HTTPS with
    its certificate (clients verify against ``pki.ca``)."""

    def __init__(self, ctx: Context, server_db: Path, *, auth: bool, pki: Pki | None = None,
                 extra: tuple[str, ...] = ()) -> None:
        self.port = free_port()
        self.pki = pki
        self.url = f"{'https' if pki else 'http'}://127.0.0.1:{self.port}"
        self.log_file = server_db.with_name("serve.log")
        tls = ["--tls-cert", str(pki.cert), "--tls-key", str(pki.key)] if pki else []
        self.command = [ctx.python, "-m", "edgeq", "serve", "--db", str(server_db), "--host", "127.0.0.1",
                        "--port", str(self.port), "--durability", "full", "--auth" if auth else "--no-auth",
                        "--sweep-interval", "0", "--log-level", "warning", *tls, *extra]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> HomeServer:
        """Start the server and wait until ``/healthz`` answers."""
        with self.log_file.open("w", encoding="utf-8") as log:
            self.proc = subprocess.Popen(self.command, cwd=ROOT, env={**child_env(), "PYTHONUNBUFFERED": "1"},
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        context = ssl.create_default_context(cafile=str(self.pki.ca)) if self.pki else None
        deadline = time.monotonic() + _READY_DEADLINE_S
        while True:
            try:
                with urllib.request.urlopen(self.url + "/healthz", timeout=2.0, context=context) as answer:
                    if answer.status == 200:
                        return self
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise ChildError(f"edgeq serve not healthy within {_READY_DEADLINE_S:.0f} s: {self.tail()}")
            try:
                code = self.proc.wait(timeout=0.05)
            except subprocess.TimeoutExpired:
                continue
            raise ChildError(f"edgeq serve exited with {code}: {self.tail()}")

    def cpu(self) -> float | None:
        """CPU seconds the server has used so far."""
        return cpu_seconds(self.proc.pid) if self.proc is not None else None

    def stop(self) -> None:
        """SIGTERM (then SIGKILL); a server that did not exit cleanly is an error."""
        if self.proc is None:
            return
        code = stop_process(self.proc)
        self.proc = None
        if code not in (0, -15):
            raise ChildError(f"edgeq serve exited with {code}: {self.tail()}")

    def tail(self) -> str:
        """The end of the server's log."""
        try:
            lines = self.log_file.read_text(encoding="utf-8", errors="replace").strip().splitlines()
        except OSError:
            return "(no log)"
        return " | ".join(lines[-6:])

    def __enter__(self) -> HomeServer:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if kind is None:
            self.stop()
        else:  # already failing: stop, without hiding the first error
            with contextlib.suppress(ChildError):
                self.stop()

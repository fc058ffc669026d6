"""What security costs the sync: signed requests over TLS beside unsigned plain HTTP, in
one run, on the sync case's backlog (:mod:`benchmarks.cases.sync`: ``sync_messages``
payloads pushed in batches of ``sync_batch`` to ``edgeq serve --durability full``).

Four rows, interleaved round by round (the median round of each is reported):

* ``edgeq``: plain HTTP, ``--no-auth`` (the sync case's own configuration);
* ``edgeq-signed``: every request signed (Ed25519, the device registered with its
  key; the server checks each signature and keeps its nonce, durably);
* ``edgeq-tls``: HTTPS (a throw-away CA and certificate, ECDSA P-256; the agent
  verifies it), unsigned;
* ``edgeq-signed-tls``: both, as a fleet is deployed.

The two in between say where the cost of the last one comes from. Every round is
checked exactly once on the server, as in the sync case.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.cases.rounds import interleaved
from benchmarks.cases.sync import DEVICE_NAME, QUEUE
from benchmarks.cases.sync import child_setup as sync_setup
from benchmarks.homeserver import HomeServer, Pki, key_file, make_pki, register_devices
from benchmarks.results import Result
from benchmarks.runner import ChildError, Context

__all__ = ["VARIANTS", "child_setup", "run"]

#: Row library -> (signed, TLS).
VARIANTS: dict[str, tuple[bool, bool]] = {
    "edgeq": (False, False),
    "edgeq-signed": (True, False),
    "edgeq-tls": (False, True),
    "edgeq-signed-tls": (True, True),
}


def child_setup(spec: dict[str, Any]) -> dict[str, Any]:
    """The sync case's stores, and the device registered with a key when the row signs."""
    out = sync_setup(spec)
    if spec["signed"]:
        register_devices(Path(spec["server_db"]), Path(spec["where"]), [DEVICE_NAME], [QUEUE])
    return out


def _round(ctx: Context, lib: str, pki: Pki) -> Result:
    s = ctx.settings
    signed, tls = VARIANTS[lib]
    where = ctx.scratch(f"secure-{lib}")
    server_db, device_db, n = where / "home.db", where / "device.db", s.sync_messages
    try:
        ctx.child("sync_secure_setup",
                  {"server_db": str(server_db), "device_db": str(device_db), "messages": n,
                   "payload_bytes": s.payload_bytes, "signed": signed, "where": str(where)})
        with HomeServer(ctx, server_db, auth=signed, pki=pki if tls else None) as server:
            ctx.log(f"  sync_secure {lib}: push_once of {n:,} messages, batches of {s.sync_batch}")
            cpu = server.cpu()
            got = ctx.child("sync_push", {
                "device_db": str(device_db), "url": server.url, "messages": n, "batch_size": s.sync_batch,
                "key": str(key_file(where, DEVICE_NAME)) if signed else None, "ca": str(pki.ca)
                if tls else None})
            after = server.cpu()
        check = ctx.child("sync_verify", {"server_db": str(server_db), "messages": n})["metrics"]
    finally:
        ctx.discard(where)
    metrics = {**got["metrics"], **check}
    if cpu is not None and after is not None:
        metrics["server_cpu_s"] = after - cpu
    if check["server_depth"] != n or check["duplicates"] or check["losses"]:
        raise ChildError(f"not exactly once: the server holds {check['server_depth']:.0f} of {n} "
                         f"({check['duplicates']:.0f} duplicates, {check['losses']:.0f} lost)")
    return Result("sync_secure", lib, "ok", n, metrics=metrics,
                  info={"signed": signed, "tls": tls, "server": " ".join(["edgeq", *server.command[3:]])})


def run(ctx: Context) -> list[Result]:
    """``rounds`` rounds of every variant, interleaved; one CA for the run."""
    if "edgeq" not in ctx.libs:
        return []
    pki_dir = ctx.scratch("secure-pki")
    pki = make_pki(pki_dir)
    # A smoke run measures only the two rows the target compares (each a server start).
    libs = ["edgeq", "edgeq-signed-tls"] if ctx.settings.smoke else list(VARIANTS)
    try:
        return interleaved(ctx, "sync_secure", libs, lambda lib: _round(ctx, lib, pki),
                           lambda lib, why: Result("sync_secure", lib, "error", ctx.settings.sync_messages,
                                                   note=why))
    finally:
        ctx.discard(pki_dir)

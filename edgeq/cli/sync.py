"""``edgeq serve`` (the home server) and ``edgeq sync`` (the device agent).

Both import their network stacks lazily (starlette/uvicorn for ``serve``, httpx
for ``sync``), so the rest of the command line works on a device without them.
Both log one JSON object per line on stderr (see ``edgeq.sync.logs``).
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

import click

from edgeq.cli.options import SERVICE, check_store, db_option, log_level_option, name_option

if TYPE_CHECKING:
    from edgeq.sync.agent import Progress

__all__ = ["serve", "sync"]


def _need(module: str, extra: str) -> None:
    try:
        __import__(module)
    except ImportError as exc:
        raise click.ClickException(
            f"this command needs {module}: install the {extra!r} extra, e.g. pip install 'edgeq[{extra}]'"
        ) from exc


@click.command("serve")
@db_option("The server's store (default: the group's --db).")
@name_option("The server's queue manager name (needed to create the store), e.g. HOME.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8470, show_default=True, type=click.IntRange(0, 65535), help="Port to listen on.")
@click.option("--max-body-bytes", default=16 * 1024 * 1024, show_default=True, type=click.IntRange(1024),
              help="Largest request body accepted (413 beyond it).")
@click.option("--max-batch", default=5000, show_default=True, type=click.IntRange(1),
              help="Most messages (or uids) per request.")
@click.option("--remember-confirmed-ms", default=86_400_000, show_default=True, type=click.IntRange(1),
              help="How long confirmed uids of senders that do not settle them (older agents) are "
                   "remembered; an agent's uids are remembered until it settles them, with no time limit.")
@click.option("--durability", type=click.Choice(["full", "normal"]), default="full", show_default=True)
@click.option("--sweep-interval", default=60.0, show_default=True, type=click.FloatRange(0),
              help="Seconds between expiry sweeps (0: none); locked puts expire through these.")
@click.option("--journal/--no-journal", default=True, show_default=True,
              help="Keep the journal of accepted, expired and delivered messages (for `edgeq export`).")
@click.option("--auth/--no-auth", default=None,
              help="Require signed requests from registered devices (default: on once any device is "
                   "registered with `edgeq server devices add`). --no-auth serves anyone: tests and trusted LANs only.")
@click.option("--auth-skew", default=300.0, show_default=True, type=click.FloatRange(1),
              help="Seconds a request's timestamp may differ from the server clock (also the replay window).")
@click.option("--nonce-db", type=click.Path(dir_okay=False, path_type=Path),
              help="Where recent request nonces are kept, so replays fail across restarts (default: DB.nonces).")
@click.option("--tls-cert", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Serve HTTPS with this certificate (PEM, with its chain).")
@click.option("--tls-key", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="The certificate's private key (PEM).")
@log_level_option
@click.pass_context
def serve(
    ctx: click.Context, db: Path | None, name: str | None, host: str, port: int, max_body_bytes: int,
    max_batch: int, remember_confirmed_ms: int, durability: str, sweep_interval: float, journal: bool,
    auth: bool | None, auth_skew: float, nonce_db: Path | None, tls_cert: Path | None, tls_key: Path | None,
    log_level: str,
) -> None:
    """Run the home server: devices push (put/confirm) and pull over HTTP.

    \b
    Examples:
      edgeq serve --db home.db --name HOME --host 127.0.0.1 --port 8470
      edgeq serve --db home.db --host 0.0.0.0 --auth --tls-cert home.crt --tls-key home.key
      curl http://127.0.0.1:8470/metrics
    """
    _need("uvicorn", "server")
    _need("starlette", "server")
    import logging

    import uvicorn

    from edgeq.sync.logs import setup_json_logging
    from edgeq.sync.server import create_app

    if (tls_cert is None) != (tls_key is None):
        raise click.UsageError("--tls-cert and --tls-key go together")
    store = check_store(ctx, SERVICE, db=db, name=name)
    setup_json_logging(log_level.upper())
    log = logging.getLogger("edgeq.sync.server")
    qm = store.open(ctx, durability="full" if durability == "full" else "normal",
                    remember_confirmed_ms=remember_confirmed_ms, journal="server" if journal else "off")
    nonces = None
    try:
        if auth is None:
            auth = any(d.public_key is not None for d in qm.devices())
        authenticate = None
        if auth:
            from edgeq.sync.auth import SignatureAuthenticator
            from edgeq.sync.nonces import SqliteNonces

            nonces = SqliteNonces(nonce_db or store.path.with_name(store.path.name + ".nonces"),
                                  synchronous="FULL" if durability == "full" else "NORMAL")
            authenticate = SignatureAuthenticator(qm, nonces, skew_ms=round(auth_skew * 1000))
            if not any(d.registered for d in qm.devices()):
                log.warning("authentication is on but no device is registered: every request will be refused",
                            extra={"event": "no-devices"})
        else:
            log.warning(
                "AUTHENTICATION IS OFF: anyone who can reach %s:%d can push and pull as any device. "
                "Use only for tests and trusted networks; register devices and serve with --auth.", host, port,
                extra={"event": "insecure", "auth": False})
        if tls_cert is None and not _loopback(host):
            log.warning("serving plain HTTP on %s: requests and messages cross the network unencrypted; "
                        "use --tls-cert/--tls-key", host, extra={"event": "insecure", "tls": False})
        if sweep_interval:
            qm.start_expiry_sweeper(sweep_interval)
        app = create_app(qm, max_body_bytes=max_body_bytes, max_batch=max_batch, authenticate=authenticate)
        log.info(
            "serving %s on %s:%d", qm.name, host, port,
            extra={"event": "serve", "qmgr": qm.name, "db": str(store.path), "host": host, "port": port,
                   "pid": __import__("os").getpid(), "auth": bool(auth), "tls": tls_cert is not None},
        )
        uvicorn.run(app, host=host, port=port, log_config=None, access_log=False, lifespan="off",
                    log_level=log_level.lower(),
                    ssl_certfile=None if tls_cert is None else str(tls_cert),
                    ssl_keyfile=None if tls_key is None else str(tls_key))
    finally:
        if nonces is not None:
            nonces.close()


def _loopback(host: str) -> bool:
    from edgeq.sync.tls import is_loopback

    return is_loopback(host)


@click.command("sync")
@db_option("The device's store (default: the group's --db).")
@name_option("The device's queue manager name (needed only to create the store).")
@click.option("--server", "server_url", required=True, envvar="EDGEQ_SERVER", show_envvar=True,
              help="The home server's URL, e.g. http://home:8470.")
@click.option("--interval", default=5.0, show_default=True, type=click.FloatRange(0.01),
              help="Seconds between sync cycles in daemon mode.")
@click.option("--once", is_flag=True, help="Push and pull until done, print a JSON summary, and exit (1 on failure).")
@click.option("--batch-size", default=500, show_default=True, type=click.IntRange(1))
@click.option("--pull/--no-pull", default=True, show_default=True, help="Also fill home-server queues.")
@click.option("--timeout", default=30.0, show_default=True, type=click.FloatRange(0.1), help="HTTP timeout, seconds.")
@click.option("--progress/--no-progress", default=None, help="Show backlog progress on stderr (default: if a terminal).")
@click.option("--report-expiries/--no-report-expiries", default=True, show_default=True,
              help="Journal this device's expiries (stored with the store) and report them to the server.")
@click.option("--key", "key_file", type=click.Path(dir_okay=False, path_type=Path), envvar="EDGEQ_KEY",
              show_envvar=True, help="Sign every request with this device key (from `edgeq keys new`).")
@click.option("--ca-file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Verify an https:// server against this CA certificate (PEM) instead of the system store.")
@click.option("--allow-insecure-http", is_flag=True,
              help="Allow plain http:// to a server that is not on loopback (trusted networks only).")
@log_level_option
@click.pass_context
def sync(
    ctx: click.Context, db: Path | None, name: str | None, server_url: str, interval: float, once: bool,
    batch_size: int, pull: bool, timeout: float, progress: bool | None, report_expiries: bool,
    key_file: Path | None, ca_file: Path | None, allow_insecure_http: bool, log_level: str,
) -> None:
    """Run the device's sync agent: push remote queues to the home server, pull home-server queues.

    \b
    Examples:
      edgeq sync --db device.db --server http://home:8470            # daemon
      edgeq sync --db device.db --server http://home:8470 --once     # drain and exit
      edgeq sync --db device.db --server https://home:8470 --key device.key --ca-file ca.crt
    """
    _need("httpx", "sync")
    from edgeq.sync.agent import SyncAgent
    from edgeq.sync.logs import setup_json_logging

    store = check_store(ctx, SERVICE, db=db, name=name)
    setup_json_logging(log_level.upper())
    show = sys.stderr.isatty() if progress is None else progress
    from edgeq.sync.tls import check_server_url

    check_server_url(server_url, allow_insecure_http=allow_insecure_http)
    signing_key = None
    if key_file is not None:
        from edgeq.sync.keys import load_private_key

        signing_key = load_private_key(key_file)
    qm = store.open(ctx, journal="device" if report_expiries else "off")
    signer = None
    if signing_key is not None:
        from edgeq.sync.signer import DeviceSigner

        signer = DeviceSigner(qm.name, signing_key)
    agent = SyncAgent(qm, server_url, batch_size=batch_size, timeout=timeout, auth=signer, ca_file=ca_file,
                      allow_insecure_http=allow_insecure_http)
    if show:
        agent.progress = _show_progress
    agent.pull_enabled = pull
    try:
        if once:
            pushed = agent.push_once()
            pulled = agent.pull_once() if pushed.ok and pull else None
            summary = {
                "pushed": {k: getattr(pushed, k) for k in ("sent", "transmitted", "duplicates", "expired",
                                                            "refused", "requeued", "batches",
                                                            "expiries_reported", "error")},
                "rate": round(pushed.rate, 1),
                "pulled": None if pulled is None else {
                    k: getattr(pulled, k) for k in ("received", "duplicates", "expired", "refused",
                                                    "acknowledged", "error")},
            }
            click.echo(json.dumps(summary))
            if not pushed.ok or (pulled is not None and not pulled.ok):
                ctx.exit(1)
            return

        def _stop(signum: int, frame: FrameType | None) -> None:
            agent.request_stop()

        signal.signal(signal.SIGTERM, _stop)
        agent.run(interval)
    finally:
        agent.close()


def _show_progress(progress: Progress) -> None:
    left = "?" if progress.left is None else f"{progress.left:,}"
    click.echo(f"{progress.queue}: {progress.done:,} sent, {left} left, {progress.rate:,.0f} msg/s", err=True)

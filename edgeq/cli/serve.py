"""``edgeq serve``: the home server (uvicorn), its device workers and the console's own process.
starlette and uvicorn are imported when it runs, so a device's command line works without them."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from edgeq.cli.options import (
    SERVICE,
    check_store,
    db_option,
    log_level_option,
    name_option,
    need,
)
from edgeq.cli.params import BYTES_LIMIT, HOLD, LIMIT, Limit
from edgeq.sync.runtime import tune_gc

if TYPE_CHECKING:
    from starlette.types import ASGIApp

    from edgeq.manager import QueueManager
    from edgeq.sync.server.admin.client import OperatorKey

__all__ = ["CONSOLE_NICENESS", "serve"]

#: how much nicer (os.nice) the console's process runs than the devices' workers
CONSOLE_NICENESS = 10



def _listen_address(ctx: click.Context, param: click.Parameter, host: str | None) -> str | None:
    """An address the server can bind: a usage mistake (exit 2) otherwise, not uvicorn's exit 3."""
    import socket

    if host is None:
        return None
    try:
        socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError) as exc:
        raise click.BadParameter(
            f"{host!r} is not an address or host name this machine can listen on ({exc})",
            ctx, param) from exc
    return host

@click.command("serve")
@db_option("The server's store (default: the group's --db).")
@name_option("The server's queue manager name (needed to create the store), e.g. HOME.")
@click.option("--host", default="127.0.0.1", show_default=True, callback=_listen_address,
              help="Address to listen on.")
@click.option("--port", default=8470, show_default=True, type=click.IntRange(0, 65535),
              help="Port to listen on.")
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
                   "registered with `edgeq server devices add`). --no-auth serves anyone: tests and trusted "
                   "LANs only.")
@click.option("--auth-skew", default=300.0, show_default=True, type=click.FloatRange(1),
              help="Seconds a request's timestamp may differ from the server clock (also the replay window).")
@click.option("--nonce-db", type=click.Path(dir_okay=False, path_type=Path),
              help="Where recent request nonces are kept, so replays fail across restarts (default: "
                   "DB.nonces).")
@click.option("--tls-cert", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Serve HTTPS with this certificate (PEM, with its chain).")
@click.option("--tls-key", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="The certificate's private key (PEM).")
@click.option("--hold", type=HOLD, default="1h", show_default=True,
              help="How long a device's unconfirmed puts are kept before they are undone (its resend still "
                   "works): 30m, 2h...; 0 or none keeps them for ever.")
@click.option("--held-quota-messages", type=LIMIT, default="100000", show_default=True,
              help="Most unconfirmed messages one device may hold here, all queues together; a put beyond "
                   "it is refused (429 over-quota: the device retries later). At least 2 x --max-batch; "
                   "none: no limit.")
@click.option("--held-quota-bytes", type=BYTES_LIMIT, default="256MiB", show_default=True,
              help="Most bytes (data plus fields) of unconfirmed messages one device may hold here "
                   "(64MiB, 1GB...). At least 2 x --max-body-bytes; none: no limit.")
@click.option("--workers", default=1, show_default=True, type=click.IntRange(1, 64),
              help="Server processes sharing the store and the listening socket (see docs/scaling.md).")
@click.option("--worker-fd", type=int, hidden=True)  # set by --workers for each worker: the inherited socket
@click.option("--console", is_flag=True,
              help="Serve the operator console, /console, from a process and a port of its own (needs "
                   "TLS off loopback, and an account: edgeq server console-user add).")
@click.option("--console-port", type=click.IntRange(0, 65535),
              help="The console's port (default: --port + 1, e.g. 8471; 0: any free port).")
@click.option("--console-host", callback=_listen_address,
              help="The console's address (default: --host), e.g. 127.0.0.1 while devices use 0.0.0.0.")
@click.option("--console-fd", type=int, hidden=True)  # set by --console for its process: the inherited socket
@click.option("--admin-key", type=click.Path(dir_okay=False, path_type=Path), envvar="EDGEQ_SERVE_ADMIN_KEY",
              show_envvar=True, help="With --console: the operator key (edgeq admin keygen) the management "
              "API signs admin requests with (POST /api/v1/admin-requests); the server then holds it.")
@click.option("--admin-key-id", help="The id the devices trust --admin-key under (default: the key's own).")
@click.option("--bridges/--no-bridges", default=True, show_default=True,
              help="Run the store's bridges (`edgeq bridge define`) in a process of their own, started "
                   "again after a back-off if it exits (docs/bridges.md).")
@click.option("--bridges-process", is_flag=True, hidden=True)  # set by the supervisor for the bridges' own
@log_level_option
@click.pass_context
def serve(
    ctx: click.Context, db: Path | None, name: str | None, host: str, port: int, max_body_bytes: int,
    max_batch: int, remember_confirmed_ms: int, durability: str, sweep_interval: float, journal: bool,
    auth: bool | None, auth_skew: float, nonce_db: Path | None, tls_cert: Path | None, tls_key: Path | None,
    hold: Limit, held_quota_messages: Limit, held_quota_bytes: Limit, workers: int, worker_fd: int | None,
    console: bool, console_port: int | None, console_host: str | None, console_fd: int | None,
    admin_key: Path | None, admin_key_id: str | None, bridges: bool, bridges_process: bool, log_level: str,
) -> None:
    """Run the home server: devices push (put/confirm) and pull over HTTP.

    \b
    Examples:
      edgeq serve --db home.db --name HOME --host 127.0.0.1 --port 8470
      edgeq serve --db home.db --host 0.0.0.0 --auth --tls-cert home.crt --tls-key home.key
      edgeq serve --db home.db --hold 30m --held-quota-messages 20000 --held-quota-bytes 64MiB
      edgeq serve --db home.db --workers 2
      edgeq serve --db home.db --console   # then open http://127.0.0.1:8471/console
      edgeq serve --db home.db --console --admin-key operator.key
      edgeq serve --db home.db --no-bridges
      curl http://127.0.0.1:8470/metrics

    \b
    With --workers N, --console or bridges defined in the store, this process binds the ports
    and supervises the processes serving them (N for devices, one for the console, at a lower
    CPU priority) and the bridges' process; when a worker or the console exits, all stop;
    when the bridges' process exits, it is started again after a back-off.

    \b
    Exit status: 0 stopped (SIGINT/SIGTERM); 1 an error, e.g. the address is in use, the store
    cannot be opened, or one of its processes exited; 2 a usage mistake, e.g. TLS files
    unreadable, swapped or not a pair.
    """
    need("uvicorn", "server")
    need("starlette", "server")
    import logging

    from edgeq.sync.logs import setup_json_logging
    from edgeq.sync.server.app import create_app
    from edgeq.sync.server.holds import HoldKeeper, HoldPolicy

    if (tls_cert is None) != (tls_key is None):
        raise click.UsageError("--tls-cert and --tls-key go together")
    if tls_cert is not None and tls_key is not None:
        _check_tls(tls_cert, tls_key)
    console_host = console_host or host
    if console_port is None:
        console_port = port + 1 if port else 0
    if console:
        _check_console(console_host, tls_cert is not None)
        if console_port and console_port == port:
            raise click.BadParameter(f"{port} is also --port: the console needs a port of its own",
                                     param_hint="'--console-port'")
    signer = _admin_key(admin_key, admin_key_id, console)
    child = worker_fd is not None or console_fd is not None or bridges_process
    if not child:  # a worker serves its supervisor's socket
        _check_listen(host, port)
        if console:
            _check_listen(console_host, console_port)
    # A healthy agent holds up to two batches at once (one put while the last is confirmed).
    if held_quota_messages.value is not None and held_quota_messages.value < 2 * max_batch:
        raise click.BadParameter(
            f"{held_quota_messages.value} is less than 2 x --max-batch ({2 * max_batch}): "
            "a device pushing full batches would be refused", param_hint="'--held-quota-messages'")
    if held_quota_bytes.value is not None and held_quota_bytes.value < 2 * max_body_bytes:
        raise click.BadParameter(
            f"{held_quota_bytes.value} is less than 2 x --max-body-bytes ({2 * max_body_bytes}): "
            "a device pushing full requests would be refused", param_hint="'--held-quota-bytes'")
    holds = HoldPolicy(hold.value, held_quota_messages.value, held_quota_bytes.value)
    store = check_store(ctx, SERVICE, db=db, name=name)
    setup_json_logging(log_level.upper())
    log = logging.getLogger("edgeq.sync.server")
    qm = store.open(ctx, durability="full" if durability == "full" else "normal",
                    remember_confirmed_ms=remember_confirmed_ms, journal="server" if journal else "off")
    scheme = "http" if tls_cert is None else "https"
    console_url = f"{scheme}://{_url_host(console_host)}:{console_port}/console" if console else None
    if console:
        _check_console_password(qm.path)
    if console_fd is not None:
        _serve_console(qm, console_host, console_port, console_fd, console_url or "", log_level, tls_cert,
                       tls_key, signer)
        return
    if bridges_process:
        from edgeq.cli.bridge import run_bridges

        run_bridges(qm)
        return
    with_bridges = bridges and not child and _bridges_defined(qm.path)
    if (workers > 1 or console or with_bridges) and not child:
        from edgeq.sync.server.workers import run_workers

        qm.close()  # created (if new) once, here: each process opens it itself
        ctx.exit(run_workers(sys.argv[1:], host, port, workers, (console_host, console_port)
                             if console else None, bridges=with_bridges))
    nonces = None
    keeper = None if holds.hold_ms is None else HoldKeeper(qm, holds)
    try:
        from edgeq.sync.server.auth import AuthMode, SignatureAuthenticator

        # By default auth is on as soon as any device is registered: the app decides that
        # at every request (AuthGate), so registering one on a running server counts too.
        mode: AuthMode = "auto" if auth is None else "required" if auth else "off"
        authenticate = None
        if mode != "off":
            from edgeq.sync.server.nonces import SqliteNonces

            nonces = SqliteNonces(nonce_db or store.path.with_name(store.path.name + ".nonces"),
                                  synchronous="FULL" if durability == "full" else "NORMAL")
            authenticate = SignatureAuthenticator(qm, nonces, skew_ms=round(auth_skew * 1000))
            if mode == "required" and not any(d.registered for d in qm.devices()):
                log.warning("authentication is on but no device is registered: every request will be refused",
                            extra={"event": "no-devices"})
        required = mode == "required" or (mode == "auto" and any(d.public_key is not None
                                                                 for d in qm.devices()))
        if not required:
            log.warning(
                "AUTHENTICATION IS OFF: anyone who can reach %s:%d can push and pull as any device. %s", host,
                port,
                "It turns on by itself once a device is registered (edgeq server devices add); serve with "
                "--auth " "to refuse everyone until then." if mode == "auto" else
                "--no-auth: use only for tests and trusted networks.",
                extra={"event": "insecure", "auth": "open"})
        if tls_cert is None and not _loopback(host):
            log.warning("serving plain HTTP on %s: requests and messages cross the network unencrypted; "
                        "use --tls-cert/--tls-key", host, extra={"event": "insecure", "tls": False})
        if sweep_interval:
            qm.start_expiry_sweeper(sweep_interval)
        app = create_app(qm, max_body_bytes=max_body_bytes, max_batch=max_batch, authenticate=authenticate,
                         auth=mode, holds=holds, console_url=console_url)
        if keeper is not None:
            keeper.start()
        log.info(
            "serving %s on %s:%d%s", qm.name, host, port, f"; the console on {console_url}"
            if console_url else "",
            extra={"event": "serve", "qmgr": qm.name, "db": str(store.path), "host": host, "port": port,
                   "console": console_url,
                   "pid": __import__("os").getpid(), "auth": "required" if required else "open",
                   "tls": tls_cert is not None,
                   "hold_ms": holds.hold_ms, "held_quota_messages": holds.max_messages,
                   "held_quota_bytes": holds.max_bytes},
        )
        _run_uvicorn(app, host, port, worker_fd, log_level, tls_cert, tls_key)
    finally:
        if keeper is not None:
            keeper.stop()
        if nonces is not None:
            nonces.close()


def _serve_console(qm: QueueManager, host: str, port: int, fd: int, url: str, log_level: str,
                   tls_cert: Path | None, tls_key: Path | None, signer: OperatorKey | None) -> None:
    """The console's process (``--console``): its app alone on the inherited socket ``fd``, run
    nicer (:data:`CONSOLE_NICENESS`) than the devices' workers, so that they win a short CPU."""
    import logging
    import os

    from edgeq.clock import system_clock
    from edgeq.sync.server.api.routes import api_routes
    from edgeq.sync.server.console.routes import console_app

    niceness = os.nice(CONSOLE_NICENESS)
    logging.getLogger("edgeq.sync.server").info(
        "the console of %s on %s, its management API on %s (nice %d; admin requests %s)", qm.name, url,
        url.removesuffix("/console") + "/api/v1", niceness,
        "not sent: no --admin-key" if signer is None else f"signed with key {signer.key_id}",
        extra={"event": "console", "qmgr": qm.name, "console": url, "pid": os.getpid(), "nice": niceness,
               "admin_key": None if signer is None else signer.key_id})
    app = console_app(qm, clock=system_clock, api=api_routes(qm, clock=system_clock, signer=signer),
                      signer=signer)
    _run_uvicorn(app, host, port, fd, log_level, tls_cert, tls_key)


def _admin_key(path: Path | None, key_id: str | None, console: bool) -> OperatorKey | None:
    """The operator key ``--admin-key`` names, loaded as ``edgeq admin --key`` loads one (a file others may
    read is refused); a usage mistake (exit 2) if it is not one."""
    if path is None:
        if key_id is not None:
            raise click.UsageError("--admin-key-id goes with --admin-key")
        return None
    if not console:
        raise click.UsageError("--admin-key signs the management API's admin requests: give --console too "
                               "(or unset EDGEQ_SERVE_ADMIN_KEY)")
    from edgeq.admin.wire import check_key_id
    from edgeq.errors import EdgeqError
    from edgeq.sync.server.admin.client import OperatorKey

    try:
        key = OperatorKey.load(path, key_id)
        check_key_id(key.key_id)
    except EdgeqError as exc:
        raise click.BadParameter(str(exc), param_hint="'--admin-key'/'--admin-key-id'") from None
    return key


def _bridges_defined(path: Path) -> bool:
    from edgeq.sync.bridges.book import bridge_definitions

    return bool(bridge_definitions(path))


def _run_uvicorn(app: ASGIApp, host: str, port: int, fd: int | None, log_level: str, tls_cert: Path | None,
                 tls_key: Path | None) -> None:
    """Serve ``app`` on ``host:port``, or on the inherited listening socket ``fd`` (a supervisor's).

    Not uvicorn's own ``fd=``: it takes the socket for a Unix one, so asyncio leaves Nagle's
    algorithm on for TCP connections and every answer's body waits for a delayed ACK (40 ms)."""
    import socket

    import uvicorn

    class Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            if sockets is not None:  # uvicorn says where it listens only when it bound the socket
                self._log_started_message(sockets)

    tune_gc()
    config = uvicorn.Config(app, host=host, port=port, log_config=None, access_log=False, lifespan="off",
                            log_level=log_level.lower(), ssl_certfile=None
                            if tls_cert is None else str(tls_cert), ssl_keyfile=None
                            if tls_key is None else str(tls_key))
    Server(config).run(sockets=None if fd is None else [socket.socket(fileno=fd)])


def _url_host(host: str) -> str:
    """``host`` as a URL names it: this machine's name for a wildcard, an IPv6 address bracketed."""
    import socket

    if host in ("0.0.0.0", "::", ""):
        host = socket.gethostname()
    return f"[{host}]" if ":" in host else host


def _check_listen(host: str, port: int) -> None:
    """Fail (exit 1) naming the address when it cannot be listened on (in use, not allowed), before
    anything is logged as served; uvicorn binds it again at once (with SO_REUSEADDR, as here)."""
    import errno
    import socket

    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError as exc:
            why = {errno.EADDRINUSE: "the address is in use (another edgeq serve or another program listens "
                                     "there): stop it, or give another --port",
                   errno.EACCES: "permission denied (ports below 1024 need privileges): give another --port",
                   errno.EADDRNOTAVAIL: "no interface of this machine has that address: give another --host"}
            raise click.ClickException(
                f"cannot listen on {host}:{port}: "
                f"{why.get(exc.errno or 0, exc.strerror or str(exc))}") from None


def _check_tls(cert: Path, key: Path) -> None:
    """The certificate and its key, loaded as the server will: a usage mistake (exit 2) naming the file
    that is unreadable, of the wrong kind (the two swapped) or not the other's pair."""
    import ssl

    def read(path: Path, option: str) -> bytes:
        try:
            return path.read_bytes()
        except OSError as exc:
            raise click.BadParameter(f"cannot read {path}: {exc.strerror or exc}",
                                     param_hint=option) from None

    cert_pem, key_pem = read(cert, "'--tls-cert'"), read(key, "'--tls-key'")
    if b"PRIVATE KEY-----" in cert_pem:
        raise click.BadParameter(
            f"{cert} holds a private key, not a certificate: are --tls-cert and --tls-key "
            "swapped?", param_hint="'--tls-cert'")
    if b"-----BEGIN CERTIFICATE-----" not in cert_pem:
        raise click.BadParameter(f"{cert} is not a PEM certificate", param_hint="'--tls-cert'")
    if b"PRIVATE KEY-----" not in key_pem:
        raise click.BadParameter(f"{key} is not a PEM private key (unencrypted)", param_hint="'--tls-key'")
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert, key)
    except (ssl.SSLError, ValueError) as exc:
        raise click.BadParameter(f"{key} is not a private key the server can use with {cert} ({exc})",
                                 param_hint="'--tls-key'") from None


def _check_console(host: str, tls: bool) -> None:
    """The console's password and session cookie must not cross a network in clear."""
    need("jinja2", "server")
    if not tls and not _loopback(host):
        raise click.UsageError(
            f"--console on {host} needs TLS (--tls-cert/--tls-key): the operator's password "
            "and session would cross the network in clear; or listen on 127.0.0.1")


def _check_console_password(path: Path) -> None:
    from edgeq.sync.server.console.auth import has_accounts

    if not has_accounts(path):
        raise click.UsageError(f"--console needs a console account: add one with "
                               f"`edgeq server console-user add NAME --role operator --db {path}`")


def _loopback(host: str) -> bool:
    from edgeq.sync.agent.tls import is_loopback

    return is_loopback(host)

"""``edgeq serve`` (the home server), ``edgeq sync`` (the device agent) and ``edgeq sync
status`` (how each queue of a device syncs, read from its store).

Both import their network stacks lazily (starlette/uvicorn for ``serve``, httpx
for ``sync``), so the rest of the command line works on a device without them.
Both log one JSON object per line on stderr (see ``edgeq.sync.logs``).
"""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

import click

from edgeq.cli.base import EdgeqGroup, emit_json
from edgeq.cli.options import (
    EXISTING,
    SERVICE,
    check_store,
    db_option,
    log_level_option,
    name_option,
    open_store,
    output_options,
    wants_json,
)
from edgeq.cli.params import BYTES_LIMIT, HOLD, LIMIT, Limit
from edgeq.errors import EdgeqError

if TYPE_CHECKING:
    from starlette.types import ASGIApp

    from edgeq.exchange.restored import Restoration
    from edgeq.manager import QueueManager
    from edgeq.sync.agent.agent import Progress
    from edgeq.sync.agent.status import SyncStatus

__all__ = ["CONSOLE_NICENESS", "format_sync_status", "serve", "status", "sync"]

#: how much nicer (os.nice) the console's process runs than the devices' workers
CONSOLE_NICENESS = 10


def _need(module: str, extra: str) -> None:
    try:
        __import__(module)
    except ImportError as exc:
        raise click.ClickException(
            f"this command needs {module}: install the {extra!r} extra, e.g. pip install 'edgeq[{extra}]'"
        ) from exc



def _listen_address(ctx: click.Context, param: click.Parameter, host: str | None) -> str | None:
    """An address the server can bind: a usage mistake (exit 2) otherwise, not uvicorn's exit 3."""
    import socket

    if host is None:
        return None
    try:
        socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError) as exc:
        raise click.BadParameter(f"{host!r} is not an address or host name this machine can listen on ({exc})",
                                 ctx, param) from exc
    return host

@click.command("serve")
@db_option("The server's store (default: the group's --db).")
@name_option("The server's queue manager name (needed to create the store), e.g. HOME.")
@click.option("--host", default="127.0.0.1", show_default=True, callback=_listen_address, help="Address to listen on.")
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
@click.option("--hold", type=HOLD, default="1h", show_default=True,
              help="How long a device's unconfirmed puts are kept before they are undone (its resend still "
                   "works): 30m, 2h...; 0 or none keeps them for ever.")
@click.option("--held-quota-messages", type=LIMIT, default="100000", show_default=True,
              help="Most unconfirmed messages one device may hold here, all queues together; a put beyond "
                   "it is refused (429 over-quota: the device retries later). At least 2 x --max-batch; none: no limit.")
@click.option("--held-quota-bytes", type=BYTES_LIMIT, default="256MiB", show_default=True,
              help="Most bytes (data plus fields) of unconfirmed messages one device may hold here "
                   "(64MiB, 1GB...). At least 2 x --max-body-bytes; none: no limit.")
@click.option("--workers", default=1, show_default=True, type=click.IntRange(1, 64),
              help="Server processes sharing the store and the listening socket (see docs/scaling.md).")
@click.option("--worker-fd", type=int, hidden=True)  # set by --workers for each worker: the inherited socket
@click.option("--console", is_flag=True,
              help="Serve the operator console, /console, from a process and a port of its own (needs TLS off "
                   "loopback, and a password: edgeq server set-console-password).")
@click.option("--console-port", type=click.IntRange(0, 65535),
              help="The console's port (default: --port + 1, e.g. 8471; 0: any free port).")
@click.option("--console-host", callback=_listen_address,
              help="The console's address (default: --host), e.g. 127.0.0.1 while devices use 0.0.0.0.")
@click.option("--console-fd", type=int, hidden=True)  # set by --console for its process: the inherited socket
@log_level_option
@click.pass_context
def serve(
    ctx: click.Context, db: Path | None, name: str | None, host: str, port: int, max_body_bytes: int,
    max_batch: int, remember_confirmed_ms: int, durability: str, sweep_interval: float, journal: bool,
    auth: bool | None, auth_skew: float, nonce_db: Path | None, tls_cert: Path | None, tls_key: Path | None,
    hold: Limit, held_quota_messages: Limit, held_quota_bytes: Limit, workers: int, worker_fd: int | None,
    console: bool, console_port: int | None, console_host: str | None, console_fd: int | None, log_level: str,
) -> None:
    """Run the home server: devices push (put/confirm) and pull over HTTP.

    \b
    Examples:
      edgeq serve --db home.db --name HOME --host 127.0.0.1 --port 8470
      edgeq serve --db home.db --host 0.0.0.0 --auth --tls-cert home.crt --tls-key home.key
      edgeq serve --db home.db --hold 30m --held-quota-messages 20000 --held-quota-bytes 64MiB
      edgeq serve --db home.db --workers 2
      edgeq serve --db home.db --console   # then open http://127.0.0.1:8471/console
      curl http://127.0.0.1:8470/metrics

    \b
    With --workers N or --console this process binds the ports and supervises the processes
    serving them (N for devices, one for the console, at a lower CPU priority); when one
    exits, all stop.

    \b
    Exit status: 0 stopped (SIGINT/SIGTERM); 1 an error, e.g. the address is in use, the store
    cannot be opened, or one of its processes exited; 2 a usage mistake, e.g. TLS files
    unreadable, swapped or not a pair.
    """
    _need("uvicorn", "server")
    _need("starlette", "server")
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
    if worker_fd is None and console_fd is None:  # a worker serves its supervisor's socket
        _check_listen(host, port)
        if console:
            _check_listen(console_host, console_port)
    # A healthy agent holds up to two batches at once (one put while the last is confirmed).
    if held_quota_messages.value is not None and held_quota_messages.value < 2 * max_batch:
        raise click.BadParameter(f"{held_quota_messages.value} is less than 2 x --max-batch ({2 * max_batch}): "
                                 "a device pushing full batches would be refused", param_hint="'--held-quota-messages'")
    if held_quota_bytes.value is not None and held_quota_bytes.value < 2 * max_body_bytes:
        raise click.BadParameter(f"{held_quota_bytes.value} is less than 2 x --max-body-bytes ({2 * max_body_bytes}): "
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
        _serve_console(qm, console_host, console_port, console_fd, console_url or "", log_level, tls_cert, tls_key)
        return
    if (workers > 1 or console) and worker_fd is None:
        from edgeq.sync.server.workers import run_workers

        qm.close()  # created (if new) once, here: each process opens it itself
        ctx.exit(run_workers(sys.argv[1:], host, port, workers, (console_host, console_port) if console else None))
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
        required = mode == "required" or (mode == "auto" and any(d.public_key is not None for d in qm.devices()))
        if not required:
            log.warning(
                "AUTHENTICATION IS OFF: anyone who can reach %s:%d can push and pull as any device. %s", host, port,
                "It turns on by itself once a device is registered (edgeq server devices add); serve with --auth "
                "to refuse everyone until then." if mode == "auto" else
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
            "serving %s on %s:%d%s", qm.name, host, port, f"; the console on {console_url}" if console_url else "",
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
                   tls_cert: Path | None, tls_key: Path | None) -> None:
    """The console's process (``--console``): its app alone on the inherited socket ``fd``, run
    nicer (:data:`CONSOLE_NICENESS`) than the devices' workers, so that they win a short CPU."""
    import logging
    import os

    from edgeq.clock import system_clock
    from edgeq.sync.server.console.routes import console_app

    niceness = os.nice(CONSOLE_NICENESS)
    logging.getLogger("edgeq.sync.server").info(
        "the console of %s on %s (nice %d)", qm.name, url, niceness,
        extra={"event": "console", "qmgr": qm.name, "console": url, "pid": os.getpid(), "nice": niceness})
    _run_uvicorn(console_app(qm.path, clock=system_clock), host, port, fd, log_level, tls_cert, tls_key)


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

    config = uvicorn.Config(app, host=host, port=port, log_config=None, access_log=False, lifespan="off",
                            log_level=log_level.lower(), ssl_certfile=None if tls_cert is None else str(tls_cert),
                            ssl_keyfile=None if tls_key is None else str(tls_key))
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
                f"cannot listen on {host}:{port}: {why.get(exc.errno or 0, exc.strerror or str(exc))}") from None


def _check_tls(cert: Path, key: Path) -> None:
    """The certificate and its key, loaded as the server will: a usage mistake (exit 2) naming the file
    that is unreadable, of the wrong kind (the two swapped) or not the other's pair."""
    import ssl

    def read(path: Path, option: str) -> bytes:
        try:
            return path.read_bytes()
        except OSError as exc:
            raise click.BadParameter(f"cannot read {path}: {exc.strerror or exc}", param_hint=option) from None

    cert_pem, key_pem = read(cert, "'--tls-cert'"), read(key, "'--tls-key'")
    if b"PRIVATE KEY-----" in cert_pem:
        raise click.BadParameter(f"{cert} holds a private key, not a certificate: are --tls-cert and --tls-key "
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
    _need("jinja2", "server")
    if not tls and not _loopback(host):
        raise click.UsageError(f"--console on {host} needs TLS (--tls-cert/--tls-key): the operator's password "
                               "and session would cross the network in clear; or listen on 127.0.0.1")


def _check_console_password(path: Path) -> None:
    from edgeq.sync.server.console.auth import load_credential

    if load_credential(path) is None:
        raise click.UsageError(f"--console needs an operator password: set one with "
                               f"`edgeq server set-console-password --db {path}`")


def _loopback(host: str) -> bool:
    from edgeq.sync.agent.tls import is_loopback

    return is_loopback(host)


@click.group("sync", cls=EdgeqGroup, invoke_without_command=True)
@db_option("The device's store (default: the group's --db).")
@name_option("The device's queue manager name (checked against the store's; `edgeq queue define` makes a store).")
@click.option("--server", "server_url", envvar="EDGEQ_SERVER", show_envvar=True,
              help="The home server's URL, e.g. http://home:8470 (required to run the agent).")
@click.option("--interval", default=5.0, show_default=True, type=click.FloatRange(0.01),
              help="Seconds between sync cycles in daemon mode.")
@click.option("--once", is_flag=True,
              help="Push and pull until done, print a JSON summary, and exit: 0 if everything moved, 1 if not.")
@click.option("--batch-size", default=500, show_default=True, type=click.IntRange(1))
@click.option("--pull/--no-pull", default=True, show_default=True, help="Also fill home-server queues.")
@click.option("--timeout", default=30.0, show_default=True, type=click.FloatRange(0.1), help="HTTP timeout, seconds.")
@click.option("--progress/--no-progress", default=None, help="Show backlog progress on stderr (default: if a terminal).")
@click.option("--report-expiries/--no-report-expiries", default=True, show_default=True,
              help="Journal this device's expiries (stored with the store) and report them to the server.")
@click.option("--key", "key_file", type=click.Path(dir_okay=False, path_type=Path), envvar="EDGEQ_KEY",
              show_envvar=True, help="Sign every request with this device key (from `edgeq keys new`).")
@click.option("--ca-file", type=click.Path(exists=True, dir_okay=False, path_type=Path), envvar="EDGEQ_CA_FILE",
              show_envvar=True, help="Verify an https:// server against this CA certificate (PEM) instead of the system store.")
@click.option("--allow-insecure-http", is_flag=True,
              help="Allow plain http:// to a server that is not on loopback (trusted networks only).")
@log_level_option
@click.pass_context
def sync(
    ctx: click.Context, db: Path | None, name: str | None, server_url: str | None, interval: float, once: bool,
    batch_size: int, pull: bool, timeout: float, progress: bool | None, report_expiries: bool,
    key_file: Path | None, ca_file: Path | None, allow_insecure_http: bool, log_level: str,
) -> None:
    """Run the device's sync agent: push remote queues to the home server, pull home-server queues.

    A queue the server refuses or does not have fails alone (it waits on its own
    backoff; the other queues and the pull go on). `edgeq sync status` shows how
    each queue is doing.

    \b
    Examples:
      edgeq sync --db device.db --server http://home:8470            # daemon
      edgeq sync --db device.db --server http://home:8470 --once     # drain and exit
      edgeq sync --db device.db --server https://home:8470 --key device.key --ca-file ca.crt
      edgeq sync status --db device.db                               # per queue: backlog, errors, refusals

    \b
    Exit status of --once: 0 every message moved; 1 something did not (a queue
    failed, messages were refused or dead-lettered, or the server could not be reached);
    2 a usage mistake.
    """
    if ctx.invoked_subcommand is not None:
        return  # `edgeq sync status`: the agent's options are not needed
    if server_url is None:
        raise click.UsageError("Missing option '--server' (env var: 'EDGEQ_SERVER'): the home server's URL, "
                               "e.g. --server http://home:8470 (or `edgeq sync status` to see how the queues sync)", ctx)
    _need("httpx", "sync")
    from edgeq.sync.agent.agent import SyncAgent
    from edgeq.sync.logs import setup_json_logging

    store = check_store(ctx, EXISTING, db=db, name=name)  # a mistyped --db must not make an empty store
    setup_json_logging(log_level.upper())
    show = sys.stderr.isatty() if progress is None else progress
    from edgeq.sync.agent.tls import check_server_url, client_ssl_context
    from edgeq.sync.keys import load_private_key

    # Bad values of these options are usage mistakes (exit 2), found before anything runs.
    try:
        check_server_url(server_url, allow_insecure_http=allow_insecure_http)
    except EdgeqError as exc:
        raise click.BadParameter(str(exc), ctx, param_hint="'--server'") from exc
    signing_key = None
    if key_file is not None:
        try:
            signing_key = load_private_key(key_file)
        except EdgeqError as exc:
            raise click.BadParameter(str(exc), ctx, param_hint="'--key'") from exc
    if ca_file is not None:
        try:
            client_ssl_context(ca_file)
        except EdgeqError as exc:
            raise click.BadParameter(str(exc), ctx, param_hint="'--ca-file'") from exc
    qm = store.open(ctx, journal="device" if report_expiries else "off")
    signer = None
    if signing_key is not None:
        from edgeq.sync.agent.signer import DeviceSigner

        signer = DeviceSigner(qm.name, signing_key)
    agent = SyncAgent(qm, server_url, batch_size=batch_size, timeout=timeout, auth=signer, ca_file=ca_file,
                      allow_insecure_http=allow_insecure_http)
    if show:
        agent.progress = _show_progress
    agent.pull_enabled = pull
    try:
        if once:
            pushed, pulled = agent.sync_once()
            summary = {
                "pushed": {k: getattr(pushed, k) for k in ("sent", "transmitted", "duplicates", "expired",
                                                            "refused", "dead_lettered", "requeued", "batches",
                                                            "expiries_reported", "error")},
                "rate": round(pushed.rate, 1),
                "pulled": None if pulled is None else {
                    k: getattr(pulled, k) for k in ("received", "duplicates", "expired", "refused",
                                                    "acknowledged", "error")},
                "queues": {q.queue: q.as_dict() for report in (pushed, pulled) if report is not None
                           for q in report.queues.values()},
            }
            click.echo(json.dumps(summary))
            if not pushed.complete or (pull and (pulled is None or not pulled.complete)):
                ctx.exit(1)
            return

        def _stop(signum: int, frame: FrameType | None) -> None:
            agent.request_stop(signal.Signals(signum).name)

        signal.signal(signal.SIGTERM, _stop)
        agent.run(interval)
    finally:
        agent.close()


@sync.command("status")
@db_option("The device's store (default: the --db given before `status`).")
@output_options
@click.option("--prometheus", is_flag=True,
              help="Print the figures as Prometheus metrics (text format), e.g. for node_exporter's textfile collector.")
@click.pass_context
def status(ctx: click.Context, db: Path | None, as_json: bool, prometheus: bool) -> None:
    """Show how each remote and home-server queue syncs: backlog, oldest message's age,
    last success, last error with its code, refused messages, messages moved to the
    dead-letter queue (DEAD-LETTERED, in all), next retry; and what the dead-letter
    queue holds.

    It reads the device's store, so it works while `edgeq sync` runs, or after.

    \b
    Examples:
      edgeq sync status --db device.db
      edgeq sync status --db device.db --json
      edgeq sync status --db device.db --prometheus > /var/lib/node_exporter/edgeq.prom

    \b
    Exit status: 0 all is well; 1 a queue is failing or holds refused messages, messages
    wait in the dead-letter queue, or the agent could not reach its server; 2 a usage mistake.
    """
    from edgeq.sync.agent.status import render_metrics, sync_status

    parent = ctx.parent.params.get("db") if ctx.parent is not None else None
    qm = open_store(ctx, EXISTING, db=db or parent)
    state = sync_status(qm)
    if prometheus:
        click.echo(render_metrics(state), nl=False)
    elif wants_json(ctx, as_json):
        emit_json(state.as_dict())
    else:
        click.echo(format_sync_status(state))
    if state.failing:
        ctx.exit(1)


def format_sync_status(state: SyncStatus) -> str:
    """The status as a table, one row per queue, then what is wrong and what to do.

    >>> from edgeq.sync.agent.status import QueueStatus, SyncStatus
    >>> q = QueueStatus("ORDERS", "push", "HOME/ORDERS", 2, 65_000, None, "HOME has no queue ORDERS: ...",
    ...                 "no-queue", 5_000, 2, 2, 10, 0, 12_000, True)
    >>> print(format_sync_status(SyncStatus(10_000, "HOME", False, None, None, None, [q], "DLQ", 1)))
    QUEUE   DIRECTION  BACKLOG  OLDEST  LAST-SUCCESS  LAST-ERROR         REFUSED  DEAD-LETTERED  NEXT-RETRY  TARGET
    ORDERS  push       2        1m 5s   never         no-queue (5s ago)  2        0              in 2s       HOME/ORDERS
    agent: not running (no daemon has run on this store)
    ORDERS: HOME has no queue ORDERS: ...
    DLQ: 1 message(s) could not be delivered: see edgeq dlq browse, then edgeq dlq resend once the cause is fixed
    """
    from edgeq.cli.format import approx_duration
    from edgeq.cli.views import format_table

    now = state.now_ms

    def ago(ms: int | None, never: str = "-") -> str:
        return never if ms is None else f"{approx_duration(max(0, now - ms))} ago"

    rows = [
        (q.queue, q.direction, "-" if q.backlog is None else str(q.backlog),
         "-" if q.oldest_age_ms is None else approx_duration(q.oldest_age_ms), ago(q.last_success_ms, "never"),
         "-" if q.last_error_code is None else f"{q.last_error_code} ({ago(q.last_error_ms)})",
         str(q.refused), str(q.dead_lettered),
         "-" if q.next_retry_ms is None else ("now" if q.next_retry_ms <= now else
                                             f"in {approx_duration(q.next_retry_ms - now)}"),
         q.target)
        for q in state.queues
    ]
    header = ("QUEUE", "DIRECTION", "BACKLOG", "OLDEST", "LAST-SUCCESS", "LAST-ERROR", "REFUSED",
              "DEAD-LETTERED", "NEXT-RETRY", "TARGET")
    lines = [format_table(header, rows) if rows else "No remote or home-server queues."]
    lines.append(_agent_line(state, ago))
    if state.stopped:
        retry = "" if state.next_retry_ms is None else f"; next try in {approx_duration(max(0, state.next_retry_ms - now))}"
        lines.append(f"agent: {state.error_code}: {state.error}{retry}")
    lines += [f"{q.queue}: {q.last_error}" for q in state.queues if q.failing and q.last_error]
    if state.dead_letter_depth:
        lines.append(f"{state.dead_letter_queue}: {state.dead_letter_depth} message(s) could not be "
                     "delivered: see edgeq dlq browse, then edgeq dlq resend once the cause is fixed")
    if state.restored is not None:
        lines.append(_restored_line(state.restored, now))
    return "\n".join(lines)


def _agent_line(state: SyncStatus, ago: Callable[[int | None], str]) -> str:
    """Whether a daemon runs (its pid, since when, its last cycle), or how the last one ended.

    >>> from edgeq.sync.agent.status import AgentProcess, SyncStatus
    >>> gone = AgentProcess(False, 41, 1_000, 7_000, 8_000, "SIGTERM")
    >>> _agent_line(SyncStatus(10_000, "HOME", False, None, None, None, [], agent=gone), lambda ms: f"{ms}")
    'agent: not running (pid 41 stopped 8000 on SIGTERM; last cycle 7000)'
    """
    agent = state.agent
    cycle = "none yet" if agent.last_cycle_ms is None else ago(agent.last_cycle_ms)
    if agent.running:
        return f"agent: running (pid {agent.pid}, since {ago(agent.started_ms)}, last cycle {cycle})"
    if agent.pid is None:
        return "agent: not running (no daemon has run on this store)"
    if agent.exited_ms is None:
        return (f"agent: not running (pid {agent.pid}, started {ago(agent.started_ms)}, ended without "
                f"recording its exit: killed, or the machine stopped; last cycle {cycle})")
    return (f"agent: not running (pid {agent.pid} stopped {ago(agent.exited_ms)} on {agent.exit_reason}; "
            f"last cycle {cycle})")


def _restored_line(found: Restoration, now: int) -> str:
    """What ``edgeq sync status`` says of a store found restored from an older copy."""
    from edgeq.cli.format import approx_duration

    return (f"store: found restored from an older copy {approx_duration(max(0, now - found.at_ms))} ago "
            f"({found.server} had settled {found.old_origin} below stamp {found.resent_below} and seen up to "
            f"{found.seen}); it issues uids as {found.new_origin} since, and the {found.resends} message(s) "
            f"it held below that mark are resends, answered by {found.server} as already delivered")


def _show_progress(progress: Progress) -> None:
    left = "?" if progress.left is None else f"{progress.left:,}"
    click.echo(f"{progress.queue}: {progress.done:,} sent, {left} left, {progress.rate:,.0f} msg/s", err=True)

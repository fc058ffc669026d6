"""``edgeq sync`` (the device agent) and ``edgeq sync status`` (how each queue of a device syncs,
read from its store). httpx is imported when the agent runs; logs are JSON lines on stderr."""

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
    check_store,
    db_option,
    log_level_option,
    name_option,
    need,
    open_store,
    output_options,
    wants_json,
)
from edgeq.errors import EdgeqError
from edgeq.sync.runtime import tune_gc

if TYPE_CHECKING:

    from edgeq.exchange.restored import Restoration
    from edgeq.sync.agent.agent import Progress
    from edgeq.sync.agent.status import SyncStatus

__all__ = ["format_sync_status", "status", "sync"]



@click.group("sync", cls=EdgeqGroup, invoke_without_command=True)
@db_option("The device's store (default: the group's --db).")
@name_option(
    "The device's queue manager name (checked against the store's; `edgeq queue define` makes a store).")
@click.option("--server", "server_url", envvar="EDGEQ_SERVER", show_envvar=True,
              help="The home server's URL, e.g. http://home:8470 (required to run the agent).")
@click.option("--interval", default=5.0, show_default=True, type=click.FloatRange(0.01),
              help="Seconds between sync cycles in daemon mode.")
@click.option("--once", is_flag=True,
              help="Push and pull until done, print a JSON summary, and exit: 0 if everything moved, 1 if "
                   "not.")
@click.option("--batch-size", default=500, show_default=True, type=click.IntRange(1))
@click.option("--pull/--no-pull", default=True, show_default=True, help="Also fill home-server queues.")
@click.option("--bridges/--no-bridges", default=True, show_default=True,
              help="The daemon also runs the store's bridges (`edgeq bridge define`; docs/bridges.md).")
@click.option("--timeout", default=30.0, show_default=True, type=click.FloatRange(0.1),
              help="HTTP timeout, seconds.")
@click.option("--progress/--no-progress", default=None,
              help="Show backlog progress on stderr (default: if a terminal).")
@click.option("--report-expiries/--no-report-expiries", default=True, show_default=True,
              help="Journal this device's expiries (stored with the store) and report them to the server.")
@click.option("--key", "key_file", type=click.Path(dir_okay=False, path_type=Path), envvar="EDGEQ_KEY",
              show_envvar=True, help="Sign every request with this device key (from `edgeq keys new`).")
@click.option("--ca-file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              envvar="EDGEQ_CA_FILE", show_envvar=True,
              help="Verify an https:// server against this CA certificate (PEM) instead of the system store.")
@click.option("--allow-insecure-http", is_flag=True,
              help="Allow plain http:// to a server that is not on loopback (trusted networks only).")
@log_level_option
@click.pass_context
def sync(
    ctx: click.Context, db: Path | None, name: str | None, server_url: str | None, interval: float,
    once: bool, batch_size: int, pull: bool, bridges: bool, timeout: float, progress: bool | None,
    report_expiries: bool, key_file: Path | None, ca_file: Path | None, allow_insecure_http: bool,
    log_level: str,
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
                               "e.g. --server http://home:8470 (or `edgeq sync status` to see how the queues "
                               "sync)", ctx)
    need("httpx", "sync")
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
    agent.bridges_enabled = bridges
    tune_gc()
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
              help="Print the figures as Prometheus metrics (text format), e.g. for node_exporter's textfile "
                   "collector.")
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
    """  # noqa: E501
    from edgeq.cli.format import approx_duration
    from edgeq.cli.views import format_table

    now = state.now_ms

    def ago(ms: int | None, never: str = "-") -> str:
        return never if ms is None else f"{approx_duration(max(0, now - ms))} ago"

    rows = [
        (q.queue, q.direction, "-" if q.backlog is None else str(q.backlog),
         "-" if q.oldest_age_ms is None else approx_duration(q.oldest_age_ms),
         ago(q.last_success_ms, "never"), "-"
         if q.last_error_code is None else f"{q.last_error_code} ({ago(q.last_error_ms)})", str(q.refused),
         str(q.dead_lettered), "-" if q.next_retry_ms is None else ("now" if q.next_retry_ms <= now else
                                             f"in {approx_duration(q.next_retry_ms - now)}"),
         q.target)
        for q in state.queues
    ]
    header = ("QUEUE", "DIRECTION", "BACKLOG", "OLDEST", "LAST-SUCCESS", "LAST-ERROR", "REFUSED",
              "DEAD-LETTERED", "NEXT-RETRY", "TARGET")
    lines = [format_table(header, rows) if rows else "No remote or home-server queues."]
    lines.append(_agent_line(state, ago))
    if state.bridges:
        from edgeq.cli.bridge import format_bridges

        lines.append(format_bridges(state.bridges))
        lines += [f"bridge {b.name}: not connected: {b.state.last_error or 'no error yet'}"
                  for b in state.bridges if b.running and not b.connected]
    if state.stopped:
        retry = ("" if state.next_retry_ms is None
                 else f"; next try in {approx_duration(max(0, state.next_retry_ms - now))}")
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

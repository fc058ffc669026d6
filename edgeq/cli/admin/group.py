"""``edgeq admin``'s group: its options, the admin client, and how a request is sent and waited for."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import click

from edgeq.cli.base import EdgeqGroup, emit_json
from edgeq.cli.options import (
    ADMIN,
    F,
    db_option,
    open_store,
    output_options,
    remote_api,
    remote_options,
    remote_words,
    wants_json,
)
from edgeq.cli.params import DEVICE_NAME, DURATION, REQUEST_EXPIRY, parse_device_name
from edgeq.clock import system_clock
from edgeq.errors import EdgeqError

if TYPE_CHECKING:  # the admin stack (cbor2, cryptography) is imported when a command runs
    from edgeq.sync.server.admin.client import AdminClient
    from edgeq.sync.server.admin.records import AdminRecord
    from edgeq.sync.server.api.client import ApiClient

__all__ = ["AdminOptions", "admin", "client_of", "confirm", "depth_line", "exit_unless_success",
           "merged_options", "remote", "request_options", "send", "stack"]

#: The operator's own commands; any other first word is a device name.
OPERATOR_COMMANDS = ("keygen", "pending", "replies", "resend", "show")


@dataclass(slots=True)
class AdminOptions:
    """``edgeq admin``'s options, for its commands (a command's own win over the group's)."""

    db: Path | None
    key_file: Path | None
    key_id: str | None
    device: str | None
    all_devices: bool
    wait_ms: int | None
    expires_ms: int | None
    json: bool


class AdminGroup(EdgeqGroup):
    """Takes the word before a device command as the device (unless --all-devices or --device is given)."""

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        if not args or args[0] in OPERATOR_COMMANDS or (
                args[0] in self.commands and {"--help", "-h"} & set(args)):
            return super().resolve_command(ctx, args)
        if ctx.params.get("all_devices") and ctx.params.get("device") is not None:
            raise click.UsageError("give --all-devices or --device, not both", ctx)
        if not ctx.params.get("all_devices") and ctx.params.get("device") is None:
            if args[0] in self.commands:
                raise click.UsageError(
                    f"name the device first (edgeq admin DEV1 {args[0]} ...), or give --all-devices", ctx)
            try:
                ctx.params["device"] = parse_device_name(args[0])
            except ValueError as exc:
                raise click.BadParameter(str(exc), ctx, param_hint="'DEVICE'") from None
            args = args[1:]
            if not args:
                raise click.UsageError(f"give a command after the device, e.g. edgeq admin "
                                       f"{ctx.params['device']} queue list", ctx)
        return super().resolve_command(ctx, args)


def stack(*options: Callable[[F], F]) -> Callable[[F], F]:
    """One decorator applying ``options`` in order (the first is the first in --help)."""

    def decorate(f: F) -> F:
        for option in reversed(options):
            f = option(f)
        return f

    return decorate


#: ``--wait``, ``--expires`` and ``--json``: on the group, and on each device command.
request_options = stack(
    click.option("--wait", "wait_ms", type=DURATION, metavar="DURATION",
                 help="Wait this long for the replies (30s, 2m) and print them; exit 1 unless every "
                      "device replied success. Without it the request ids are printed."),
    click.option("--expires", "expires_ms", type=REQUEST_EXPIRY, metavar="DURATION",
                 help="A request the device has not taken within this (10m, 1h; at least 1ms) is never "
                      "executed: it shows as 'expired before delivery: never executed' (one handed over "
                      "and not answered by then: 'outcome unknown until the device answers')."),
    output_options,
)


@click.group("admin", cls=AdminGroup, subcommand_metavar="[DEVICE] COMMAND [ARGS]...")
@db_option("The home server's store (default: the group's --db), e.g. the one of edgeq serve --db.")
@click.option("--key", "key_file", type=click.Path(dir_okay=False, path_type=Path), envvar="EDGEQ_ADMIN_KEY",
              show_envvar=True, help="Sign requests with this operator key (from `edgeq admin keygen`).")
@click.option("--key-id", help="The id the devices trust the key under (default: the one keygen printed).")
@click.option("--device", type=DEVICE_NAME, help="The device, for one named like an operator command.")
@click.option("--all-devices", is_flag=True,
              help="Send to every device the server knows (and has not revoked).")
@request_options
@remote_options
@click.pass_context
def admin(ctx: click.Context, db: Path | None, key_file: Path | None, key_id: str | None, device: str | None,
          all_devices: bool, wait_ms: int | None, expires_ms: int | None, as_json: bool) -> None:
    """Administer devices remotely: signed requests travel to a device with its sync, replies come back.

    \b
    Examples:
      edgeq admin keygen --out operator.key
      edgeq admin --db home.db --key operator.key DEV1 queue list --wait 30s
      edgeq admin --db home.db --key operator.key --all-devices sync-status --wait 1m
      edgeq admin --server http://home:8471 --token-file ops.token DEV1 queue list --wait 30s

    Exit status: 0 on success; 1 on an error, or a failed (or no) reply with --wait; 2 on a usage mistake.
    """
    ctx.obj = AdminOptions(db, key_file, key_id, device, all_devices, wait_ms, expires_ms, as_json)


# -- helpers ---------------------------------------------------------------------------------


def merged_options(ctx: click.Context, wait_ms: int | None = None, expires_ms: int | None = None,
             as_json: bool = False) -> AdminOptions:
    """The group's options, with a command's own --wait, --expires and --json over them."""
    opts = ctx.find_object(AdminOptions) or AdminOptions(None, None, None, None, False, None, None, False)
    return AdminOptions(opts.db, opts.key_file, opts.key_id, opts.device, opts.all_devices,
                        opts.wait_ms if wait_ms is None else wait_ms,
                        opts.expires_ms if expires_ms is None else expires_ms,
                        wants_json(ctx, as_json or opts.json))


def client_of(ctx: click.Context, opts: AdminOptions, *, signing: bool) -> AdminClient:
    """The home store's admin client, with the operator key when it is to sign requests."""
    from edgeq.sync.server.admin.client import AdminClient, OperatorKey

    key = None
    if signing:
        if opts.key_file is None:
            raise click.UsageError("give --key FILE (or EDGEQ_ADMIN_KEY) to sign requests; make a key with "
                                   "edgeq admin keygen --out operator.key", ctx)
        try:
            key = OperatorKey.load(opts.key_file, opts.key_id)
            from edgeq.admin.wire import check_key_id

            check_key_id(key.key_id)
        except EdgeqError as exc:
            raise click.BadParameter(str(exc), ctx, param_hint="'--key'/'--key-id'") from None
    client = AdminClient(open_store(ctx, ADMIN, db=opts.db), operator_key=key)
    ctx.call_on_close(client.close)
    return client


def exit_unless_success(ctx: click.Context, records: Sequence[AdminRecord]) -> None:
    """Exit 1 unless every request was answered with success."""
    if any(r.rc != "success" for r in records):
        ctx.exit(1)


Show = Callable[["AdminRecord", int], str]


def send(ctx: click.Context, action: str, target: str | None = None,
         params: Mapping[str, object] | None = None,
          *, wait_ms: int | None, expires_ms: int | None, as_json: bool, show: Show | None = None) -> None:
    """Send ``action`` to the device(s), then print the request ids, or wait and print the replies."""
    from edgeq.cli.admin.views import format_fanout, format_record

    opts = merged_options(ctx, wait_ms, expires_ms, as_json)
    if not opts.all_devices and opts.device is None:
        raise click.UsageError("name the device (edgeq admin DEV1 ...), or give --all-devices", ctx)
    api = remote(ctx, opts)
    if api is not None:
        done = _send_remote(api, opts, action, target, params or {})
        now, again = system_clock(), remote_words(ctx)
    else:
        done, now, again = _send_local(ctx, opts, action, target, params)
    if opts.json:
        dicts = [r.as_dict(now) for r in done]
        emit_json(dicts if opts.all_devices else dicts[0])
    elif opts.wait_ms is None:
        for r in done:
            click.echo(f"Sent {action}{' ' + target if target else ''} to {r.device}: request {r.request_id}")
        later = f"show {done[0].request_id} --wait 30s" if len(done) == 1 else "replies"
        click.echo(f"Its reply, once the device has synced: edgeq admin {shlex.join(again)} {later}",
                   err=True)
    elif opts.all_devices:
        click.echo(format_fanout(done, now))
    else:
        click.echo((show or format_record)(done[0], now))
    if opts.wait_ms is not None:
        exit_unless_success(ctx, done)


def _send_local(ctx: click.Context, opts: AdminOptions, action: str, target: str | None,
                params: Mapping[str, object] | None) -> tuple[list[AdminRecord], int, list[str]]:
    """Through the store: the records, the client's time, and the words that name the store."""
    client = client_of(ctx, opts, signing=True)
    expires = None if opts.expires_ms is None else client.clock() + opts.expires_ms
    if opts.all_devices:
        handles = client.request_all(action, target, params, expires_ms=expires)
    else:
        handles = [client.request(str(opts.device), action, target, params, expires_ms=expires)]
    if opts.wait_ms is None:
        records = [client.records.get(h.request_id) for h in handles]
    else:
        waited = client.wait_all(handles, opts.wait_ms / 1000)
        records = [waited[h.request_id] for h in handles]
    return [r for r in records if r is not None], client.clock(), ["--db", str(client.qm.path)]


def _send_remote(api: ApiClient, opts: AdminOptions, action: str, target: str | None,
                 params: Mapping[str, object]) -> list[AdminRecord]:
    """Through the management API: the server signs with its operator key (edgeq serve --admin-key)."""
    devices = [str(opts.device)] if not opts.all_devices else [
        d.name for d, _ in api.devices() if d.revoked_ms is None]
    if not devices:
        raise click.ClickException("the server knows no device (none said hello, none is registered): "
                                   "nothing to send to")
    sent = [api.send_admin_request(d, action, target, params, expires_in_ms=opts.expires_ms) for d in devices]
    if opts.wait_ms is None:
        return sent
    return api.wait_admin_requests([r.request_id for r in sent], opts.wait_ms / 1000)


def remote(ctx: click.Context, opts: AdminOptions) -> ApiClient | None:
    """The management API client ``--server`` asks for (None: the store, --db); ``--key`` is not used
    then (the server signs), and says so."""
    api = remote_api(ctx)
    if api is not None and opts.db is not None:
        raise click.UsageError("give --server URL (a remote store) or --db PATH (a local one), not both")
    if api is not None and opts.key_file is not None:
        click.echo(f"Note: {opts.key_file} (--key or EDGEQ_ADMIN_KEY) is not used with --server: the server "
                   "signs with its own operator key (edgeq serve --admin-key).", err=True)
    return api


def depth_line(record: AdminRecord, now_ms: int) -> str:
    """``DEV1 ORDERS: depth 3`` (or how the request stands)."""
    from edgeq.cli.admin.views import format_record

    reply = record.reply
    if reply is None or not reply.results or reply.results[0].get("rc") != "success":
        return format_record(record, now_ms)
    return f"{record.device} {record.target}: depth {reply.results[0].get('depth')}"


def confirm(question: str) -> None:
    """Ask ``question`` on a terminal; without one (a script, cron) fail, saying to give --yes."""
    import sys

    if not sys.stdin.isatty():
        raise click.ClickException(
            f"{question.rstrip('?')}: not asked without a terminal; give --yes to do it")
    click.confirm(question, abort=True, err=True)



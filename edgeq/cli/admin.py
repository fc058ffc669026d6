"""``edgeq admin``: administer devices from the home server, by signed admin messages.

    edgeq admin keygen --out operator.key                               # the operator's key pair
    edgeq admin --db home.db --key operator.key DEV1 queue list --wait 30s
    edgeq admin --db home.db --key operator.key --all-devices queue depth ORDERS --wait 30s
    edgeq admin --db home.db pending                                     # no reply yet

A request is signed, recorded in the home store and queued for the device's next sync
(:class:`edgeq.sync.server.admin.AdminClient`); ``--wait`` waits for the replies, otherwise the
request ids are printed. The commands after the device name (``queue``, ``purge``,
``sweep``, ``rules``, ``sync-status``) are the device's, run there; ``keygen``,
``pending``, ``replies`` and ``show`` are the operator's own. See docs/admin.md.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from edgeq.cli.base import EdgeqGroup, emit_json
from edgeq.cli.options import ADMIN, F, db_option, open_store, output_options, wants_json
from edgeq.cli.params import DEVICE_NAME, DURATION, QUEUE_NAME, REQUEST_EXPIRY, Limit, parse_device_name
from edgeq.cli.queue import (
    _attributes,
    _check_backout,
    _check_kind,
    _kind_options,
    _queue_options,
    _refusal_option,
    _rule_option,
)
from edgeq.errors import EdgeqError

if TYPE_CHECKING:  # the admin stack (cbor2, cryptography) is imported when a command runs
    from edgeq.sync.server.admin import AdminClient
    from edgeq.sync.server.adminrecords import AdminRecord

__all__ = ["admin"]

#: The operator's own commands; any other first word is a device name.
OPERATOR_COMMANDS = ("keygen", "pending", "replies", "show")


@dataclass(slots=True)
class AdminOptions:
    """``edgeq admin``'s options, for its commands (a command's own --wait, --expires and
    --json win over the group's)."""

    db: Path | None
    key_file: Path | None
    key_id: str | None
    device: str | None
    all_devices: bool
    wait_ms: int | None
    expires_ms: int | None
    json: bool


class AdminGroup(EdgeqGroup):
    """``edgeq admin [OPTIONS] DEVICE COMMAND ...``: the word before a device command is the
    device (unless ``--all-devices`` or ``--device`` names the devices)."""

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[str | None, click.Command | None, list[str]]:
        """Take the device name off ``args`` before the command is looked up."""
        if not args or args[0] in OPERATOR_COMMANDS or (args[0] in self.commands and {"--help", "-h"} & set(args)):
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
                raise click.UsageError(f"give a command after the device, e.g. edgeq admin {ctx.params['device']} "
                                       "queue list", ctx)
        return super().resolve_command(ctx, args)


def _stack(*options: Callable[[F], F]) -> Callable[[F], F]:
    """One decorator applying ``options`` in order (the first is the first in --help)."""

    def decorate(f: F) -> F:
        """Apply the options to a command."""
        for option in reversed(options):
            f = option(f)
        return f

    return decorate


#: ``--wait``, ``--expires`` and ``--json``: on the group, and on each device command.
_request_options = _stack(
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
@click.option("--all-devices", is_flag=True, help="Send to every device the server knows (and has not revoked).")
@_request_options
@click.pass_context
def admin(ctx: click.Context, db: Path | None, key_file: Path | None, key_id: str | None, device: str | None,
          all_devices: bool, wait_ms: int | None, expires_ms: int | None, as_json: bool) -> None:
    """Administer devices remotely: signed requests travel to a device with its sync and its
    replies come back the same way (a device offline now executes them when it reconnects).

    \b
    Examples:
      edgeq admin keygen --out operator.key
      edgeq admin --db home.db --key operator.key DEV1 queue list --wait 30s
      edgeq admin --db home.db --key operator.key DEV1 queue depth ORDERS
      edgeq admin --db home.db --key operator.key DEV1 queue define ALERTS --expiry-ms 60000
      edgeq admin --db home.db --key operator.key DEV1 queue delete OLD --expires 10m
      edgeq admin --db home.db --key operator.key --all-devices sync-status --wait 1m
      edgeq admin --db home.db show 3f2a... --wait 30s
      edgeq admin --db home.db pending
      edgeq admin --db home.db replies --json

    Exit status: 0 on success; 1 on an error, or when --wait saw a failed reply or none;
    2 on a usage mistake.
    """
    ctx.obj = AdminOptions(db, key_file, key_id, device, all_devices, wait_ms, expires_ms, as_json)


# -- helpers ---------------------------------------------------------------------------------


def _options(ctx: click.Context, wait_ms: int | None = None, expires_ms: int | None = None,
             as_json: bool = False) -> AdminOptions:
    """The group's options, with a command's own --wait, --expires and --json over them."""
    opts = ctx.find_object(AdminOptions) or AdminOptions(None, None, None, None, False, None, None, False)
    return AdminOptions(opts.db, opts.key_file, opts.key_id, opts.device, opts.all_devices,
                        opts.wait_ms if wait_ms is None else wait_ms,
                        opts.expires_ms if expires_ms is None else expires_ms,
                        wants_json(ctx, as_json or opts.json))


def _client(ctx: click.Context, opts: AdminOptions, *, signing: bool) -> AdminClient:
    """The home store's admin client, with the operator key when it is to send requests
    (a missing or bad key is a usage mistake, found before the store is opened)."""
    from edgeq.sync.server.admin import AdminClient, OperatorKey

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


def _exit(ctx: click.Context, records: Sequence[AdminRecord]) -> None:
    """Exit 1 unless every request was answered with success."""
    if any(r.rc != "success" for r in records):
        ctx.exit(1)


Show = Callable[["AdminRecord", int], str]


def _send(ctx: click.Context, action: str, target: str | None = None, params: Mapping[str, object] | None = None,
          *, wait_ms: int | None, expires_ms: int | None, as_json: bool, show: Show | None = None) -> None:
    """Send ``action`` to the device(s), then print the request ids, or wait and print the replies."""
    from edgeq.cli.adminviews import format_fanout, format_record

    opts = _options(ctx, wait_ms, expires_ms, as_json)
    client = _client(ctx, opts, signing=True)
    expires = None if opts.expires_ms is None else client.clock() + opts.expires_ms
    if opts.all_devices:
        handles = client.request_all(action, target, params, expires_ms=expires)
    elif opts.device is not None:
        handles = [client.request(opts.device, action, target, params, expires_ms=expires)]
    else:
        raise click.UsageError("name the device (edgeq admin DEV1 ...), or give --all-devices", ctx)
    if opts.wait_ms is None:
        records = [client.records.get(h.request_id) for h in handles]
    else:
        waited = client.wait_all(handles, opts.wait_ms / 1000)
        records = [waited[h.request_id] for h in handles]
    done = [r for r in records if r is not None]
    now = client.clock()
    if opts.json:
        dicts = [r.as_dict(now) for r in done]
        emit_json(dicts if opts.all_devices else dicts[0])
    elif opts.wait_ms is None:
        for r in done:
            click.echo(f"Sent {action}{' ' + target if target else ''} to {r.device}: request {r.request_id}")
        db = shlex.quote(str(client.qm.path))
        later = f"show {done[0].request_id} --wait 30s" if len(done) == 1 else "replies"
        click.echo(f"Its reply, once the device has synced: edgeq admin --db {db} {later}", err=True)
    elif opts.all_devices:
        click.echo(format_fanout(done, now))
    else:
        click.echo((show or format_record)(done[0], now))
    if opts.wait_ms is not None:
        _exit(ctx, done)


def _depth_line(record: AdminRecord, now_ms: int) -> str:
    """``DEV1 ORDERS: depth 3`` (or how the request stands)."""
    from edgeq.cli.adminviews import format_record

    reply = record.reply
    if reply is None or not reply.results or reply.results[0].get("rc") != "success":
        return format_record(record, now_ms)
    return f"{record.device} {record.target}: depth {reply.results[0].get('depth')}"


# -- the operator's commands -------------------------------------------------------------------


@admin.command("keygen")
@click.option("--out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The private key file to write (mode 0600); the public key goes beside it as .pub.")
@click.option("--force", is_flag=True, help="Replace existing key files.")
@output_options
@click.pass_context
def keygen(ctx: click.Context, out: Path, force: bool, as_json: bool) -> None:
    """Make an operator key pair (Ed25519) and print its id.

    Keep the private key with the operator; give the public one (.pub) to each device
    to trust, under the key id printed.

    \b
    Examples:
      edgeq admin keygen --out operator.key
      edgeq keys trust-admin --db device.db KEY_ID operator.pub     # on each device
    """
    from edgeq.sync.server.admin import new_operator_key

    pair, key_id = new_operator_key(out, overwrite=force)
    if wants_json(ctx, as_json or _options(ctx).json):
        emit_json({"private_key": str(pair.private_path), "public_key": str(pair.public_path), "key_id": key_id,
                   "fingerprint": pair.fingerprint})
        return
    click.echo(f"Wrote {pair.private_path} (private: keep it with the operator) and {pair.public_path} (public).")
    click.echo(f"key id: {key_id}")
    click.echo(f"Trust it on a device: edgeq keys trust-admin --db DEVICE.db {key_id} {pair.public_path}")


@admin.command("pending")
@click.option("--device", "only", type=DEVICE_NAME, help="Only this device's requests.")
@output_options
@click.pass_context
def pending(ctx: click.Context, only: str | None, as_json: bool) -> None:
    """List the requests with no reply yet, oldest first; one that expired before the device
    took it shows as 'expired before delivery: never executed'; one it took and has not
    answered by its expiry as 'outcome unknown until the device answers' (it may have run).

    \b
    Examples:
      edgeq admin --db home.db pending
      edgeq admin --db home.db pending --device DEV2 --json
    """
    from edgeq.cli.adminviews import format_pending

    opts = _options(ctx, as_json=as_json)
    client = _client(ctx, opts, signing=False)
    records, now = client.pending(only), client.clock()
    if opts.json:
        emit_json([r.as_dict(now) for r in records])
    else:
        click.echo(format_pending(records, now))


@admin.command("replies")
@click.option("--device", "only", type=DEVICE_NAME, help="Only this device's replies.")
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1), help="Show at most this many.")
@output_options
@click.pass_context
def replies(ctx: click.Context, only: str | None, limit: int, as_json: bool) -> None:
    """List the replies received, the latest first (--json: with every item of each reply).

    \b
    Examples:
      edgeq admin --db home.db replies
      edgeq admin --db home.db replies --device DEV1 --limit 10 --json
    """
    from edgeq.cli.adminviews import format_replies

    opts = _options(ctx, as_json=as_json)
    client = _client(ctx, opts, signing=False)
    records, now = client.replies(only, limit=limit), client.clock()
    if opts.json:
        emit_json([r.as_dict(now) for r in records])
    else:
        click.echo(format_replies(records))


@admin.command("show")
@click.argument("request_id")
@click.option("--wait", "wait_ms", type=DURATION, metavar="DURATION", help="Wait this long for the reply (30s, 2m).")
@output_options
@click.pass_context
def show(ctx: click.Context, request_id: str, wait_ms: int | None, as_json: bool) -> None:
    """Show one request and its reply (waiting for it with --wait); exit 1 unless it was
    answered with success.

    \b
    Examples:
      edgeq admin --db home.db show 3f2a9c0e5b7d4a1f8e6c2b0a9d8f7e6c --wait 30s
    """
    from edgeq.cli.adminviews import format_record

    opts = _options(ctx, wait_ms, None, as_json)
    client = _client(ctx, opts, signing=False)
    record = client.records.get(request_id)
    if record is None:
        raise click.BadParameter(f"no admin request {request_id!r} was sent from this store (see edgeq admin "
                                 "pending and replies)", ctx, param_hint="'REQUEST_ID'")
    handle = client.handle(request_id)
    record = client.wait_all([handle], (opts.wait_ms or 0) / 1000)[request_id]
    now = client.clock()
    if opts.json:
        emit_json(record.as_dict(now))
    else:
        click.echo(format_record(record, now))
    _exit(ctx, [record])


# -- the device's commands ---------------------------------------------------------------------


@admin.group("queue", cls=EdgeqGroup)
def queue() -> None:
    """A device's queues: list, show, depth, define, alter, delete, purge."""


@queue.command("list")
@_request_options
@click.pass_context
def queue_list(ctx: click.Context, /, **request: Any) -> None:
    """List the device's queues with their kind, depth and bytes (expired messages purged first).

    \b
    Examples:
      edgeq admin --db home.db --key operator.key DEV1 queue list --wait 30s
      edgeq admin --db home.db --key operator.key --all-devices queue list --wait 1m
    """
    _send(ctx, "inquire-all", **request)


@queue.command("show")
@click.argument("name", type=QUEUE_NAME)
@_request_options
@click.pass_context
def queue_show(ctx: click.Context, /, name: str, **request: Any) -> None:
    """Show a queue: attributes, depth, bytes, the oldest message's age (expired ones purged first).

    \b
    Example:
      edgeq admin --db home.db --key operator.key DEV1 queue show ORDERS --wait 30s --json
    """
    _send(ctx, "inquire-queue", name, **request)


@queue.command("depth")
@click.argument("name", type=QUEUE_NAME)
@_request_options
@click.pass_context
def queue_depth(ctx: click.Context, /, name: str, **request: Any) -> None:
    """How many messages a queue holds: MQe's size inquiry, which purges expired messages first
    (the queue's rules fire at check point 'depth').

    \b
    Example:
      edgeq admin --db home.db --key operator.key DEV1 queue depth ORDERS --wait 30s
    """
    _send(ctx, "inquire-queue", name, show=_depth_line, **request)


_define_options = _stack(  # the options of `edgeq queue define`: the device takes what the local command takes
    _queue_options, _kind_options, _refusal_option, _rule_option,
    click.option("--encryption", type=click.Choice(["aes-256-gcm"]), default=None,
                 help="Seal message data and fields in the device's store (it needs its store key)."),
)


@queue.command("define")
@click.argument("name", type=QUEUE_NAME)
@_define_options
@_request_options
@click.pass_context
def queue_define(ctx: click.Context, /, name: str, rule_specs: tuple[tuple[str, dict[str, Any]], ...],
                 encryption: str | None, remote: bool, target_qmgr: str | None, target_queue: str | None,
                 mode: str | None, home_server: str | None, refusal_limit: Limit | None, wait_ms: int | None,
                 expires_ms: int | None, as_json: bool, **options: Any) -> None:
    """Define queue NAME on the device: local, --remote or --home-server, with the attributes
    and rules of `edgeq queue define` (rules by their installed names only).

    \b
    Examples:
      edgeq admin --db home.db --key operator.key DEV1 queue define ALERTS --expiry-ms 60000 --wait 30s
      edgeq admin --db home.db --key operator.key DEV1 queue define OUT --remote --target-qmgr HOME
    """
    remote_only = dict(target_qmgr=target_qmgr, target_queue=target_queue, mode=mode, refusal_limit=refusal_limit)
    # The same checks as `edgeq queue define` (a usage mistake is found here, not on the device).
    _check_kind(remote, home_server, {f"--{k.replace('_', '-')}": v for k, v in remote_only.items()},
                options["ordering"])
    _check_backout(remote, options["backout_threshold"], options["backout_queue"])
    params: dict[str, object] = dict(_attributes(**options))
    if remote:
        params.update(_attributes(kind="remote", **remote_only))
    elif home_server is not None:
        params.update(kind="home", server=home_server)
    if rule_specs:
        params["rules"] = _rules(rule_specs)
    if encryption is not None:
        params["encryption"] = encryption
    _send(ctx, "define-queue", name, params, wait_ms=wait_ms, expires_ms=expires_ms, as_json=as_json)


_alter_options = _stack(  # the options of `edgeq queue alter`
    _queue_options, _refusal_option, _rule_option,
    click.option("--no-rules", is_flag=True, help="Remove every rule binding from the queue."),
    click.option("--no-backout", is_flag=True, help="Stop moving poison messages: no backout threshold nor queue."),
)


@queue.command("alter")
@click.argument("name", type=QUEUE_NAME)
@_alter_options
@_request_options
@click.pass_context
def queue_alter(ctx: click.Context, /, name: str, rule_specs: tuple[tuple[str, dict[str, Any]], ...],
                no_rules: bool, no_backout: bool, wait_ms: int | None, expires_ms: int | None, as_json: bool,
                **options: Any) -> None:
    """Change some attributes of queue NAME on the device (those of `edgeq queue alter`);
    --rule replaces every rule binding, --no-rules removes them.

    \b
    Examples:
      edgeq admin --db home.db --key operator.key DEV1 queue alter ORDERS --max-depth 1000 --wait 30s
      edgeq admin --db home.db --key operator.key DEV1 queue alter ORDERS --expiry-ms none --no-backout
    """
    if rule_specs and no_rules:
        raise click.UsageError("give --rule (to replace the queue's rules) or --no-rules (to remove them), not both")
    params: dict[str, object] = dict(_attributes(**options))
    if no_backout:
        if {"backout_threshold", "backout_queue"} & params.keys():
            raise click.UsageError("give --no-backout, or --backout-threshold/--backout-queue, not both")
        params.update(backout_threshold=None, backout_queue=None)
    if rule_specs or no_rules:
        params["rules"] = _rules(rule_specs)
    if not params:
        raise click.UsageError("nothing to change: give at least one option, e.g. --max-depth 1000")
    _send(ctx, "alter-queue", name, params, wait_ms=wait_ms, expires_ms=expires_ms, as_json=as_json)


def _rules(specs: Sequence[tuple[str, dict[str, Any]]]) -> list[object]:
    """Rule specs as params: a name, or ``[name, config]``."""
    return [name if not config else [name, config] for name, config in specs]


@queue.command("delete")
@click.argument("name", type=QUEUE_NAME)
@click.option("--yes", is_flag=True, help="With --all-devices: delete without asking first.")
@_request_options
@click.pass_context
def queue_delete(ctx: click.Context, /, name: str, yes: bool, **request: Any) -> None:
    """Delete a queue on the device: expired messages are purged first (rules fire at
    'delete'), then it must be empty; one holding live messages is refused with their count.
    With --all-devices it asks first (or give --yes).

    \b
    Examples:
      edgeq admin --db home.db --key operator.key DEV1 queue delete OLD --wait 30s
      edgeq admin --db home.db --key operator.key --all-devices queue delete OLD --yes
    """
    if _options(ctx).all_devices and not yes:
        _confirm(f"Delete queue {name} on every device this server knows?")
    _send(ctx, "delete-queue", name, **request)


def _confirm(question: str) -> None:
    """Ask ``question`` on a terminal; without one (a script, cron) fail, saying to give --yes."""
    import sys

    if not sys.stdin.isatty():
        raise click.ClickException(f"{question.rstrip('?')}: not asked without a terminal; give --yes to do it")
    click.confirm(question, abort=True, err=True)


@queue.command("purge")
@click.argument("name", type=QUEUE_NAME)
@_request_options
@click.pass_context
def queue_purge(ctx: click.Context, /, name: str, **request: Any) -> None:
    """Remove every message from a queue on the device (rules see reason 'purged').

    \b
    Example:
      edgeq admin --db home.db --key operator.key DEV1 queue purge ORDERS --wait 30s
    """
    _send(ctx, "purge", name, **request)


# `edgeq admin DEV1 purge Q` is `queue purge` under a shorter name (as `edgeq purge` is locally).
admin.add_command(queue_purge, "purge")


@admin.command("sweep")
@click.argument("name", type=QUEUE_NAME, required=False)
@_request_options
@click.pass_context
def sweep(ctx: click.Context, /, name: str | None, **request: Any) -> None:
    """Discard expired messages now on the device, from queue NAME or from every queue.

    \b
    Example:
      edgeq admin --db home.db --key operator.key --all-devices sweep --wait 1m
    """
    _send(ctx, "sweep", name, **request)


@admin.group("rules", cls=EdgeqGroup)
def rules() -> None:
    """A device's rule bindings and failures, and retrying failed rule events."""


@rules.command("list")
@click.argument("name", type=QUEUE_NAME, required=False)
@_request_options
@click.pass_context
def rules_list(ctx: click.Context, /, name: str | None, **request: Any) -> None:
    """The rules bound to queue NAME (or to every queue that has some) and their failures.

    \b
    Example:
      edgeq admin --db home.db --key operator.key DEV1 rules list ORDERS --wait 30s
    """
    _send(ctx, "inquire-rules", name, **request)


@rules.command("retry")
@click.option("--parked", is_flag=True, help="Retry the parked failures too (given up after their retries).")
@click.option("--event-id", type=click.IntRange(1), help="Only this failed event.")
@_request_options
@click.pass_context
def rules_retry(ctx: click.Context, /, parked: bool, event_id: int | None, **request: Any) -> None:
    """Retry the device's failed rule events now.

    \b
    Example:
      edgeq admin --db home.db --key operator.key DEV1 rules retry --parked --wait 30s
    """
    params = {"parked": parked, **({} if event_id is None else {"event_id": event_id})}
    _send(ctx, "retry-rules", None, params, **request)


@admin.command("sync-status")
@_request_options
@click.pass_context
def sync_status(ctx: click.Context, /, **request: Any) -> None:
    """How the device's remote and home-server queues sync (its `edgeq sync status`).

    \b
    Example:
      edgeq admin --db home.db --key operator.key --all-devices sync-status --wait 1m
    """
    _send(ctx, "inquire-sync", **request)

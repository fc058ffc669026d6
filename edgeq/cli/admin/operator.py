"""The operator's own ``edgeq admin`` commands: ``keygen``, ``pending``, ``replies``, ``show``, ``resend``."""

from __future__ import annotations

from pathlib import Path

import click

from edgeq.cli.admin.group import admin, client_of, exit_unless_success, merged_options, remote
from edgeq.cli.base import emit_json
from edgeq.cli.options import output_options, remote_options, wants_json
from edgeq.cli.params import DEVICE_NAME, DURATION
from edgeq.clock import system_clock

__all__ = ["keygen", "pending", "replies", "resend", "show"]


@admin.command("keygen")
@click.option("--out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The private key file to write (mode 0600); the public key goes beside it as .pub.")
@click.option("--force", is_flag=True, help="Replace existing key files.")
@output_options
@click.pass_context
def keygen(ctx: click.Context, out: Path, force: bool, as_json: bool) -> None:
    """Make an operator key pair (Ed25519) and print the key id devices trust it under.

    \b
    Examples:
      edgeq admin keygen --out operator.key
      edgeq keys trust-admin --db device.db KEY_ID operator.pub     # on each device
    """
    from edgeq.sync.server.admin.client import new_operator_key

    pair, key_id = new_operator_key(out, overwrite=force)
    if wants_json(ctx, as_json or merged_options(ctx).json):
        emit_json({"private_key": str(pair.private_path), "public_key": str(pair.public_path),
                   "key_id": key_id, "fingerprint": pair.fingerprint})
        return
    click.echo(f"Wrote {pair.private_path} (private: keep it with the operator) "
               f"and {pair.public_path} (public).")
    click.echo(f"key id: {key_id}")
    click.echo(f"Trust it on a device: edgeq keys trust-admin --db DEVICE.db {key_id} {pair.public_path}")


@admin.command("pending")
@click.option("--device", "only", type=DEVICE_NAME, help="Only this device's requests.")
@remote_options
@output_options
@click.pass_context
def pending(ctx: click.Context, only: str | None, as_json: bool) -> None:
    """List the requests with no reply yet, oldest first, with how each stands.

    \b
    Example:
      edgeq admin --db home.db pending
      edgeq admin --server http://home:8471 --token-file viewer.token pending
    """
    from edgeq.cli.admin.views import format_pending

    opts = merged_options(ctx, as_json=as_json)
    api = remote(ctx, opts)
    if api is not None:
        records, now = api.admin_requests(only, replied=False)[::-1], system_clock()
    else:
        client = client_of(ctx, opts, signing=False)
        records, now = client.pending(only), client.clock()
    if opts.json:
        emit_json([r.as_dict(now) for r in records])
    else:
        click.echo(format_pending(records, now))


@admin.command("replies")
@click.option("--device", "only", type=DEVICE_NAME, help="Only this device's replies.")
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1),
              help="Show at most this many.")
@remote_options
@output_options
@click.pass_context
def replies(ctx: click.Context, only: str | None, limit: int, as_json: bool) -> None:
    """List the replies received, the latest first (--json: with every item of each reply).

    \b
    Example:
      edgeq admin --db home.db replies --device DEV1 --limit 10 --json
    """
    from edgeq.cli.admin.views import format_replies

    opts = merged_options(ctx, as_json=as_json)
    api = remote(ctx, opts)
    if api is not None:  # the API pages by time sent: the latest replies first, as here
        found = sorted(api.admin_requests(only, replied=True),
                       key=lambda r: (-(r.replied_ms or 0), r.request_id))
        records, now = found[:limit], system_clock()
    else:
        client = client_of(ctx, opts, signing=False)
        records, now = client.replies(only, limit=limit), client.clock()
    if opts.json:
        emit_json([r.as_dict(now) for r in records])
    else:
        click.echo(format_replies(records))


@admin.command("show")
@click.argument("request_id")
@click.option("--wait", "wait_ms", type=DURATION, metavar="DURATION",
              help="Wait this long for the reply (30s, 2m).")
@remote_options
@output_options
@click.pass_context
def show(ctx: click.Context, request_id: str, wait_ms: int | None, as_json: bool) -> None:
    """Show one request and its reply (waiting for it with --wait); exit 1 unless it was a success.

    \b
    Example:
      edgeq admin --db home.db show 3f2a9c0e5b7d4a1f8e6c2b0a9d8f7e6c --wait 30s
    """
    from edgeq.cli.admin.views import format_record

    opts = merged_options(ctx, wait_ms, None, as_json)
    api = remote(ctx, opts)
    if api is not None:
        (record,), now = api.wait_admin_requests([request_id], (opts.wait_ms or 0) / 1000), system_clock()
    else:
        client = client_of(ctx, opts, signing=False)
        if client.records.get(request_id) is None:
            raise click.BadParameter(f"no admin request {request_id!r} was sent from this store (see edgeq "
                                     "admin pending and replies)", ctx, param_hint="'REQUEST_ID'")
        record = client.wait_all([client.handle(request_id)], (opts.wait_ms or 0) / 1000)[request_id]
        now = client.clock()
    if opts.json:
        emit_json(record.as_dict(now))
    else:
        click.echo(format_record(record, now))
    exit_unless_success(ctx, [record])


@admin.command("resend")
@click.argument("request_id")
@remote_options
@output_options
@click.pass_context
def resend(ctx: click.Context, request_id: str, as_json: bool) -> None:
    """Send a request again, the same one (its id): a device that ran it answers from its remembered
    reply and never runs it twice; one whose expiry passed, or for a revoked device, is refused.

    \b
    Example:
      edgeq admin --db home.db resend 3f2a9c0e5b7d4a1f8e6c2b0a9d8f7e6c
    """
    opts = merged_options(ctx, as_json=as_json)
    api = remote(ctx, opts)
    if api is not None:
        record, now = api.resend_admin_request(request_id), system_clock()
    else:
        client = client_of(ctx, opts, signing=False)
        client.resend(request_id)
        record, now = client.handle(request_id).record, client.clock()
    from edgeq.cli.admin.views import request_words

    if opts.json:
        emit_json(record.as_dict(now))
    else:
        click.echo(f"Re-sent {request_words(record)} to {record.device}: request {request_id} "
                   f"({record.describe(now)})")

"""The ``edgeq queue ...`` and ``edgeq purge`` commands: queue administration."""

from __future__ import annotations

from typing import Any

import click

from edgeq.cli_common import EdgeqGroup, F, emit_json, json_flag, open_store, require_queue, wants_json
from edgeq.cli_format import (
    DURATION_LIMIT,
    LIMIT,
    Limit,
    format_duration,
    format_queue,
    format_queue_table,
    queue_json,
)
from edgeq.errors import QueueNotEmpty

__all__ = ["purge", "queue"]


def _queue_options(f: F) -> F:
    options = [
        click.option("--expiry-ms", type=DURATION_LIMIT,
                     help="Messages without their own expiry expire this long after arrival "
                          "(ms or 30s/5m/2h/1d; 'none' for never)."),
        click.option("--cap-expiry-ms", type=DURATION_LIMIT,
                     help="Cap: a new message lives at most this long on the queue, whatever "
                          "its own expiry ('none' for no cap)."),
        click.option("--max-depth", type=LIMIT, help="Most messages the queue holds ('none' for no limit)."),
        click.option("--max-message-bytes", type=LIMIT,
                     help="Largest message (data plus fields) in bytes ('none' for no limit)."),
        click.option("--depth-threshold", type=LIMIT,
                     help="Rules' on_threshold fires when a put takes the depth up to this ('none': never)."),
        click.option("--default-priority", type=click.IntRange(0, 9),
                     help="Priority of messages put without one: 0 (lowest) to 9 (highest)."),
        click.option("--ordering", type=click.Choice(["priority", "fifo"]),
                     help="Get order: 'priority' (9 first, then arrival) or 'fifo' (arrival only)."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def _attributes(**given: Any) -> dict[str, Any]:
    """The queue attributes actually given on the command line (Limit unwrapped)."""
    return {k: (v.value if isinstance(v, Limit) else v) for k, v in given.items() if v is not None}


def _value_text(key: str, value: object) -> str:
    if value is None:
        return "none"
    if key in ("expiry_ms", "cap_expiry_ms") and isinstance(value, int):
        return f"{value} ({format_duration(value)})"
    return str(value)


@click.group(cls=EdgeqGroup)
def queue() -> None:
    """Define, alter, list, show and delete queues.

    \b
    Examples:
      edgeq --db dev.db --name DEV1 queue define ORDERS --expiry-ms 1h
      edgeq --db dev.db queue list
    """


@queue.command("define")
@click.argument("name")
@_queue_options
@json_flag
@click.pass_context
def queue_define(ctx: click.Context, /, name: str, as_json: bool, **options: Any) -> None:
    """Define queue NAME (creating the store if --db does not exist yet, which needs --name).

    \b
    Examples:
      edgeq --db dev.db --name DEV1 queue define ORDERS
      edgeq --db dev.db queue define ALERTS --expiry-ms 30s --cap-expiry-ms 5m --ordering fifo
    """
    qm = open_store(ctx, create=True)
    if name in qm.queue_names():
        raise click.ClickException(
            f"queue {name!r} is already defined on {qm.name}: change it with `edgeq queue alter {name} ...`"
        )
    qm.define_queue(name, **_attributes(**options))
    if wants_json(ctx, as_json):
        emit_json(queue_json(qm.queue_attributes(name), 0))
    else:
        click.echo(f"Defined queue {name} on {qm.name}.")


@queue.command("alter")
@click.argument("name")
@_queue_options
@json_flag
@click.pass_context
def queue_alter(ctx: click.Context, /, name: str, as_json: bool, **options: Any) -> None:
    """Change some attributes of queue NAME; those not given stay as they are.

    A new --expiry-ms applies at once to messages already there without their own
    expiry; a new --cap-expiry-ms applies to later puts only.

    \b
    Examples:
      edgeq --db dev.db queue alter ORDERS --max-depth 1000
      edgeq --db dev.db queue alter ORDERS --expiry-ms none
    """
    changes = _attributes(**options)
    if not changes:
        raise click.UsageError("nothing to change: give at least one option, e.g. --max-depth 1000")
    qm = open_store(ctx)
    require_queue(qm, name)
    attrs = qm.alter_queue(name, **changes)
    if wants_json(ctx, as_json):
        emit_json(queue_json(attrs, qm.depth(name)))
    else:
        changed = ", ".join(f"{k} {_value_text(k, v)}" for k, v in changes.items())
        click.echo(f"Altered queue {name}: {changed}.")


@queue.command("list")
@json_flag
@click.pass_context
def queue_list(ctx: click.Context, as_json: bool) -> None:
    """List the queues with their depth and main attributes.

    Counting the depth discards expired messages first (MQe's "size" check).

    \b
    Example:
      edgeq --db dev.db queue list
    """
    qm = open_store(ctx)
    queues = [(qm.queue_attributes(n), qm.depth(n)) for n in qm.queue_names()]
    if wants_json(ctx, as_json):
        emit_json([queue_json(a, d) for a, d in queues])
    elif not queues:
        click.echo(f"No queues are defined on {qm.name}.")
    else:
        click.echo(format_queue_table(queues))


@queue.command("show")
@click.argument("name")
@json_flag
@click.pass_context
def queue_show(ctx: click.Context, name: str, as_json: bool) -> None:
    """Show every attribute of queue NAME, and its depth.

    \b
    Example:
      edgeq --db dev.db queue show ORDERS
    """
    qm = open_store(ctx)
    require_queue(qm, name)
    attrs, depth = qm.queue_attributes(name), qm.depth(name)
    if wants_json(ctx, as_json):
        emit_json(queue_json(attrs, depth))
    else:
        click.echo(format_queue(attrs, depth))


@queue.command("delete")
@click.argument("name")
@click.option("--purge", is_flag=True, help="Remove the messages still on the queue first.")
@json_flag
@click.pass_context
def queue_delete(ctx: click.Context, name: str, purge: bool, as_json: bool) -> None:
    """Delete queue NAME. It must be empty once expired messages are discarded (MQe's
    "delete" check), unless --purge removes its messages first.

    \b
    Examples:
      edgeq --db dev.db queue delete ALERTS
      edgeq --db dev.db queue delete ALERTS --purge
    """
    qm = open_store(ctx)
    require_queue(qm, name)
    purged = qm.purge(name) if purge else 0
    try:
        qm.delete_queue(name)
    except QueueNotEmpty:
        raise click.ClickException(
            f"queue {name!r} still holds {qm.depth(name)} unexpired message(s): get them, "
            f"or delete it with --purge"
        ) from None
    if wants_json(ctx, as_json):
        emit_json({"queue": name, "deleted": True, "purged": purged})
    else:
        click.echo(f"Deleted queue {name}" + (f" (purged {purged} message(s))." if purge else "."))


@click.command()
@click.argument("name")
@json_flag
@click.pass_context
def purge(ctx: click.Context, name: str, as_json: bool) -> None:
    """Remove every message from queue NAME; print how many.

    Locked (unconfirmed) messages are removed too.

    \b
    Example:
      edgeq --db dev.db purge ORDERS
    """
    qm = open_store(ctx)
    require_queue(qm, name)
    count = qm.purge(name)
    if wants_json(ctx, as_json):
        emit_json({"queue": name, "purged": count})
    else:
        click.echo(f"Purged {count} message(s) from {name}.")

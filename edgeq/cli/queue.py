"""``edgeq queue define|alter|list|show|stats|delete`` and ``edgeq purge``: queue administration."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click

from edgeq.cli.base import EdgeqGroup, emit_json
from edgeq.cli.format import DURATION_LIMIT, LIMIT, RULE, Limit, format_duration
from edgeq.cli.options import CREATE, F, open_store, output_options, require_queue, wants_json
from edgeq.cli.views import format_bindings, format_queue, format_queue_table, format_stats, queue_json
from edgeq.errors import QueueNotEmpty
from edgeq.manager import QueueManager

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


def _rule_option(f: F) -> F:
    return click.option(
        "--rule", "rule_specs", type=RULE, multiple=True, metavar="NAME[:JSON]",
        help="Bind a rule: its name (see `edgeq rules list`) or package.module:Class, then optionally "
             "':' and its config as a JSON object, e.g. 'dead-letter:{\"queue\":\"DLQ\"}'. "
             "Repeatable: the rules run in the order given.",
    )(f)


def _check_rules(specs: Sequence[tuple[str, dict[str, Any]]]) -> None:
    """Load and configure each rule before the store is opened, so a typo creates nothing."""
    from edgeq.rules.registry import build_rule

    for name, config in specs:
        build_rule(name, config)


def _echo_bindings(qm: QueueManager, name: str, first: str) -> None:
    lines = format_bindings(qm.queue_bindings(name)).splitlines()
    click.echo(first)
    click.echo("\n".join(f"  {line}" for line in lines))


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
    """Define, alter, list, show and delete queues, and read their counters.

    \b
    Examples:
      edgeq --db dev.db --name DEV1 queue define ORDERS --expiry-ms 1h --rule counters
      edgeq --db dev.db queue list
      edgeq --db dev.db queue stats ORDERS
    """


@queue.command("define")
@click.argument("name")
@_queue_options
@_rule_option
@click.option("--encryption", type=click.Choice(["aes-256-gcm"]), default=None,
              help="Seal message data and fields in the store (needs the store key: $EDGEQ_STORE_KEY_FILE).")
@output_options
@click.pass_context
def queue_define(
    ctx: click.Context, /, name: str, rule_specs: tuple[tuple[str, dict[str, Any]], ...], encryption: str | None,
    as_json: bool, **options: Any,
) -> None:
    """Define queue NAME (creating the store if --db does not exist yet, which needs --name).

    Each --rule binds a rule to the queue; the bindings are stored with it and
    come back whenever the store is opened. A rule checks its config now: if any
    is wrong, nothing is defined.

    \b
    Examples:
      edgeq --db dev.db --name DEV1 queue define ORDERS
      edgeq --db dev.db queue define ALERTS --expiry-ms 30s --cap-expiry-ms 5m --ordering fifo
      edgeq --db dev.db queue define DLQ
      edgeq --db dev.db queue define SENSORS --rule counters --rule 'dead-letter:{"queue":"DLQ"}'
      edgeq --db dev.db queue define SENSORS2 --depth-threshold 500 --rule 'log:{"events":["threshold"]}'
      EDGEQ_STORE_KEY_FILE=store.key edgeq --db dev.db queue define PAYMENTS --encryption aes-256-gcm
    """
    _check_rules(rule_specs)
    qm = open_store(ctx, CREATE)
    if name in qm.queue_names():
        raise click.ClickException(
            f"queue {name!r} is already defined on {qm.name}: change it with `edgeq queue alter {name} ...`"
        )
    qm.define_queue(name, **_attributes(**options), rules=list(rule_specs), encryption=encryption)
    if wants_json(ctx, as_json):
        emit_json(queue_json(qm.queue_attributes(name), 0, qm.queue_bindings(name)))
    elif rule_specs:
        _echo_bindings(qm, name, f"Defined queue {name} on {qm.name}, with rules (run in this order):")
    else:
        click.echo(f"Defined queue {name} on {qm.name}.")


@queue.command("alter")
@click.argument("name")
@_queue_options
@_rule_option
@click.option("--no-rules", is_flag=True, help="Remove every rule binding from the queue.")
@output_options
@click.pass_context
def queue_alter(
    ctx: click.Context, /, name: str, rule_specs: tuple[tuple[str, dict[str, Any]], ...], no_rules: bool,
    as_json: bool, **options: Any,
) -> None:
    """Change some attributes of queue NAME; those not given stay as they are.

    A new --expiry-ms applies at once to messages already there without their own
    expiry; a new --cap-expiry-ms applies to later puts only. --rule options
    replace all the queue's rule bindings (give every rule it should keep);
    --no-rules removes them.

    \b
    Examples:
      edgeq --db dev.db queue alter ORDERS --max-depth 1000
      edgeq --db dev.db queue alter ORDERS --expiry-ms none
      edgeq --db dev.db queue alter ORDERS --rule counters --rule 'dead-letter:{"queue":"DLQ"}'
      edgeq --db dev.db queue alter ORDERS --no-rules
    """
    if rule_specs and no_rules:
        raise click.UsageError("give --rule (to replace the queue's rules) or --no-rules (to remove them), not both")
    changes = _attributes(**options)
    if not changes and not rule_specs and not no_rules:
        raise click.UsageError(
            "nothing to change: give at least one option, e.g. --max-depth 1000 or --rule counters"
        )
    qm = open_store(ctx)
    require_queue(qm, name)
    rules = list(rule_specs) if rule_specs or no_rules else None
    attrs = qm.alter_queue(name, **changes, **({} if rules is None else {"rules": rules}))
    if wants_json(ctx, as_json):
        emit_json(queue_json(attrs, qm.depth(name), qm.queue_bindings(name)))
        return
    if changes:
        changed = ", ".join(f"{k} {_value_text(k, v)}" for k, v in changes.items())
        click.echo(f"Altered queue {name}: {changed}.")
    if no_rules:
        click.echo(f"Removed every rule binding from {name}.")
    elif rules is not None:
        _echo_bindings(qm, name, f"Replaced the rules of {name}; now (run in this order):")


@queue.command("list")
@output_options
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
        emit_json([queue_json(a, d, qm.queue_bindings(a.name)) for a, d in queues])
    elif not queues:
        click.echo(f"No queues are defined on {qm.name}.")
    else:
        click.echo(format_queue_table(queues))


@queue.command("show")
@click.argument("name")
@output_options
@click.pass_context
def queue_show(ctx: click.Context, name: str, as_json: bool) -> None:
    """Show every attribute of queue NAME, its depth, and its rule bindings in the order they run.

    A binding whose plugin failed to load is marked BROKEN, with the reason; its
    events wait (see `edgeq rules failures`) until it loads again.

    \b
    Example:
      edgeq --db dev.db queue show ORDERS
    """
    qm = open_store(ctx)
    require_queue(qm, name)
    attrs, depth, bindings = qm.queue_attributes(name), qm.depth(name), qm.queue_bindings(name)
    if wants_json(ctx, as_json):
        emit_json(queue_json(attrs, depth, bindings))
    else:
        click.echo(format_queue(attrs, depth, bindings))


@queue.command("stats")
@click.argument("name")
@output_options
@click.pass_context
def queue_stats(ctx: click.Context, name: str, as_json: bool) -> None:
    """Show the counters of queue NAME, kept by the counters and dead-letter rules.

    Counters: added, got, deleted, purged, expired and expired.<check point>,
    duplicates (counters rule), dead_lettered (dead-letter rule).

    \b
    Examples:
      edgeq --db dev.db queue stats ORDERS
      edgeq --db dev.db queue stats ORDERS --json
    """
    qm = open_store(ctx)
    require_queue(qm, name)
    stats = qm.queue_stats(name)
    if wants_json(ctx, as_json):
        emit_json({"queue": name, "counters": stats})
    elif stats:
        click.echo(format_stats(stats))
    elif any(b.name == "counters" for b in qm.queue_bindings(name)):
        click.echo(f"No counters on {name} yet: nothing has happened since the counters rule was bound.")
    else:
        click.echo(
            f"No counters on {name}: bind the counters rule to keep them "
            f"(`edgeq queue alter {name} --rule counters ...`, listing every rule the queue should keep)."
        )


@queue.command("delete")
@click.argument("name")
@click.option("--purge", is_flag=True, help="Remove the messages still on the queue first.")
@output_options
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
@output_options
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

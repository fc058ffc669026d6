"""``edgeq queue define|alter|list|show|stats|delete`` and ``edgeq purge``: queue administration."""

from __future__ import annotations

from typing import Any

import click

from edgeq.cli.attributes import (
    check_backout,
    check_kind,
    check_rules,
    compression_option,
    given_attributes,
    kind_options,
    queue_options,
    refusal_option,
    rule_option,
)
from edgeq.cli.base import EdgeqGroup, emit_json
from edgeq.cli.format import format_duration, format_size
from edgeq.cli.options import (
    CREATE,
    open_store,
    output_options,
    remote_api,
    remote_options,
    require_queue,
    wants_json,
)
from edgeq.cli.params import QUEUE_NAME, Limit
from edgeq.cli.views import format_bindings, format_queue, format_queue_table, format_stats, queue_json
from edgeq.errors import QueueNotEmpty
from edgeq.manager import QueueManager
from edgeq.queues.attributes import QueueAttributes, QueueUsage

__all__ = ["purge", "queue"]


def _echo_bindings(qm: QueueManager, name: str, first: str) -> None:
    lines = format_bindings(qm.queue_bindings(name)).splitlines()
    click.echo(first)
    click.echo("\n".join(f"  {line}" for line in lines))


def _value_text(key: str, value: object) -> str:
    if value is None:
        return "default" if key == "refusal_limit" else "none"
    if key in ("expiry_ms", "cap_expiry_ms", "redelivery_delay_ms", "max_redelivery_delay_ms") and isinstance(
        value, int
    ):
        return f"{value} ({format_duration(value)})"
    if key == "max_bytes" and isinstance(value, int) and value >= 1024:
        return f"{value} ({format_size(value)})"
    return str(value)


def _defined_text(attrs: QueueAttributes, qm_name: str) -> str:
    if attrs.kind == "remote":
        return (f"Defined remote queue {attrs.name} on {qm_name}, transmitted to "
                f"{attrs.target_qmgr}/{attrs.target_queue} ({attrs.mode})")
    if attrs.kind == "home":
        return f"Defined home-server queue {attrs.name} on {qm_name}, filled from {attrs.server}"
    return f"Defined queue {attrs.name} on {qm_name}"


@click.group(cls=EdgeqGroup)
def queue() -> None:
    """Define, alter, list, show and delete queues, and read their counters.

    \b
    Example:
      edgeq --db dev.db --name DEV1 queue define ORDERS --expiry-ms 1h --rule counters
    """


@queue.command("define")
@click.argument("name", type=QUEUE_NAME)
@queue_options
@kind_options
@refusal_option
@compression_option
@rule_option
@click.option("--encryption", type=click.Choice(["aes-256-gcm"]), default=None,
              help="Seal message data and fields in the store (needs the store key: $EDGEQ_STORE_KEY_FILE).")
@output_options
@click.pass_context
def queue_define(
    ctx: click.Context, /, name: str, rule_specs: tuple[tuple[str, dict[str, Any]], ...],
    encryption: str | None, remote: bool, target_qmgr: str | None, target_queue: str | None, mode: str | None,
    home_server: str | None, refusal_limit: Limit | None, compression: str | None, as_json: bool,
    **options: Any,
) -> None:
    """Define queue NAME (creating the store if --db does not exist yet, which needs --name).

    \b
    Examples:
      edgeq --db dev.db --name DEV1 queue define ORDERS
      edgeq --db dev.db queue define SENSORS --rule counters --rule 'dead-letter:{"queue":"DLQ"}'
      edgeq --db dev.db queue define OUT --remote --target-qmgr HOME --target-queue ORDERS --refusal-limit 5
      edgeq --db dev.db queue define INBOX --home-server HOME
    """
    remote_only = {"--target-qmgr": target_qmgr, "--target-queue": target_queue, "--mode": mode,
                   "--refusal-limit": refusal_limit}
    check_kind(remote, home_server, remote_only, options["ordering"])
    if compression not in (None, "none") and not remote and home_server is None:
        raise click.UsageError("--compression: only for remote and home-server queues (add --remote or "
                               "--home-server): it says how their batches cross the wire")
    codec = None if compression in (None, "none") else compression
    check_backout(remote, options["backout_threshold"], options["backout_queue"])
    check_rules(rule_specs)
    qm = open_store(ctx, CREATE)
    if name in qm.queue_names():
        raise click.ClickException(
            f"queue {name!r} is already defined on {qm.name}: change it with `edgeq queue alter {name} ...`"
        )
    attrs, rules = given_attributes(**options), list(rule_specs)
    if target_qmgr is not None:  # --remote (checked above)
        qm.define_remote_queue(
            name, target_qmgr=target_qmgr, target_queue=target_queue,
            mode="sync" if mode == "sync" else "async", rules=rules, encryption=encryption,
            refusal_limit=None if refusal_limit is None else refusal_limit.value, compression=codec, **attrs,
        )
    elif home_server is not None:
        qm.define_home_server_queue(name, server=home_server, rules=rules, encryption=encryption,
                                    compression=codec, **attrs)
    else:
        qm.define_queue(name, **attrs, rules=rules, encryption=encryption)
    if wants_json(ctx, as_json):
        emit_json(queue_json(qm.queue_attributes(name), qm.queue_usage(name), qm.queue_bindings(name)))
        return
    defined = _defined_text(qm.queue_attributes(name), qm.name)
    if rule_specs:
        _echo_bindings(qm, name, f"{defined}, with rules (run in this order):")
    else:
        click.echo(f"{defined}.")


@queue.command("alter")
@click.argument("name", type=QUEUE_NAME)
@queue_options
@refusal_option
@compression_option
@rule_option
@click.option("--no-rules", is_flag=True, help="Remove every rule binding from the queue.")
@click.option("--no-backout", is_flag=True,
              help="Stop moving poison messages: no backout threshold nor queue.")
@output_options
@click.pass_context
def queue_alter(
    ctx: click.Context, /, name: str, rule_specs: tuple[tuple[str, dict[str, Any]], ...], no_rules: bool,
    no_backout: bool, as_json: bool, **options: Any,
) -> None:
    """Change some attributes of queue NAME; those not given stay as they are.

    --rule options replace all the queue's rule bindings (give every rule it should keep).

    \b
    Examples:
      edgeq --db dev.db queue alter ORDERS --max-depth 1000
      edgeq --db dev.db queue alter ORDERS --rule counters --rule 'dead-letter:{"queue":"DLQ"}'
    """
    if rule_specs and no_rules:
        raise click.UsageError("give --rule (to replace the queue's rules) or --no-rules (to remove them), "
                               "not both")
    changes = given_attributes(**options)
    if changes.get("compression") == "none":
        changes["compression"] = None
    if no_backout:
        if {"backout_threshold", "backout_queue"} & changes.keys():
            raise click.UsageError("give --no-backout, or --backout-threshold/--backout-queue, not both")
        changes.update(backout_threshold=None, backout_queue=None)
    if not changes and not rule_specs and not no_rules:
        raise click.UsageError(
            "nothing to change: give at least one option, e.g. --max-depth 1000 or --rule counters"
        )
    qm = open_store(ctx)
    require_queue(qm, name)
    rules = list(rule_specs) if rule_specs or no_rules else None
    attrs = qm.alter_queue(name, **changes, **({} if rules is None else {"rules": rules}))
    if wants_json(ctx, as_json):
        emit_json(queue_json(attrs, qm.queue_usage(name), qm.queue_bindings(name)))
        return
    if changes:
        changed = ", ".join(f"{k} {_value_text(k, v)}" for k, v in changes.items())
        click.echo(f"Altered queue {name}: {changed}.")
    if no_rules:
        click.echo(f"Removed every rule binding from {name}.")
    elif rules is not None:
        _echo_bindings(qm, name, f"Replaced the rules of {name}; now (run in this order):")


@queue.command("list")
@remote_options
@output_options
@click.pass_context
def queue_list(ctx: click.Context, as_json: bool) -> None:
    """List the queues with their depth, bytes held, main attributes and kind.

    \b
    Examples:
      edgeq --db dev.db queue list
      edgeq queue list --server http://home:8471 --token-file viewer.token
    """
    api = remote_api(ctx)
    if api is not None:
        queues, where = api.queues(), api.url
    else:
        qm = open_store(ctx)
        queues = [(qm.queue_attributes(n), qm.queue_usage(n), qm.queue_bindings(n)) for n in qm.queue_names()]
        where = qm.name
    if wants_json(ctx, as_json):
        emit_json([queue_json(a, u, b) for a, u, b in queues])
    elif not queues:
        click.echo(f"No queues are defined on {where}.")
    else:
        click.echo(format_queue_table([(a, u) for a, u, _ in queues]))


@queue.command("show")
@click.argument("name", type=QUEUE_NAME)
@remote_options
@output_options
@click.pass_context
def queue_show(ctx: click.Context, name: str, as_json: bool) -> None:
    """Show every attribute of queue NAME, its depth and bytes, and its rule bindings in order.

    \b
    Examples:
      edgeq --db dev.db queue show ORDERS
      edgeq queue show ORDERS --server http://home:8471 --token-file viewer.token
    """
    api = remote_api(ctx)
    if api is not None:
        attrs, usage, bindings = api.queue(name)
    else:
        qm = open_store(ctx)
        require_queue(qm, name)
        attrs, usage, bindings = qm.queue_attributes(name), qm.queue_usage(name), qm.queue_bindings(name)
    if wants_json(ctx, as_json):
        emit_json(queue_json(attrs, usage, bindings))
    else:
        click.echo(format_queue(attrs, usage, bindings))


def _holds_text(usage: QueueUsage) -> str:
    limits = [f"max_depth {usage.max_depth}"] if usage.max_depth is not None else []
    limits += [f"max_bytes {usage.max_bytes}"] if usage.max_bytes is not None else []
    bound = f" (of {', '.join(limits)}; on_full {usage.on_full})" if limits else ""
    return f"{usage.name} holds {usage.depth} message(s), {usage.bytes} byte(s){bound}."


@queue.command("stats")
@click.argument("name", type=QUEUE_NAME)
@remote_options
@output_options
@click.pass_context
def queue_stats(ctx: click.Context, name: str, as_json: bool) -> None:
    """Show what queue NAME holds and its counters (kept by the counters and dead-letter rules).

    \b
    Examples:
      edgeq --db dev.db queue stats ORDERS
      edgeq queue stats ORDERS --server http://home:8471 --token-file viewer.token
    """
    api = remote_api(ctx)
    if api is not None:
        (_, usage, bindings), stats = api.queue_stats(name)
    else:
        qm = open_store(ctx)
        require_queue(qm, name)
        usage, stats, bindings = qm.queue_usage(name), qm.queue_stats(name), qm.queue_bindings(name)
    if wants_json(ctx, as_json):
        emit_json({"queue": name, "depth": usage.depth, "bytes": usage.bytes, "counters": stats})
        return
    click.echo(_holds_text(usage))
    if stats:
        click.echo(format_stats(stats))
    elif any(b.name == "counters" for b in bindings):
        click.echo(f"No counters on {name} yet: nothing has happened since the counters rule was bound.")
    else:
        click.echo(
            f"No counters on {name}: bind the counters rule to keep them "
            f"(`edgeq queue alter {name} --rule counters ...`, listing every rule the queue should keep)."
        )


@queue.command("delete")
@click.argument("name", type=QUEUE_NAME)
@click.option("--purge", is_flag=True, help="Remove the messages still on the queue first.")
@output_options
@click.pass_context
def queue_delete(ctx: click.Context, name: str, purge: bool, as_json: bool) -> None:
    """Delete queue NAME: it must be empty once expired messages are discarded, unless --purge.

    \b
    Example:
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
@click.argument("name", type=QUEUE_NAME)
@remote_options
@output_options
@click.pass_context
def purge(ctx: click.Context, name: str, as_json: bool) -> None:
    """Remove every message from queue NAME, locked (unconfirmed) ones too; print how many.

    \b
    Examples:
      edgeq --db dev.db purge ORDERS
      edgeq purge ORDERS --server http://home:8471 --token-file ops.token
    """
    api = remote_api(ctx)
    if api is not None:
        count = api.purge(name)
    else:
        qm = open_store(ctx)
        require_queue(qm, name)
        count = qm.purge(name)
    if wants_json(ctx, as_json):
        emit_json({"queue": name, "purged": count})
    else:
        click.echo(f"Purged {count} message(s) from {name}.")

"""``edgeq rules list|failures|retry``: installed rules, failed deliveries and their retry."""

from __future__ import annotations

import click

from edgeq.cli.base import EdgeqGroup, emit_json
from edgeq.cli.options import open_store, output_options, remote_api, remote_options, wants_json
from edgeq.cli.views import failure_json, format_failures, format_rules_table

__all__ = ["rules"]


@click.group(cls=EdgeqGroup)
def rules() -> None:
    """List installed rules; show and retry rule deliveries that failed (bind with queue define --rule).

    \b
    Example:
      edgeq rules list
    """


@rules.command("list")
@output_options
@click.pass_context
def rules_list(ctx: click.Context, as_json: bool) -> None:
    """List the installed rules (the edgeq.rules entry points): name, package, summary.

    \b
    Example:
      edgeq rules list
    """
    from edgeq.rules.registry import installed_rules

    found = installed_rules()
    if wants_json(ctx, as_json):
        emit_json([{"name": r.name, "package": r.package, "summary": r.summary, "target": r.target}
                   for r in found])
    elif not found:
        click.echo("No rules are installed.")
    else:
        click.echo(format_rules_table(found))


@rules.command("failures")
@click.option("--parked", is_flag=True,
              help="Only deliveries parked after their last attempt "
                   "(retried only by `rules retry --parked`).")
@click.option("--waiting", is_flag=True, help="Only deliveries waiting for their next retry.")
@remote_options
@output_options
@click.pass_context
def rules_failures(ctx: click.Context, parked: bool, waiting: bool, as_json: bool) -> None:
    """List the durable rule events whose delivery to a rule raised: waiting for a retry, or parked.

    \b
    Example:
      edgeq --db dev.db rules failures --parked --json
      edgeq rules failures --server http://home:8471 --token-file viewer.token
    """
    if parked and waiting:
        raise click.UsageError("give --parked or --waiting (or neither, for both), not both")
    wanted = True if parked else False if waiting else None
    api = remote_api(ctx)
    failures = api.rule_failures(wanted) if api is not None else open_store(ctx).rule_failures(parked=wanted)
    if wants_json(ctx, as_json):
        emit_json([failure_json(f) for f in failures])
    elif not failures:
        none = ("parked rule failures" if parked else "rule failures waiting for a retry" if waiting
                else "rule failures")
        click.echo(f"No {none}.")
    else:
        click.echo(format_failures(failures))


@rules.command("retry")
@click.option("--parked", is_flag=True, help="Give parked deliveries a fresh round of attempts first.")
@click.option("--event", "event_id", type=click.IntRange(min=1), metavar="ID",
              help="Only this event's deliveries (ids from `rules failures`).")
@remote_options
@output_options
@click.pass_context
def rules_retry(ctx: click.Context, parked: bool, event_id: int | None, as_json: bool) -> None:
    """Retry failed rule deliveries now, without waiting for their backoff; print what still fails.
    With --server: one parked event (--parked --event ID); the server retries waiting ones itself.

    \b
    Examples:
      edgeq --db dev.db rules retry --parked --event 42
      edgeq rules retry --parked --event 42 --server http://home:8471 --token-file ops.token
    """
    api = remote_api(ctx)
    if api is not None:
        if not (parked and event_id is not None):
            raise click.UsageError("with --server, give --parked --event ID: the API retries one parked "
                                   "event (the server retries waiting ones on their backoff)")
        succeeded = int(api.retry_rule_event(event_id)["succeeded"])
        left = api.rule_failures(None)
    else:
        qm = open_store(ctx)
        candidates = qm.rule_failures(parked=None if parked else False)
        if event_id is not None and not any(f.event_id == event_id for f in candidates):
            which = "rule failure" if parked else "waiting rule failure (add --parked for parked ones)"
            raise click.ClickException(f"no {which} for event {event_id}: see `edgeq rules failures`")
        succeeded = qm.retry_rule_failures(parked=parked, event_id=event_id)
        left = qm.rule_failures()
    still_parked = sum(f.parked for f in left)
    if wants_json(ctx, as_json):
        emit_json({"succeeded": succeeded, "waiting": len(left) - still_parked, "parked": still_parked})
        return
    click.echo(f"Retried: {succeeded} deliver{'y' if succeeded == 1 else 'ies'} succeeded.")
    if left:
        click.echo(
            f"Still failing: {len(left) - still_parked} waiting, {still_parked} parked "
            "(see `edgeq rules failures`)."
        )
    else:
        # Opening the store already retries what is due, so the count can miss those.
        click.echo("No rule failures are left.")

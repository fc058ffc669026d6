"""The commands ``edgeq admin DEVICE`` runs on a device: ``queue``, ``sweep``, ``rules``, ``sync-status``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click

from edgeq.cli.admin.group import admin, confirm, depth_line, merged_options, request_options, send, stack
from edgeq.cli.attributes import (
    check_backout,
    check_kind,
    given_attributes,
    kind_options,
    queue_options,
    refusal_option,
    rule_option,
)
from edgeq.cli.base import EdgeqGroup
from edgeq.cli.params import QUEUE_NAME, Limit

__all__ = ["queue", "rules", "sweep", "sync_status"]


@admin.group("queue", cls=EdgeqGroup)
def queue() -> None:
    """A device's queues: list, show, depth, define, alter, delete, purge."""


@queue.command("list")
@request_options
@click.pass_context
def queue_list(ctx: click.Context, /, **request: Any) -> None:
    """List the device's queues with their kind, depth and bytes (expired messages purged first).

    \b
    Example:
      edgeq admin --db home.db --key operator.key --all-devices queue list --wait 1m
    """
    send(ctx, "inquire-all", **request)


@queue.command("show")
@click.argument("name", type=QUEUE_NAME)
@request_options
@click.pass_context
def queue_show(ctx: click.Context, /, name: str, **request: Any) -> None:
    """Show a queue: attributes, depth, bytes, the oldest message's age (expired ones purged first).

    \b
    Example:
      edgeq admin --db home.db --key operator.key DEV1 queue show ORDERS --wait 30s --json
    """
    send(ctx, "inquire-queue", name, **request)


@queue.command("depth")
@click.argument("name", type=QUEUE_NAME)
@request_options
@click.pass_context
def queue_depth(ctx: click.Context, /, name: str, **request: Any) -> None:
    """How many messages a queue holds (MQe's size inquiry: expired messages are purged first).

    \b
    Example:
      edgeq admin --db home.db --key operator.key DEV1 queue depth ORDERS --wait 30s
    """
    send(ctx, "inquire-queue", name, show=depth_line, **request)


_define_options = stack(  # the options of `edgeq queue define`: the device takes what the local command takes
    queue_options, kind_options, refusal_option, rule_option,
    click.option("--encryption", type=click.Choice(["aes-256-gcm"]), default=None,
                 help="Seal message data and fields in the device's store (it needs its store key)."),
)


@queue.command("define")
@click.argument("name", type=QUEUE_NAME)
@_define_options
@request_options
@click.pass_context
def queue_define(ctx: click.Context, /, name: str, rule_specs: tuple[tuple[str, dict[str, Any]], ...],
                 encryption: str | None, remote: bool, target_qmgr: str | None, target_queue: str | None,
                 mode: str | None, home_server: str | None, refusal_limit: Limit | None, wait_ms: int | None,
                 expires_ms: int | None, as_json: bool, **options: Any) -> None:
    """Define queue NAME on the device, with the options of `edgeq queue define`.

    \b
    Example:
      edgeq admin --db home.db --key operator.key DEV1 queue define ALERTS --expiry-ms 60000 --wait 30s
    """
    remote_only = dict(target_qmgr=target_qmgr, target_queue=target_queue, mode=mode,
                       refusal_limit=refusal_limit)
    # The same checks as `edgeq queue define` (a usage mistake is found here, not on the device).
    check_kind(remote, home_server, {f"--{k.replace('_', '-')}": v for k, v in remote_only.items()},
                options["ordering"])
    check_backout(remote, options["backout_threshold"], options["backout_queue"])
    params: dict[str, object] = dict(given_attributes(**options))
    if remote:
        params.update(given_attributes(kind="remote", **remote_only))
    elif home_server is not None:
        params.update(kind="home", server=home_server)
    if rule_specs:
        params["rules"] = _rules(rule_specs)
    if encryption is not None:
        params["encryption"] = encryption
    send(ctx, "define-queue", name, params, wait_ms=wait_ms, expires_ms=expires_ms, as_json=as_json)


_alter_options = stack(  # the options of `edgeq queue alter`
    queue_options, refusal_option, rule_option,
    click.option("--no-rules", is_flag=True, help="Remove every rule binding from the queue."),
    click.option("--no-backout", is_flag=True,
                 help="Stop moving poison messages: no backout threshold nor queue."),
)


@queue.command("alter")
@click.argument("name", type=QUEUE_NAME)
@_alter_options
@request_options
@click.pass_context
def queue_alter(ctx: click.Context, /, name: str, rule_specs: tuple[tuple[str, dict[str, Any]], ...],
                no_rules: bool, no_backout: bool, wait_ms: int | None, expires_ms: int | None, as_json: bool,
                **options: Any) -> None:
    """Change some attributes of queue NAME on the device, with the options of `edgeq queue alter`.

    \b
    Example:
      edgeq admin --db home.db --key operator.key DEV1 queue alter ORDERS --max-depth 1000 --wait 30s
    """
    if rule_specs and no_rules:
        raise click.UsageError("give --rule (to replace the queue's rules) or --no-rules (to remove them), "
                               "not both")
    params: dict[str, object] = dict(given_attributes(**options))
    if no_backout:
        if {"backout_threshold", "backout_queue"} & params.keys():
            raise click.UsageError("give --no-backout, or --backout-threshold/--backout-queue, not both")
        params.update(backout_threshold=None, backout_queue=None)
    if rule_specs or no_rules:
        params["rules"] = _rules(rule_specs)
    if not params:
        raise click.UsageError("nothing to change: give at least one option, e.g. --max-depth 1000")
    send(ctx, "alter-queue", name, params, wait_ms=wait_ms, expires_ms=expires_ms, as_json=as_json)


def _rules(specs: Sequence[tuple[str, dict[str, Any]]]) -> list[object]:
    return [name if not config else [name, config] for name, config in specs]


@queue.command("delete")
@click.argument("name", type=QUEUE_NAME)
@click.option("--yes", is_flag=True, help="With --all-devices: delete without asking first.")
@request_options
@click.pass_context
def queue_delete(ctx: click.Context, /, name: str, yes: bool, **request: Any) -> None:
    """Delete an empty queue on the device (expired messages purged first); --all-devices asks first.

    \b
    Example:
      edgeq admin --db home.db --key operator.key --all-devices queue delete OLD --yes
    """
    if merged_options(ctx).all_devices and not yes:
        confirm(f"Delete queue {name} on every device this server knows?")
    send(ctx, "delete-queue", name, **request)


@queue.command("purge")
@click.argument("name", type=QUEUE_NAME)
@request_options
@click.pass_context
def queue_purge(ctx: click.Context, /, name: str, **request: Any) -> None:
    """Remove every message from a queue on the device (rules see reason 'purged').

    \b
    Example:
      edgeq admin --db home.db --key operator.key DEV1 queue purge ORDERS --wait 30s
    """
    send(ctx, "purge", name, **request)


# `edgeq admin DEV1 purge Q` is `queue purge` under a shorter name (as `edgeq purge` is locally).
admin.add_command(queue_purge, "purge")


@admin.command("sweep")
@click.argument("name", type=QUEUE_NAME, required=False)
@request_options
@click.pass_context
def sweep(ctx: click.Context, /, name: str | None, **request: Any) -> None:
    """Discard expired messages now on the device, from queue NAME or from every queue.

    \b
    Example:
      edgeq admin --db home.db --key operator.key --all-devices sweep --wait 1m
    """
    send(ctx, "sweep", name, **request)


@admin.group("rules", cls=EdgeqGroup)
def rules() -> None:
    """A device's rule bindings and failures, and retrying failed rule events."""


@rules.command("list")
@click.argument("name", type=QUEUE_NAME, required=False)
@request_options
@click.pass_context
def rules_list(ctx: click.Context, /, name: str | None, **request: Any) -> None:
    """The rules bound to queue NAME (or to every queue that has some) and their failures.

    \b
    Example:
      edgeq admin --db home.db --key operator.key DEV1 rules list ORDERS --wait 30s
    """
    send(ctx, "inquire-rules", name, **request)


@rules.command("retry")
@click.option("--parked", is_flag=True, help="Retry the parked failures too (given up after their retries).")
@click.option("--event-id", type=click.IntRange(1), help="Only this failed event.")
@request_options
@click.pass_context
def rules_retry(ctx: click.Context, /, parked: bool, event_id: int | None, **request: Any) -> None:
    """Retry the device's failed rule events now.

    \b
    Example:
      edgeq admin --db home.db --key operator.key DEV1 rules retry --parked --wait 30s
    """
    params = {"parked": parked, **({} if event_id is None else {"event_id": event_id})}
    send(ctx, "retry-rules", None, params, **request)


@admin.command("sync-status")
@request_options
@click.pass_context
def sync_status(ctx: click.Context, /, **request: Any) -> None:
    """How the device's remote and home-server queues sync (its `edgeq sync status`).

    \b
    Example:
      edgeq admin --db home.db --key operator.key --all-devices sync-status --wait 1m
    """
    send(ctx, "inquire-sync", **request)

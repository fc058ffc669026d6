"""``edgeq dlq browse|resend|delete|use``: the store's dead-letter queue."""

from __future__ import annotations

import click

from edgeq.cli.base import EdgeqGroup, emit_json
from edgeq.cli.messages import messages_text
from edgeq.cli.options import open_store, output_options, remote_api, remote_options, wants_json
from edgeq.cli.params import QUEUE_NAME
from edgeq.manager import QueueManager
from edgeq.queues.deadletter import Resent
from edgeq.types import DEFAULT_DEAD_LETTER_QUEUE
from edgeq.uid import MessageUID

__all__ = ["dlq"]

_ORIGINAL = click.option("--queue", "original", type=QUEUE_NAME, metavar="QUEUE",
                         help="Only the messages that left this queue (their dlq.queue field).")
_ALL = click.option("--all", "every", is_flag=True,
                    help="Every message of the dead-letter queue (instead of UID).")


@click.group(cls=EdgeqGroup)
def dlq() -> None:
    """The dead-letter queue: messages that could not be delivered, with dlq.* fields saying why.

    \b
    Example:
      edgeq --db dev.db dlq resend --all --queue METRICS
    """


@dlq.command("browse")
@_ORIGINAL
@click.option("--limit", type=click.IntRange(min=1), help="Show at most this many.")
@remote_options
@output_options
@click.pass_context
def dlq_browse(ctx: click.Context, original: str | None, limit: int | None, as_json: bool) -> None:
    """Show the dead-letter queue's messages with their dlq.* fields, without taking them.

    \b
    Examples:
      edgeq --db dev.db --json dlq browse --queue METRICS --limit 10
      edgeq dlq browse --queue METRICS --server http://home:8471 --token-file viewer.token
    """
    api = remote_api(ctx)
    if api is not None:
        found, name = api.dlq_browse(original, limit), api.dead_letter_queue()
    else:
        qm = open_store(ctx)
        found, name = qm.dlq_browse(queue=original, limit=limit), qm.dead_letter_queue()
    empty = f"No messages on dead-letter queue {name}" + (
        f" that left {original}." if original else ".")
    click.echo(messages_text(found, wants_json(ctx, as_json), empty))


@dlq.command("resend")
@click.argument("uid", required=False, metavar="UID")
@_ALL
@_ORIGINAL
@remote_options
@output_options
@click.pass_context
def dlq_resend(ctx: click.Context, uid: str | None, every: bool, original: str | None, as_json: bool) -> None:
    """Move UID (or --all) back to the queue it left, its dlq.* fields removed (once the cause is fixed).

    \b
    Examples:
      edgeq --db dev.db dlq resend 'DEV1:k3x9qa.1763683200000000'
      edgeq dlq resend 'DEV1:k3x9qa.1763683200000000' --server http://home:8471 --token-file ops.token

    Exit status: 1 when a message cannot go back (it stays, listed with why).
    """
    uids = _chosen(uid, every)
    api = remote_api(ctx)
    if api is not None:
        resent = api.dlq_resend(_one_remote(uid, original))
        if wants_json(ctx, as_json):
            emit_json({"resent": resent, "kept": []})
        else:
            click.echo(f"Re-sent {len(resent)} message(s) from dead-letter queue {api.dead_letter_queue()}.")
        return
    qm = open_store(ctx)
    result = qm.dlq_resend(uids, queue=original)
    if wants_json(ctx, as_json):
        emit_json({"resent": [str(u) for u in result.moved], "kept": [{"uid": str(u), "why": why}
                                                                     for u, why in result.kept]})
    else:
        click.echo(f"Re-sent {len(result.moved)} message(s) from dead-letter queue {qm.dead_letter_queue()}.")
    _fail_if_kept(qm, result)


@dlq.command("delete")
@click.argument("uid", required=False, metavar="UID")
@_ALL
@remote_options
@output_options
@click.pass_context
def dlq_delete(ctx: click.Context, uid: str | None, every: bool, as_json: bool) -> None:
    """Delete UID (or --all) from the dead-letter queue, for good.

    \b
    Examples:
      edgeq --db dev.db dlq delete --all
      edgeq dlq delete 'DEV1:k3x9qa.1763683200000000' --server http://home:8471 --token-file ops.token
    """
    uids = _chosen(uid, every)
    api = remote_api(ctx)
    if api is not None:
        deleted, name = api.dlq_delete(_one_remote(uid, None)), api.dead_letter_queue()
    else:
        qm = open_store(ctx)
        deleted, name = qm.dlq_delete(uids), qm.dead_letter_queue()
    if wants_json(ctx, as_json):
        emit_json({"deleted": deleted, "queue": name})
    else:
        click.echo(f"Deleted {deleted} message(s) from dead-letter queue {name}.")


@dlq.command("use")
@click.argument("queue_name", required=False, metavar="QUEUE", type=QUEUE_NAME)
@click.option("--default", "default", is_flag=True, help="Back to SYSTEM.DEAD.LETTER.QUEUE.")
@output_options
@click.pass_context
def dlq_use(ctx: click.Context, queue_name: str | None, default: bool, as_json: bool) -> None:
    """Name the store's dead-letter queue (QUEUE), or go back to the --default; without either, print it.

    \b
    Example:
      edgeq --db dev.db dlq use MY.DLQ
    """
    if queue_name is not None and default:
        raise click.UsageError("give QUEUE or --default, not both")
    qm = open_store(ctx)
    if queue_name is not None or default:
        qm.set_dead_letter_queue(queue_name)
    name = qm.dead_letter_queue()
    defined = name in qm.queue_names()
    if wants_json(ctx, as_json):
        emit_json({"queue": name, "defined": defined})
    elif defined:
        click.echo(name)
    elif name == DEFAULT_DEAD_LETTER_QUEUE:
        click.echo(f"{name} (not made yet: it is, when a message first needs it)")
    else:
        click.echo(f"{name} (not defined: define it with edgeq queue define {name}; until then, "
                   "messages that cannot be delivered stay where they are)")


def _chosen(uid: str | None, every: bool) -> list[MessageUID | str] | None:
    if (uid is None) == (not every):
        raise click.UsageError("give a UID or --all (one of them)")
    return None if every else [uid] if uid is not None else None


def _one_remote(uid: str | None, original: str | None) -> str:
    """The one UID a remote resend or delete takes: --all and --queue are not available remotely yet."""
    if uid is None or original is not None:
        raise click.UsageError("with --server, give one UID: --all and --queue are not available remotely "
                               "yet (run them on the server's host with --db)")
    return uid


def _fail_if_kept(qm: QueueManager, result: Resent) -> None:
    if result.kept:
        lines = "; ".join(f"{uid} stays: {why}" for uid, why in result.kept[:20])
        more = f" (and {len(result.kept) - 20} more)" if len(result.kept) > 20 else ""
        raise click.ClickException(
            f"{len(result.kept)} message(s) stay on {qm.dead_letter_queue()}: {lines}{more}")

"""``edgeq put``, ``get``, ``browse``, ``depth`` and ``sweep``: messages on a queue."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable

import click

from edgeq.cli.base import emit_json
from edgeq.cli.consume import WAIT, Stop, fields_filter, settle, take, write_out
from edgeq.cli.format import format_time
from edgeq.cli.options import (
    F,
    open_store,
    output_options,
    remote_api,
    remote_options,
    require_queue,
    wants_json,
)
from edgeq.cli.params import EXPIRE_AT, FIELD, QUEUE_NAME, RELATIVE_EXPIRY
from edgeq.cli.views import format_message, message_json
from edgeq.errors import MessageTooLarge, QueueFull
from edgeq.message import Message
from edgeq.rules import QueueRule
from edgeq.rules.base import RuleEvent
from edgeq.types import FieldValue
from edgeq.values import Int32, Int64

__all__ = ["browse", "depth", "get", "messages_text", "put", "sweep"]

def _field_option(help: str) -> Callable[[F], F]:
    def decorate(f: F) -> F:
        return click.option("--field", "fields", type=FIELD, multiple=True, help=help)(f)

    return decorate


_fields = fields_filter  # the --field options as a filter (edgeq.cli.consume)


class _AddWatch(QueueRule):
    """Notices a put discarded at MQe's "add" check point (already expired on arrival)."""

    def __init__(self) -> None:
        self.expired_on_add = False

    def on_expired(self, event: RuleEvent) -> None:
        if event.where == "add":
            self.expired_on_add = True


def _correlation_id(text: str | None) -> bytes | None:
    if text is None:
        return None
    if text.startswith("hex:"):
        try:
            return bytes.fromhex(text[4:])
        except ValueError:
            raise click.BadParameter(f"{text!r} is not hex after 'hex:'",
                                     param_hint="'--correlation-id'") from None
    return text.encode("utf-8")


@click.command()
@click.argument("queue_name", metavar="QUEUE", type=QUEUE_NAME)
@click.argument("data", required=False)
@click.option("--expire-after", type=RELATIVE_EXPIRY,
              help="Relative expiry (MQe Int32): ms or 250ms/30s/5m/2h/1d after creation.")
@click.option("--expire-at", type=EXPIRE_AT,
              help="Absolute expiry (MQe Int64): ISO-8601 with a timezone, or epoch ms.")
@click.option("--priority", type=click.IntRange(0, 9),
              help="0 (lowest) to 9 (highest); default: the queue's.")
@_field_option("A field NAME=VALUE (str) or NAME:TYPE=VALUE, TYPE one of str, int32, int64, "
               "float, bool, bytes (hex). Repeatable.")
@click.option("--correlation-id", help="Correlation id: UTF-8 text, or hex:ABCD for bytes.")
@click.option("--reply-to", type=QUEUE_NAME, help="Name of the queue a reply should go to.")
@click.option("--allow-empty", is_flag=True, help="Store an empty body (refused otherwise: an empty stdin "
              "or argument is usually a mistake).")
@output_options
@click.pass_context
def put(
    ctx: click.Context,
    queue_name: str,
    data: str | None,
    expire_after: int | None,
    expire_at: int | None,
    priority: int | None,
    fields: tuple[tuple[str, FieldValue], ...],
    correlation_id: str | None,
    reply_to: str | None,
    allow_empty: bool,
    as_json: bool,
) -> None:
    """Put a message on QUEUE and print its uid.

    DATA is UTF-8 text; omit it, or give '-', to read the body (any bytes) from stdin.

    \b
    Examples:
      edgeq --db dev.db put ORDERS '42 widgets' --priority 7
      gzip -c report.csv | edgeq --db dev.db put REPORTS -
    """
    if expire_after is not None and expire_at is not None:
        raise click.UsageError("give --expire-after (relative) or --expire-at (absolute), not both")
    if data is None or data == "-":
        if data is None and sys.stdin.isatty():
            raise click.UsageError("no DATA: give it as an argument, or pipe it on stdin")
        body = sys.stdin.buffer.read()
    else:
        body = data.encode("utf-8")
    if not body and not allow_empty:
        where = "stdin was empty" if data in (None, "-") else "DATA is empty"
        raise click.UsageError(
            f"{where}: refusing to store an empty message; give --allow-empty if it is meant")
    expiry: Int32 | Int64 | None = None
    if expire_after is not None:
        expiry = Int32(expire_after)
    elif expire_at is not None:
        expiry = Int64(expire_at)
    message = Message(
        body,
        fields=_fields(fields) or {},
        priority=priority,
        expiry=expiry,
        correlation_id=_correlation_id(correlation_id),
        reply_to=reply_to,
    )
    qm = open_store(ctx)
    require_queue(qm, queue_name)
    if expire_at is not None and expire_at <= qm.now_ms():
        _expired_on_arrival(format_time(expire_at))
    watch = _AddWatch()
    qm.add_rule(queue_name, watch)
    try:
        uid = qm.put(queue_name, message)
    except (QueueFull, MessageTooLarge) as exc:
        raise click.ClickException(
            str(exc).replace("alter_queue", f"`edgeq queue alter {queue_name}`")) from None
    if watch.expired_on_add:
        _expired_on_arrival(format_time(int(expiry)) if isinstance(expiry, Int64) else "its expiry")
    if wants_json(ctx, as_json):
        emit_json({"uid": str(uid), "queue": queue_name, "stored": True})
    else:
        click.echo(str(uid))


def _expired_on_arrival(when: str) -> None:
    raise click.ClickException(
        f"the message's expiry ({when}) has already passed, so MQe's 'add' check would discard it on "
        "arrival: nothing was stored; give a later --expire-at (or --expire-after)"
    )


def messages_text(messages: list[Message], as_json: bool, empty: str) -> str:
    """Messages as the ``get`` and ``browse`` commands print them."""
    if as_json:
        return json.dumps([message_json(m) for m in messages], indent=2, ensure_ascii=False)
    return "\n\n".join(format_message(m) for m in messages) if messages else empty


@click.command()
@click.argument("queue_name", metavar="QUEUE", type=QUEUE_NAME)
@click.option("--count", type=click.IntRange(min=1), default=1, show_default=True,
              help="Take up to this many.")
@_field_option("Take only messages with this field value (NAME=VALUE or NAME:TYPE=VALUE). Repeatable.")
@click.option("--raw", is_flag=True,
              help="Write only the data bytes to stdout (nothing if the queue is empty).")
@click.option("--wait", type=WAIT, default="0", help="Wait this long for a message if none is there "
              "(30s, 500ms, 2m, forever); it returns as soon as one is put, here or by another process.")
@output_options
@click.pass_context
def get(
    ctx: click.Context,
    queue_name: str,
    count: int,
    fields: tuple[tuple[str, FieldValue], ...],
    raw: bool,
    wait: float,
    as_json: bool,
) -> None:
    """Take the next message(s) off QUEUE and print them; each leaves the queue only once printed.

    \b
    Examples:
      edgeq --db dev.db get ORDERS
      edgeq --db dev.db get REPORTS --raw | gunzip
    """
    use_json = wants_json(ctx, as_json)
    if raw and use_json:
        raise click.UsageError("choose one of --raw and --json")
    wanted = _fields(fields)
    qm = open_store(ctx)
    require_queue(qm, queue_name)
    with Stop().installed() as stop:
        confirm_id, messages = take(qm, queue_name, count, wanted, wait, stop)
        try:
            if raw:
                write_out(b"".join(message.data for message in messages))
            else:
                text = messages_text(messages, use_json, f"No message available on {queue_name}.")
                write_out(f"{text}\n".encode())
        except BaseException:
            settle(qm, queue_name, confirm_id, messages, done=False)
            raise
        settle(qm, queue_name, confirm_id, messages, done=True)
    stop.exit()


@click.command()
@click.argument("queue_name", metavar="QUEUE", type=QUEUE_NAME)
@_field_option("Show only messages with this field value (NAME=VALUE or NAME:TYPE=VALUE). Repeatable.")
@click.option("--limit", type=click.IntRange(min=1), help="Show at most this many.")
@remote_options
@output_options
@click.pass_context
def browse(
    ctx: click.Context,
    queue_name: str,
    fields: tuple[tuple[str, FieldValue], ...],
    limit: int | None,
    as_json: bool,
) -> None:
    """Show the messages on QUEUE in get order, without taking them (locked ones are not shown).

    \b
    Examples:
      edgeq --db dev.db --json browse ORDERS --field n:int32=5
      edgeq browse ORDERS --limit 10 --server http://home:8471 --token-file viewer.token
    """
    api = remote_api(ctx)
    if api is not None:
        if fields:
            raise click.UsageError("--field is not available with --server (the API does not filter): "
                                   "browse without it, or on the server's host with --db")
        messages = api.browse(queue_name, limit)
    else:
        qm = open_store(ctx)
        require_queue(qm, queue_name)
        messages = qm.browse(queue_name, filter=_fields(fields), limit=limit)
    click.echo(messages_text(messages, wants_json(ctx, as_json), f"No messages to browse on {queue_name}."))


@click.command()
@click.argument("queue_name", metavar="QUEUE", type=QUEUE_NAME)
@remote_options
@output_options
@click.pass_context
def depth(ctx: click.Context, queue_name: str, as_json: bool) -> None:
    """Print how many messages QUEUE holds, locked ones included (expired ones discarded first; with
    --server, those not yet discarded are counted: the API never discards).

    \b
    Examples:
      edgeq --db dev.db depth ORDERS
      edgeq depth ORDERS --server http://home:8471 --token-file viewer.token
    """
    api = remote_api(ctx)
    if api is not None:
        count = api.depth(queue_name)
    else:
        qm = open_store(ctx)
        require_queue(qm, queue_name)
        count = qm.depth(queue_name)
    if wants_json(ctx, as_json):
        emit_json({"queue": queue_name, "depth": count})
    else:
        click.echo(str(count))


@click.command()
@click.argument("queue_name", metavar="[QUEUE]", required=False, type=QUEUE_NAME)
@output_options
@click.pass_context
def sweep(ctx: click.Context, queue_name: str | None, as_json: bool) -> None:
    """Discard expired messages now, on QUEUE or every queue; print how many.

    \b
    Example:
      edgeq --db dev.db sweep
    """
    qm = open_store(ctx)
    if queue_name is not None:
        require_queue(qm, queue_name)
    names = [queue_name] if queue_name is not None else qm.queue_names()
    # activate() first: its discards are not counted by sweep_expired() on a freshly
    # opened queue manager (see the report on QueueManager.sweep_expired).
    counts = {name: qm.activate(name) + qm.sweep_expired(name) for name in names}
    total = sum(counts.values())
    if wants_json(ctx, as_json):
        emit_json({"discarded": total, "queues": counts})
        return
    click.echo(f"Discarded {total} expired message(s).")
    for name, count in counts.items():
        if count:
            click.echo(f"  {name}: {count}")

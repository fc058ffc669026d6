"""The queue options ``queue define``/``alter`` share with ``admin DEVICE queue define|alter``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import click

from edgeq.cli.options import F
from edgeq.cli.params import BYTES_LIMIT, DURATION, DURATION_LIMIT, LIMIT, QM_NAME, QUEUE_NAME, RULE, Limit
from edgeq.encoding.compression import CODECS, check_compression
from edgeq.errors import InvalidArgument
from edgeq.types import ON_FULL

__all__ = ["check_backout", "check_codec", "check_kind", "check_rules", "compression_option",
           "given_attributes", "kind_options", "queue_options", "refusal_option", "rule_option"]


def queue_options(f: F) -> F:
    """The attribute options ``queue define`` and ``queue alter`` share."""
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
        click.option("--max-bytes", type=BYTES_LIMIT,
                     help="Flash budget: most data plus fields the queue holds, as stored "
                          "(1500, 64KiB, 256MiB; 'none' for no limit)."),
        click.option("--on-full", type=click.Choice(ON_FULL),
                     help="When max-depth, max-bytes or the store's budget is reached: 'reject' the put "
                          "(the default), or make room by discarding ready messages, the oldest first or the "
                          "lowest priority first."),
        click.option("--depth-threshold", type=LIMIT,
                     help="Rules' on_threshold fires when a put takes the depth up to this ('none': never)."),
        click.option("--default-priority", type=click.IntRange(0, 9),
                     help="Priority of messages put without one: 0 (lowest) to 9 (highest)."),
        click.option("--ordering", type=click.Choice(["priority", "fifo"]),
                     help="Get order: 'priority' (9 first, then arrival) or 'fifo' (arrival only)."),
        click.option("--backout-threshold", type=LIMIT,
                     help="Poison messages: after this many undone assured gets a message moves to "
                          "--backout-queue instead of being delivered again (give both)."),
        click.option("--backout-queue", type=QUEUE_NAME,
                     help="Where --backout-threshold moves a message (a queue defined already)."),
        click.option("--redelivery-delay", "redelivery_delay_ms", type=DURATION,
                     help="A message whose consumer failed is offered again only after this (500ms, 1s; "
                          "0: at once), doubling with each failure up to --max-redelivery-delay "
                          "(default 1s)."),
        click.option("--max-redelivery-delay", "max_redelivery_delay_ms", type=DURATION,
                     help="The longest a failed message waits before it is offered again (default 5m)."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def rule_option(f: F) -> F:
    """``--rule NAME[:JSON]``, repeatable."""
    return click.option(
        "--rule", "rule_specs", type=RULE, multiple=True, metavar="NAME[:JSON]",
        help="Bind a rule: its name (see `edgeq rules list`) or package.module:Class, then optionally "
             "':' and its config as a JSON object, e.g. 'dead-letter:{\"queue\":\"DLQ\"}'. "
             "Repeatable: the rules run in the order given.",
    )(f)


def check_rules(specs: Sequence[tuple[str, dict[str, Any]]]) -> None:
    """Load and configure each rule before the store is opened, so a typo creates nothing."""
    from edgeq.rules.registry import build_rule

    for name, config in specs:
        build_rule(name, config)


def given_attributes(**given: Any) -> dict[str, Any]:
    """The queue attributes actually given on the command line (Limit unwrapped)."""
    return {k: (v.value if isinstance(v, Limit) else v) for k, v in given.items() if v is not None}


def refusal_option(f: F) -> F:
    """``--refusal-limit``: refusals before a remote queue's message is dead-lettered."""
    return click.option(
        "--refusal-limit", type=LIMIT,
        help="Remote queues: how many times the target may refuse a message before it moves to the "
             "dead-letter queue (`edgeq dlq`; 'none': the sync agent's default).",
    )(f)


def compression_option(f: F) -> F:
    """``--compression``: the codec a remote or home-server queue sends with."""
    return click.option(
        "--compression", type=click.Choice([*CODECS, "none"]), callback=check_codec,
        help="Remote and home-server queues: send their batches compressed as a whole, 'zstd' (needs "
             "pip install 'edgeq[zstd]') or 'zlib', where the server takes it; 'none' (the default) "
             "sends them as they are.",
    )(f)


def check_codec(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """The --compression value, checked before the store is opened (zstd needs its package)."""
    if value is None or value == "none":
        return value
    try:
        check_compression(value)
    except InvalidArgument as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from None
    return value


def kind_options(f: F) -> F:
    """The options that say a queue's kind (remote, home-server) and its target."""
    options = [
        click.option("--remote", is_flag=True,
                     help="A remote queue: puts wait here until the sync agent transmits them to "
                          "--target-qmgr."),
        click.option("--target-qmgr", type=QM_NAME,
                     help="Remote queues: the queue manager the messages go to."),
        click.option("--target-queue", type=QUEUE_NAME,
                     help="Remote queues: the queue they go to there (default: the same name)."),
        click.option("--mode", type=click.Choice(["async", "sync"]),
                     help="Remote queues: 'async' stores and forwards later (the default); 'sync' transmits "
                          "inside each put, or fails it."),
        click.option("--home-server", type=QM_NAME,
                     help="A home-server queue: the sync agent fills it by pulling from this home server."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def check_kind(
    remote: bool, home_server: str | None, remote_only: Mapping[str, object], ordering: str | None
) -> None:
    """Refuse kind options that define nothing sensible together (a usage mistake: exit 2)."""
    if remote and home_server is not None:
        raise click.UsageError("a queue is --remote or a --home-server queue, not both")
    if not remote:
        given = [option for option, value in remote_only.items() if value is not None]
        if given:
            raise click.UsageError(f"{', '.join(given)}: only for remote queues (add --remote)")
    elif remote_only["--target-qmgr"] is None:
        raise click.UsageError("--remote needs --target-qmgr QM: the queue manager its messages go to")
    elif ordering is not None:
        raise click.UsageError("a remote queue is always priority-ordered: leave out --ordering")


def check_backout(remote: bool, threshold: Limit | None, backout_queue: str | None) -> None:
    """A new queue's backout options: both or neither, and never on a remote queue (exit 2)."""
    given = threshold is not None and threshold.value is not None
    if remote and (threshold is not None or backout_queue is not None):
        raise click.UsageError("--backout-threshold and --backout-queue are not for remote queues: "
                               "nothing gets from them here")
    if given != (backout_queue is not None):
        raise click.UsageError("give --backout-threshold N and --backout-queue QUEUE together (or neither)")

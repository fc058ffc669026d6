"""The ``edgeq`` command line; docs/cli.md has every command and the module table."""

from __future__ import annotations

from pathlib import Path

import click

from edgeq import __version__
from edgeq.cli.admin import admin as admin_group
from edgeq.cli.base import EdgeqGroup, log_to_stderr
from edgeq.cli.bridge import bridge as bridge_group
from edgeq.cli.check import check as check_command
from edgeq.cli.consume import consume as consume_command
from edgeq.cli.demo import demo as demo_command
from edgeq.cli.dlq import dlq as dlq_group
from edgeq.cli.keys import keys as keys_group
from edgeq.cli.messages import browse, depth, get, put, sweep
from edgeq.cli.options import GroupOptions, output_options, store_options
from edgeq.cli.pipeline import export
from edgeq.cli.pipeline import pipeline as pipeline_group
from edgeq.cli.queue import purge
from edgeq.cli.queue import queue as queue_group
from edgeq.cli.rules import rules as rules_group
from edgeq.cli.serve import serve as serve_command
from edgeq.cli.server import server as server_group
from edgeq.cli.sync import sync as sync_command

__all__ = ["cli", "main"]


@click.group("edgeq", cls=EdgeqGroup, context_settings={"help_option_names": ["-h", "--help"]})
@store_options
@output_options
@click.version_option(__version__, "-V", "--version", prog_name="edgeq")
@click.pass_context
def cli(ctx: click.Context, db: Path | None, name: str | None, as_json: bool) -> None:
    """Durable store-and-forward message queues (MQe's model) in one SQLite file.

    \b
    Examples:
      edgeq --db dev.db --name DEV1 queue define ORDERS --expiry-ms 1h
      edgeq --db dev.db put ORDERS '42 widgets' --priority 7 --expire-after 30s
      edgeq --db dev.db get ORDERS
      edgeq demo                    # a guided tour of expiry, rules and assured delivery

    Exit status: 0 on success, 1 on an error, 2 on a usage mistake.
    """
    log_to_stderr()
    ctx.obj = GroupOptions(db, name, as_json)


# The modules share their commands' names (edgeq.cli.queue holds `queue`), so the commands
# are imported under other names: the package's attributes stay the modules.
cli.add_command(put)
cli.add_command(get)
cli.add_command(consume_command)
cli.add_command(browse)
cli.add_command(depth)
cli.add_command(sweep)
cli.add_command(queue_group)
cli.add_command(purge)
cli.add_command(rules_group)
cli.add_command(keys_group)
cli.add_command(server_group)
cli.add_command(serve_command)  # edgeq serve / edgeq sync: network stacks are imported when they run
cli.add_command(sync_command)
cli.add_command(export)  # edgeq export / edgeq pipeline run: pyarrow and pyspark too
cli.add_command(pipeline_group)
cli.add_command(demo_command)
cli.add_command(check_command)
cli.add_command(admin_group)
cli.add_command(dlq_group)
cli.add_command(bridge_group)  # edgeq bridge: paho-mqtt is imported when a bridge runs


def main() -> None:
    """The ``edgeq`` console script."""
    cli(prog_name="edgeq")

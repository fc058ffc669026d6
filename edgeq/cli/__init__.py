"""The ``edgeq`` command line; docs/cli.md has every command and the module table."""

from __future__ import annotations

from pathlib import Path

import click

from edgeq import __version__
from edgeq.cli.base import EdgeqGroup, log_to_stderr
from edgeq.cli.options import GroupOptions, output_options, store_options

__all__ = ["COMMANDS", "cli", "main"]

#: Each command and where it lives, imported only when named: `edgeq put` never loads the sync, server
#: or pipeline modules, and `edgeq --version` no command at all. The modules share their commands' names
#: (edgeq.cli.queue holds `queue`): the package's attributes stay the modules.
COMMANDS = {
    "put": "edgeq.cli.messages:put",
    "get": "edgeq.cli.messages:get",
    "consume": "edgeq.cli.consume:consume",
    "browse": "edgeq.cli.messages:browse",
    "depth": "edgeq.cli.messages:depth",
    "sweep": "edgeq.cli.messages:sweep",
    "queue": "edgeq.cli.queue:queue",
    "purge": "edgeq.cli.queue:purge",
    "rules": "edgeq.cli.rules:rules",
    "keys": "edgeq.cli.keys:keys",
    "server": "edgeq.cli.server:server",
    "serve": "edgeq.cli.serve:serve",  # edgeq serve / edgeq sync: network stacks are imported when they run
    "sync": "edgeq.cli.sync:sync",
    "export": "edgeq.cli.pipeline:export",  # edgeq export / edgeq pipeline run: pyarrow and pyspark too
    "pipeline": "edgeq.cli.pipeline:pipeline",
    "demo": "edgeq.cli.demo:demo",
    "check": "edgeq.cli.check:check",
    "admin": "edgeq.cli.admin:admin",
    "dlq": "edgeq.cli.dlq:dlq",
    "bridge": "edgeq.cli.bridge:bridge",  # paho-mqtt or nats-py are imported when a bridge runs
}


@click.group("edgeq", cls=EdgeqGroup, lazy=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
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


def main() -> None:
    """The ``edgeq`` console script."""
    cli(prog_name="edgeq")

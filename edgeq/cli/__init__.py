"""The ``edgeq`` command line: queues and messages in a store, from a shell.

Every command opens the store given by ``--db`` (or ``EDGEQ_DB``), does one
thing and closes it. Errors print one ``Error: ...`` line on stderr and exit 1;
usage mistakes (unknown option, bad value) exit 2, as in every click program.

Layout, one module per command group (see docs/cli.md):

- ``messages``: ``put``, ``get``, ``browse``, ``depth``, ``sweep``;
- ``consume``: ``consume`` (messages as they come, printed or each to a command);
- ``queue``: ``queue define|alter|list|show|stats|delete`` and ``purge``;
- ``rules``: ``rules list|failures|retry``;
- ``keys``: ``keys new|fingerprint|new-store-key|rotate``;
- ``server``: ``server devices add|list|revoke`` (the home server's registry);
- ``sync``: ``serve`` (the home server) and ``sync`` (the device agent);
- ``pipeline``: ``export`` and ``pipeline run`` (the home server's journal);
- ``demo``: ``demo`` and the tour it runs;
- ``check``: ``check [--repair]`` (damage in a store);
- ``dlq``: ``dlq browse|resend|delete|use`` (the dead-letter queue);
- ``admin``: ``admin keygen|pending|replies|show`` and ``admin DEVICE queue|purge|sweep|rules|sync-status``
  (remote administration from the home server: a package, ``admin/``).

Shared by them: ``options`` (the option sets, one decorator each, and
``open_store``, the one way a command opens its store), ``base`` (the group that
turns errors into one line, JSON output), ``format`` (values: durations, times,
fields, rule bindings) and ``views`` (records: messages, queues, failures).
Optional stacks (starlette, uvicorn, httpx, pyarrow, pyspark) are imported only
when the command that needs them runs.
"""

from __future__ import annotations

from pathlib import Path

import click

from edgeq import __version__
from edgeq.cli.admin import admin as admin_group
from edgeq.cli.base import EdgeqGroup, log_to_stderr
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
from edgeq.cli.server import server as server_group
from edgeq.cli.sync import serve
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
      edgeq --db dev.db queue define DLQ
      edgeq --db dev.db queue alter ORDERS --rule counters --rule 'dead-letter:{"queue":"DLQ"}'
      edgeq rules list              # the rules installed, to bind by name
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
cli.add_command(serve)  # edgeq serve / edgeq sync: network stacks are imported when they run
cli.add_command(sync_command)
cli.add_command(export)  # edgeq export / edgeq pipeline run: pyarrow and pyspark too
cli.add_command(pipeline_group)
cli.add_command(demo_command)
cli.add_command(check_command)
cli.add_command(admin_group)
cli.add_command(dlq_group)


def main() -> None:
    """Run the ``edgeq`` command (the console script's entry point)."""
    cli(prog_name="edgeq")

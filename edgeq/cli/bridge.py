"""``edgeq bridge define|list|delete|kinds|run|status``: bridges between queues and MQTT 5 brokers or
NATS JetStream (docs/bridges.md). The bridges' package is imported when a command needs it; a kind
whose client is not installed names the extra to install (``edgeq[mqtt]``, ``edgeq[nats]``)."""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click

from edgeq.cli.base import EdgeqGroup, emit_json
from edgeq.cli.options import check_store, log_level_option, open_store, output_options, wants_json
from edgeq.cli.views import format_table

if TYPE_CHECKING:
    from edgeq.manager import QueueManager
    from edgeq.sync.bridges.views import BridgeView

__all__ = ["bridge", "format_bridges", "run_bridges"]


def _setting(text: str) -> tuple[str, Any]:
    key, eq, value = text.partition("=")
    if not eq or not key:
        raise click.BadParameter(f"{text!r} is not KEY=VALUE", param_hint="'--set'")
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value


@click.group(cls=EdgeqGroup)
def bridge() -> None:
    """Bridges between queues and MQTT 5 brokers: define them, run them, see their state.

    \b
    Example:
      edgeq --db dev.db bridge define sensors --kind mqtt-in --queue READINGS \\
            --broker mqtt://127.0.0.1:1883 --topic 'sensors/#'
      edgeq --db dev.db bridge run
    """


@bridge.command("define")
@click.argument("name")
@click.option("--kind", required=True, help="The plugin: mqtt-in or mqtt-out (see `edgeq bridge kinds`).")
@click.option("--queue", required=True, help="The queue it fills (in) or empties (out).")
@click.option("--broker", "url", required=True,
              help="mqtt://HOST:PORT or mqtts:// (TLS) for MQTT; nats://HOST:PORT or tls://, "
              "several comma-separated, for JetStream (its stream: --set stream=NAME).")
@click.option("--topic", "topics", multiple=True, required=True,
              help="A topic filter to subscribe to (in; repeatable), or the one topic to publish to (out).")
@click.option("--qos", type=click.IntRange(1, 2), help="QoS 1 or 2 (default: in 2, out 1).")
@click.option("--username", help="The broker user name.")
@click.option("--password-env", metavar="VAR", help="The environment variable holding the broker password.")
@click.option("--password-file", metavar="PATH", help="A file holding the broker password (chmod 600).")
@click.option("--ca-file", metavar="PATH", help="The CA file the broker's certificate is verified against.")
@click.option("--client-id", help="The MQTT client id (default: edgeq-QMGR-NAME).")
@click.option("--set", "settings", multiple=True, metavar="KEY=VALUE",
              help="Another setting (docs/bridges.md), e.g. --set session_expiry_s=3600.")
@click.option("--replace", is_flag=True, help="Replace a bridge of that name (it keeps its confirm id).")
@output_options
@click.pass_context
def define(ctx: click.Context, /, name: str, kind: str, queue: str, topics: tuple[str, ...], replace: bool,
           settings: tuple[str, ...], as_json: bool, **options: Any) -> None:
    """Define (or --replace) a bridge on a queue, kept in the store.

    \b
    Example:
      edgeq --db dev.db bridge define up --kind mqtt-out --queue ALERTS \\
            --broker mqtts://broker:8883 --topic site1/alerts --qos 2 --password-env MQTT_PASSWORD
    """
    from edgeq.sync.bridges.book import define_bridge

    config: dict[str, Any] = {k: v for k, v in options.items() if v is not None}
    config["topics"] = list(topics)
    config.update(_setting(s) for s in settings)
    found = define_bridge(open_store(ctx), name, kind, queue, config, replace=replace)
    if wants_json(ctx, as_json):
        emit_json(json.loads(found.to_json()))
    else:
        click.echo(f"Bridge {found.name} ({found.kind}) defined on queue {found.queue}.")


@bridge.command("list")
@output_options
@click.pass_context
def list_(ctx: click.Context, as_json: bool) -> None:
    """List the bridges defined in the store."""
    from edgeq.sync.bridges.book import bridge_definitions

    found = bridge_definitions(check_store(ctx).path)
    if wants_json(ctx, as_json):
        emit_json([json.loads(d.to_json()) for d in found])
    elif not found:
        click.echo("No bridges are defined.")
    else:
        click.echo(format_table(("BRIDGE", "KIND", "QUEUE", "BROKER", "TOPICS"), [
            (d.name, d.kind, d.queue, str(d.config.get("url")), " ".join(d.config.get("topics", [])))
            for d in found]))


@bridge.command("delete")
@click.argument("name")
@click.pass_context
def delete(ctx: click.Context, name: str) -> None:
    """Delete a bridge's definition and status (its queue and messages stay)."""
    from edgeq.sync.bridges.book import delete_bridge

    delete_bridge(check_store(ctx).path, name)
    click.echo(f"Bridge {name} deleted.")


@bridge.command("kinds")
def kinds() -> None:
    """List the installed bridge kinds (the edgeq.bridges entry points)."""
    from edgeq.sync.bridges.registry import installed_bridges

    found = installed_bridges()
    click.echo(format_table(("KIND", "TARGET"), sorted(found.items())) if found else "No bridge kinds.")


@bridge.command("run")
@click.argument("names", nargs=-1)
@log_level_option
@click.pass_context
def run(ctx: click.Context, names: tuple[str, ...], log_level: str) -> None:
    """Run the store's bridges (or those NAMED) until SIGINT or SIGTERM; logs are JSON lines on stderr.

    \b
    Example:
      edgeq --db dev.db bridge run sensors
    """
    from edgeq.sync.logs import setup_json_logging

    setup_json_logging(log_level.upper())
    run_bridges(open_store(ctx), names or None)


def run_bridges(qm: QueueManager, names: Sequence[str] | None = None) -> None:
    """Run the bridges of ``qm`` (or those ``names``) until SIGINT or SIGTERM (``bridge run``, ``serve``)."""
    from edgeq.sync.bridges.runner import BridgeRunner

    runner = BridgeRunner(qm, names)
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    runner.run(stop)


def _when(ms: int | None) -> str:
    return "-" if ms is None else datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@bridge.command("status")
@output_options
@click.pass_context
def status(ctx: click.Context, as_json: bool) -> None:
    """Each bridge's state: running, connected, last forward, backlog (out: the queue's depth), errors."""
    from edgeq.sync.bridges.views import bridge_views

    qm = open_store(ctx)
    views = bridge_views(qm.path, {q.name: q.depth for q in qm.store_usage().queues})
    if wants_json(ctx, as_json):
        emit_json([v.as_dict() for v in views])
    elif not views:
        click.echo("No bridges are defined.")
    else:
        click.echo(format_bridges(views))


def format_bridges(views: Sequence[BridgeView]) -> str:
    """The bridges as a table (``edgeq bridge status``, ``edgeq sync status``).

    >>> from edgeq.sync.bridges.status import BridgeState
    >>> from edgeq.sync.bridges.views import BridgeView
    >>> print(format_bridges([BridgeView("up", "mqtt-out", "OUT", ["a/b"], True, False, 3,
    ...                                  BridgeState(errors=1, last_error="cannot reach the broker"))]))
    BRIDGE  KIND      QUEUE  RUNNING  CONNECTED  LAST FORWARD  FORWARDED  BACKLOG  ERRORS  LAST ERROR
    up      mqtt-out  OUT    yes      no         -             0          3        1       cannot reach the broker
    """  # noqa: E501
    return format_table(
        ("BRIDGE", "KIND", "QUEUE", "RUNNING", "CONNECTED", "LAST FORWARD", "FORWARDED", "BACKLOG", "ERRORS",
         "LAST ERROR"),
        [(v.name, v.kind, v.queue, "yes" if v.running else "no", "yes" if v.connected else "no",
          _when(v.state.last_forward_ms), str(v.state.forwarded),
          "-" if v.backlog is None else str(v.backlog), str(v.state.errors), v.state.last_error or "-")
         for v in views])

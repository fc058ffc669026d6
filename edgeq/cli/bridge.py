"""``edgeq bridge define|list|delete|kinds|run|status``: bridges between queues and MQTT 5 brokers
(docs/bridges.md). The bridges' package is imported when a command needs it."""

from __future__ import annotations

import json
import signal
import threading
from datetime import UTC, datetime
from typing import Any

import click

from edgeq.cli.base import EdgeqGroup, emit_json
from edgeq.cli.options import check_store, log_level_option, need, open_store, output_options, wants_json
from edgeq.cli.views import format_table

__all__ = ["bridge"]


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
@click.option("--broker", "url", required=True, help="mqtt://HOST:PORT, or mqtts://HOST:PORT for TLS.")
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
    need("paho.mqtt", "mqtt")
    from edgeq.sync.bridges.runner import BridgeRunner
    from edgeq.sync.logs import setup_json_logging

    setup_json_logging(log_level.upper())
    runner = BridgeRunner(open_store(ctx), names or None)
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
    from dataclasses import asdict

    from edgeq.sync.bridges.book import bridge_definitions
    from edgeq.sync.bridges.status import BridgeState, pid_alive, read_states

    qm = open_store(ctx)
    states = read_states(qm.path)
    rows = []
    for d in bridge_definitions(qm.path):
        state = states.get(d.name, BridgeState())
        running = state.updated_ms is not None and pid_alive(state.pid)
        backlog = qm.depth(d.queue) if d.kind.endswith("-out") and d.queue in qm.queue_names() else None
        rows.append({"name": d.name, "kind": d.kind, "queue": d.queue, "running": running,
                     **asdict(state), "connected": running and state.connected, "backlog": backlog})
    if wants_json(ctx, as_json):
        emit_json(rows)
    elif not rows:
        click.echo("No bridges are defined.")
    else:
        click.echo(format_table(
            ("BRIDGE", "KIND", "QUEUE", "RUNNING", "CONNECTED", "LAST FORWARD", "FORWARDED", "BACKLOG",
             "ERRORS", "LAST ERROR"),
            [(r["name"], r["kind"], r["queue"], "yes" if r["running"] else "no",
              "yes" if r["connected"] else "no", _when(r["last_forward_ms"]), str(r["forwarded"]),
              "-" if r["backlog"] is None else str(r["backlog"]), str(r["errors"]), r["last_error"] or "-")
             for r in rows]))

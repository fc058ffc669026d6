"""``edgeq server devices add|list|revoke``: the home server's registry of devices.

    edgeq server devices add DEV1 --public-key device.pub --queues ORDERS --db home.db
    edgeq server devices list --db home.db
    edgeq server devices revoke DEV1 --db home.db

The home server itself runs with ``edgeq serve`` (:mod:`edgeq.cli.sync`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from edgeq.cli.base import emit_json
from edgeq.cli.format import format_time
from edgeq.cli.options import ADMIN, db_option, open_store, output_options, wants_json

if TYPE_CHECKING:
    from edgeq.devices import DeviceRecord

__all__ = ["server"]


@click.group("server")
def server() -> None:
    """Administer a home server's store."""


@server.group("devices")
def devices() -> None:
    """The devices allowed to sync with this home server (signed requests)."""


_server_db = db_option("The server's store (default: the group's --db).")


@devices.command("add")
@click.argument("name")
@click.option("--public-key", "public_key", required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="The device's public key file (device.pub from `edgeq keys new`).")
@click.option("--queues", help="Comma-separated queues the device may push to (default: any).")
@_server_db
@click.pass_context
def devices_add(ctx: click.Context, name: str, public_key: Path, queues: str | None, db: Path | None) -> None:
    """Register (or re-key, lifting a revocation) device NAME, its queue manager name.

    \b
    Example:
      edgeq server devices add DEV1 --public-key device.pub --queues ORDERS,TELEMETRY --db home.db
    """
    from edgeq.sync.keys import fingerprint, load_public_key

    if "." in name:
        raise click.ClickException(
            f"device name {name!r} has a '.': not allowed with signed sync (the server keeps a device's "
            "queues as DEVICE.QUEUE, so the name must not contain the separator)"
        )
    raw = load_public_key(public_key)
    allowed = None if queues is None else [q.strip() for q in queues.split(",") if q.strip()]
    qm = open_store(ctx, ADMIN, db=db)
    qm.register_device(name, raw, queues=allowed)
    click.echo(f"Registered {name} ({fingerprint(raw)}), may push to "
               f"{'any queue' if allowed is None else ', '.join(allowed) or 'no queue'}.")


@devices.command("list")
@_server_db
@output_options
@click.pass_context
def devices_list(ctx: click.Context, db: Path | None, as_json: bool) -> None:
    """List the devices this server knows: registered, revoked, or only heard from."""
    from edgeq.sync.keys import fingerprint

    found = open_store(ctx, ADMIN, db=db).devices()
    if wants_json(ctx, as_json):
        emit_json([_device_json(d) for d in found])
        return
    if not found:
        click.echo("No devices.")
        return
    for d in found:
        state = "revoked" if d.revoked_ms is not None else "registered" if d.public_key else "unregistered"
        key = fingerprint(d.public_key) if d.public_key else "-"
        queues = "any" if d.queues is None else ",".join(d.queues) or "none"
        seen = format_time(d.last_seen_ms) if d.last_seen_ms is not None else "never"
        click.echo(f"{d.name:<16} {state:<12} {key}  queues={queues}  last seen {seen}")


def _device_json(d: DeviceRecord) -> dict[str, object]:
    from edgeq.sync.keys import fingerprint

    return {"name": d.name, "registered": d.registered, "revoked_ms": d.revoked_ms,
            "fingerprint": fingerprint(d.public_key) if d.public_key else None,
            "queues": None if d.queues is None else list(d.queues), "last_seen_ms": d.last_seen_ms,
            "clock_offset_ms": d.clock_offset_ms}


@devices.command("revoke")
@click.argument("name")
@_server_db
@click.pass_context
def devices_revoke(ctx: click.Context, name: str, db: Path | None) -> None:
    """Revoke device NAME: the server refuses its requests from now on (re-add to restore)."""
    open_store(ctx, ADMIN, db=db).revoke_device(name)
    click.echo(f"Revoked {name}.")

"""``edgeq keys`` (a device's signing key, store keys) and ``edgeq server devices`` (the home server's registry).

    edgeq keys new --out device.key                 # device.key (0600) + device.pub
    edgeq keys new-store-key --out store.key        # a key for encryption at rest
    edgeq keys rotate --db device.db --key-file store.key --new-key
    edgeq server devices add DEV1 --public-key device.pub --queues ORDERS --db home.db
    edgeq server devices list --db home.db
    edgeq server devices revoke DEV1 --db home.db
"""

from __future__ import annotations

from pathlib import Path

import click

from edgeq.cli_common import Options, emit_json, json_flag, wants_json
from edgeq.cli_format import format_time
from edgeq.crypto import StoreKeys
from edgeq.devices import DeviceRecord
from edgeq.manager import QueueManager

__all__ = ["keys", "server"]


@click.group("keys")
def keys() -> None:
    """Device key pairs for signed sync (Ed25519), and store keys for encryption at rest."""


@keys.command("new")
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The private key file to write (mode 0600); the public key goes next to it as .pub.")
@click.option("--force", is_flag=True, help="Replace existing key files.")
@json_flag
@click.pass_context
def keys_new(ctx: click.Context, out: Path, force: bool, as_json: bool) -> None:
    """Make a key pair for a device and print its public key's fingerprint.

    \b
    Examples:
      edgeq keys new --out /etc/edgeq/device.key
      edgeq sync --db device.db --server https://home:8470 --key /etc/edgeq/device.key
    """
    from edgeq.sync.keys import new_key_pair

    pair = new_key_pair(out, overwrite=force)
    if wants_json(ctx, as_json):
        emit_json({"private_key": str(pair.private_path), "public_key": str(pair.public_path),
                   "fingerprint": pair.fingerprint})
        return
    click.echo(f"Wrote {pair.private_path} (private, keep it on the device) and {pair.public_path} (public).")
    click.echo(pair.fingerprint)


@keys.command("fingerprint")
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def keys_fingerprint(path: Path) -> None:
    """Print the fingerprint of a public (.pub) or private key file."""
    from edgeq.sync.keys import fingerprint, load_private_key, load_public_key, public_bytes

    data = path.read_bytes()
    raw = public_bytes(load_private_key(path)) if b"PRIVATE KEY" in data else load_public_key(path)
    click.echo(fingerprint(raw))


@keys.command("new-store-key")
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The key file to write (mode 0600). Keep it out of the database's directory.")
@click.option("--force", is_flag=True, help="Replace an existing key file (its data becomes unreadable!).")
def keys_new_store_key(out: Path, force: bool) -> None:
    """Make a 256-bit store key for encrypted queues (AES-256-GCM).

    Give it to the queue manager with keys=PATH, or with EDGEQ_STORE_KEY_FILE=PATH.

    
    Examples:
      edgeq keys new-store-key --out /etc/edgeq/store.key
      EDGEQ_STORE_KEY_FILE=/etc/edgeq/store.key edgeq --db d.db queue define PAY --encryption aes-256-gcm
    """
    from edgeq.crypto import StoreKeys

    if out.exists() and not force:
        raise click.ClickException(f"{out} exists: it may be the only key to a store; give --force to replace it")
    StoreKeys.generate().save(out)
    click.echo(f"Wrote store key file {out} (key k1, mode 0600).")


@keys.command("rotate")
@click.option("--db", type=click.Path(dir_okay=False, path_type=Path), help="The store (default: the group's --db).")
@click.option("--key-file", required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="The store key file.")
@click.option("--new-key", is_flag=True, help="First add a fresh key to the file and make it current.")
@click.option("--queue", "queue_name", help="Only this queue (default: every encrypted queue).")
@click.option("--batch", default=500, show_default=True, type=click.IntRange(1), help="Rows per transaction.")
@click.pass_context
def keys_rotate(ctx: click.Context, db: Path | None, key_file: Path, new_key: bool, queue_name: str | None,
                batch: int) -> None:
    """Re-seal encrypted queues under the current store key, in bounded batches.

    Queues stay in use meanwhile; after a crash, run it again to finish. Keep
    old keys in the file until no row uses them.

    
    Examples:
      edgeq keys rotate --db device.db --key-file store.key --new-key
      edgeq keys rotate --db device.db --key-file store.key            # resume
    """
    from edgeq.crypto import StoreKeys

    ring = StoreKeys.load(key_file)
    if new_key:
        ring = ring.with_new_key()
        ring.save(key_file)  # saved first: a crash after this leaves a file that opens every row
        click.echo(f"Added key {ring.current} to {key_file}; it is now current.")
    done = _open(ctx, db, keys=ring).rotate_keys(queue_name, batch=batch)
    click.echo(f"Re-sealed {done} message(s) under key {ring.current}.")


@click.group("server")
def server() -> None:
    """Administer a home server's store."""


@server.group("devices")
def devices() -> None:
    """The devices allowed to sync with this home server (signed requests)."""


_DB = click.option("--db", type=click.Path(dir_okay=False, path_type=Path),
                   help="The server's store (default: the group's --db).")


def _open(ctx: click.Context, db: Path | None, keys: StoreKeys | None = None) -> QueueManager:
    opts: Options = ctx.find_object(Options) or Options(None, None, False)
    path = db or opts.db
    if path is None:
        raise click.ClickException("no store given: pass --db PATH")
    if not path.exists():
        raise click.ClickException(f"{path} does not exist: give an existing store (e.g. the one of edgeq serve --db)")
    qm = QueueManager(path, keys=keys)
    ctx.call_on_close(qm.close)
    return qm


@devices.command("add")
@click.argument("name")
@click.option("--public-key", "public_key", required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="The device's public key file (device.pub from `edgeq keys new`).")
@click.option("--queues", help="Comma-separated queues the device may push to (default: any).")
@_DB
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
    qm = _open(ctx, db)
    qm.register_device(name, raw, queues=allowed)
    click.echo(f"Registered {name} ({fingerprint(raw)}), may push to "
               f"{'any queue' if allowed is None else ', '.join(allowed) or 'no queue'}.")


@devices.command("list")
@_DB
@json_flag
@click.pass_context
def devices_list(ctx: click.Context, db: Path | None, as_json: bool) -> None:
    """List the devices this server knows: registered, revoked, or only heard from."""
    from edgeq.sync.keys import fingerprint

    found = _open(ctx, db).devices()
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
@_DB
@click.pass_context
def devices_revoke(ctx: click.Context, name: str, db: Path | None) -> None:
    """Revoke device NAME: the server refuses its requests from now on (re-add to restore)."""
    _open(ctx, db).revoke_device(name)
    click.echo(f"Revoked {name}.")

"""``edgeq keys``: a device's signing key pair, and store keys for encryption at rest.

    edgeq keys new --out device.key                 # device.key (0600) + device.pub
    edgeq keys new-store-key --out store.key        # a key for encryption at rest
    edgeq keys rotate --db device.db --key-file store.key --new-key
"""

from __future__ import annotations

from pathlib import Path

import click

from edgeq.cli.base import emit_json
from edgeq.cli.format import QUEUE_NAME
from edgeq.cli.options import ADMIN, db_option, open_store, output_options, wants_json
from edgeq.crypto import StoreKeys
from edgeq.errors import EdgeqError

__all__ = ["keys"]


@click.group("keys")
def keys() -> None:
    """Device key pairs for signed sync (Ed25519), and store keys for encryption at rest."""


@keys.command("new")
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The private key file to write (mode 0600); the public key goes next to it, its suffix "
                   "replaced by .pub (dev1.key: dev1.pub).")
@click.option("--force", is_flag=True, help="Replace existing key files.")
@output_options
@click.pass_context
def keys_new(ctx: click.Context, out: Path, force: bool, as_json: bool) -> None:
    """Make a key pair for a device and print its public key's fingerprint.

    OUT gets the private key; the public key goes beside it with the suffix
    .pub in place of OUT's (dev1.key: dev1.pub; a name without a suffix gets
    .pub added).

    \b
    Examples:
      edgeq keys new --out /etc/edgeq/device.key     # device.key and device.pub
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
@click.pass_context
def keys_fingerprint(ctx: click.Context, path: Path) -> None:
    """Print the fingerprint of a public (.pub) or private key file."""
    from edgeq.sync.keys import KeyFileError, fingerprint, load_private_key, load_public_key, public_bytes

    data = path.read_bytes()
    try:
        raw = public_bytes(load_private_key(path)) if b"PRIVATE KEY" in data else load_public_key(path)
    except KeyFileError as exc:
        raise click.BadParameter(str(exc), ctx, param_hint="'PATH'") from None
    click.echo(fingerprint(raw))


@keys.command("new-store-key")
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The key file to write (mode 0600). Keep it out of the database's directory.")
@click.option("--force", is_flag=True, help="Replace an existing key file (its data becomes unreadable!).")
def keys_new_store_key(out: Path, force: bool) -> None:
    """Make a 256-bit store key for encrypted queues (AES-256-GCM).

    Give it to the queue manager with keys=PATH, or with EDGEQ_STORE_KEY_FILE=PATH.

    \b
    Examples:
      edgeq keys new-store-key --out /etc/edgeq/store.key
      EDGEQ_STORE_KEY_FILE=/etc/edgeq/store.key edgeq --db d.db queue define PAY --encryption aes-256-gcm
    """
    if out.exists() and not force:
        raise click.ClickException(f"{out} exists: it may be the only key to a store; give --force to replace it")
    StoreKeys.generate().save(out)
    click.echo(f"Wrote store key file {out} (key k1, mode 0600).")


def _key_ring(ctx: click.Context, param: click.Parameter, path: Path) -> tuple[Path, StoreKeys]:
    """``--key-file`` and the key ring it holds (a file that holds none is a bad value)."""
    try:
        return path, StoreKeys.load(path)
    except EdgeqError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


@keys.command("rotate")
@db_option("The store (default: the group's --db).")
@click.option("--key-file", required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              callback=_key_ring, help="The store key file.")
@click.option("--new-key", is_flag=True, help="First add a fresh key to the file and make it current.")
@click.option("--queue", "queue_name", type=QUEUE_NAME, help="Only this queue (default: every encrypted queue).")
@click.option("--batch", default=500, show_default=True, type=click.IntRange(1), help="Rows per transaction.")
@click.pass_context
def keys_rotate(ctx: click.Context, db: Path | None, key_file: tuple[Path, StoreKeys], new_key: bool,
                queue_name: str | None, batch: int) -> None:
    """Re-seal encrypted queues under the current store key, in bounded batches.

    Queues stay in use meanwhile; after a crash, run it again to finish. Keep
    old keys in the file until no row uses them.

    \b
    Examples:
      edgeq keys rotate --db device.db --key-file store.key --new-key
      edgeq keys rotate --db device.db --key-file store.key            # resume
    """
    key_file_path, ring = key_file
    if new_key:
        ring = ring.with_new_key()
        ring.save(key_file_path)  # saved first: a crash after this leaves a file that opens every row
        click.echo(f"Added key {ring.current} to {key_file_path}; it is now current.")
    done = open_store(ctx, ADMIN, db=db, keys=ring).rotate_keys(queue_name, batch=batch)
    click.echo(f"Re-sealed {done} message(s) under key {ring.current}.")


"""``edgeq keys``: a device's signing key pair, store keys for encryption at rest, trusted operator keys."""

from __future__ import annotations

from pathlib import Path

import click

from edgeq.admin.store import AdminKey
from edgeq.admin.wire import ACTIONS, INQUIRE_ACTIONS, check_key_id, raw_public_key
from edgeq.cli.base import emit_json
from edgeq.cli.options import ADMIN, EXISTING, db_option, open_store, output_options, wants_json
from edgeq.cli.params import QUEUE_NAME
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
    """Make a key pair for a device (OUT, and OUT with .pub as its suffix); print its fingerprint.

    \b
    Example:
      edgeq keys new --out /etc/edgeq/device.key     # device.key and device.pub
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
    """Make a 256-bit store key for encrypted queues (AES-256-GCM), for EDGEQ_STORE_KEY_FILE.

    \b
    Examples:
      edgeq keys new-store-key --out /etc/edgeq/store.key
      EDGEQ_STORE_KEY_FILE=/etc/edgeq/store.key edgeq --db d.db queue define PAY --encryption aes-256-gcm
    """
    if out.exists() and not force:
        raise click.ClickException(
            f"{out} exists: it may be the only key to a store; give --force to replace it")
    StoreKeys.generate().save(out)
    click.echo(f"Wrote store key file {out} (key k1, mode 0600).")


def _key_ring(ctx: click.Context, param: click.Parameter, path: Path) -> tuple[Path, StoreKeys]:
    try:
        return path, StoreKeys.load(path)
    except EdgeqError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


@keys.command("rotate")
@db_option("The store (default: the group's --db).")
@click.option("--key-file", required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              callback=_key_ring, help="The store key file.")
@click.option("--new-key", is_flag=True, help="First add a fresh key to the file and make it current.")
@click.option("--queue", "queue_name", type=QUEUE_NAME,
              help="Only this queue (default: every encrypted queue).")
@click.option("--batch", default=500, show_default=True, type=click.IntRange(1), help="Rows per transaction.")
@click.pass_context
def keys_rotate(ctx: click.Context, db: Path | None, key_file: tuple[Path, StoreKeys], new_key: bool,
                queue_name: str | None, batch: int) -> None:
    """Re-seal encrypted queues under the current store key, in bounded batches (run again to resume).

    \b
    Example:
      edgeq keys rotate --db device.db --key-file store.key --new-key
    """
    key_file_path, ring = key_file
    if new_key:
        ring = ring.with_new_key()
        ring.save(key_file_path)  # saved first: a crash after this leaves a file that opens every row
        click.echo(f"Added key {ring.current} to {key_file_path}; it is now current.")
    done = open_store(ctx, ADMIN, db=db, keys=ring).rotate_keys(queue_name, batch=batch)
    click.echo(f"Re-sealed {done} message(s) under key {ring.current}.")


# -- operator keys for admin requests (docs/admin.md) ---------------------------------------------


def _admin_key_id(ctx: click.Context, param: click.Parameter, value: str) -> str:
    try:
        return check_key_id(value)
    except EdgeqError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


def _public_key_file(ctx: click.Context, param: click.Parameter, path: Path) -> bytes:
    try:
        return raw_public_key(path.read_bytes())
    except (EdgeqError, OSError) as exc:
        raise click.BadParameter(f"{path}: {exc}", ctx, param) from None


def _action_list(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    actions = tuple(a.strip() for a in value.split(",") if a.strip())
    unknown = [a for a in actions if a != "*" and a not in ACTIONS]
    if not actions or unknown:
        raise click.BadParameter(f"unknown action(s) {', '.join(unknown) or '(none given)'}: "
                                 f"use a comma-separated list of {', '.join(ACTIONS)}, or *", ctx, param)
    return actions


def _admin_key_json(key: AdminKey) -> dict[str, object]:
    from edgeq.cli.format import format_time
    from edgeq.sync.keys import fingerprint

    return {"key_id": key.key_id, "fingerprint": fingerprint(key.public_key), "actions": list(key.actions),
            "added_ms": key.added_ms, "added": format_time(key.added_ms)}


@keys.command("trust-admin")
@db_option("The device's store (default: the group's --db).")
@click.argument("key_id", callback=_admin_key_id)
@click.argument("public_key_file", metavar="PUBLIC_KEY_FILE", callback=_public_key_file,
                type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--actions", callback=_action_list, metavar="A,B",
              help=f"The actions its requests may run, comma-separated (default: every one): "
                   f"{', '.join(ACTIONS)}.")
@click.option("--inquire-only", is_flag=True, help=f"Only the inquiries: {', '.join(INQUIRE_ACTIONS)}.")
@output_options
@click.pass_context
def keys_trust_admin(ctx: click.Context, db: Path | None, key_id: str, public_key_file: bytes,
                     actions: tuple[str, ...] | None, inquire_only: bool, as_json: bool) -> None:
    """Trust operator key KEY_ID (its public key in PUBLIC_KEY_FILE) to sign admin requests here.

    \b
    Example:
      edgeq keys trust-admin --db device.db noc noc.pub --inquire-only
    """
    if inquire_only and actions is not None:
        raise click.UsageError("give --actions or --inquire-only, not both", ctx)
    chosen = INQUIRE_ACTIONS if inquire_only else actions or ("*",)
    key = open_store(ctx, EXISTING, db=db).trust_admin_key(key_id, public_key_file, actions=chosen)
    shown = _admin_key_json(key)
    if wants_json(ctx, as_json):
        emit_json(shown)
        return
    what = "every action" if key.actions == ("*",) else ", ".join(key.actions)
    click.echo(f"Trusted admin key {key.key_id} ({shown['fingerprint']}) for {what}.")


@keys.command("admin-list")
@db_option("The device's store (default: the group's --db).")
@output_options
@click.pass_context
def keys_admin_list(ctx: click.Context, db: Path | None, as_json: bool) -> None:
    """List the operator keys this device trusts, and the actions each may run."""
    from edgeq.cli.views import format_table

    trusted = open_store(ctx, EXISTING, db=db).admin_keys()
    shown = [_admin_key_json(k) for k in trusted]
    if wants_json(ctx, as_json):
        emit_json(shown)
    elif not trusted:
        click.echo("No admin keys: this device runs no admin requests "
                   "(trust one with edgeq keys trust-admin).")
    else:
        rows = [(k.key_id, str(j["fingerprint"]), ",".join(k.actions), str(j["added"]))
                for k, j in zip(trusted, shown, strict=True)]
        click.echo(format_table(("KEY", "FINGERPRINT", "ACTIONS", "ADDED"), rows))


@keys.command("untrust-admin")
@db_option("The device's store (default: the group's --db).")
@click.argument("key_id", callback=_admin_key_id)
@click.pass_context
def keys_untrust_admin(ctx: click.Context, db: Path | None, key_id: str) -> None:
    """Stop trusting operator key KEY_ID: requests it signed are refused from now on."""
    qm = open_store(ctx, EXISTING, db=db)
    if not qm.untrust_admin_key(key_id):
        known = ", ".join(k.key_id for k in qm.admin_keys()) or "none"
        raise click.ClickException(
            f"admin key {key_id} is not trusted here (trusted: {known}); nothing changed")
    click.echo(f"Admin key {key_id} is no longer trusted.")

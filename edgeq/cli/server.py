"""``edgeq server``: administer a home server's store: the devices allowed to sync (``devices``), the
puts they left unconfirmed (``held``), what it refused of theirs (``refusals``), the console's password.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from edgeq.cli.base import emit_json
from edgeq.cli.format import format_duration, format_time
from edgeq.cli.options import (
    ADMIN,
    StoreUse,
    check_store,
    db_option,
    group_options,
    local_only,
    open_store,
    output_options,
    remote_api,
    remote_options,
    store_path,
    wants_json,
)
from edgeq.cli.params import DEVICE_NAME, DURATION, QM_NAME, QUEUE_NAME, QUEUE_NAMES
from edgeq.cli.tokens import PASSWORD_FILE, ROLE_OPTION, console_user, read_password, token
from edgeq.cli.views import (
    device_json,
    format_devices,
    format_held,
    format_refusals,
    held_json,
    keyed,
    refusal_json,
)

if TYPE_CHECKING:
    from edgeq.manager import QueueManager
    from edgeq.store.devices import DeviceRecord

__all__ = ["server"]

#: ``devices add --create``: a new home server store (named with --name, or as asked).
NEW_SERVER = StoreUse(create=True, unnamed="name the server's queue manager with --name, e.g. --name HOME",
                      announce=True)


@click.group("server")
def server() -> None:
    """Administer a home server's store: its devices, the puts they left unconfirmed, what it refused."""


@server.group("devices")
def devices() -> None:
    """The devices allowed to sync with this home server (signed requests)."""


_server_db = db_option("The server's store (default: the group's --db).")


def _public_key(ctx: click.Context, param: click.Parameter, value: Path) -> tuple[Path, bytes]:
    """The ``--public-key`` file and its raw key (a file that holds none is a bad value)."""
    from edgeq.sync.keys import KeyFileError, load_public_key

    try:
        return value, load_public_key(value)
    except KeyFileError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


_public_key_option = click.option(
    "--public-key", "public_key", required=True, callback=_public_key,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="The device's public key file (dev1.pub, written by `edgeq keys new --out dev1.key`).")
_force_option = click.option("--force", is_flag=True,
                             help="Register the key even if another device already has it.")


@devices.command("add")
@click.argument("name", type=DEVICE_NAME)
@_public_key_option
@click.option("--queues", type=QUEUE_NAMES,
              help="Comma-separated queues the device may push to (default: any).")
@_force_option
@click.option("--create", "--yes", "create", is_flag=True,
              help="Create the server's store if it does not exist, without asking (give --name too).")
@click.option("--name", "server_name", type=QM_NAME,
              help="The server's queue manager name, e.g. HOME: needed only to create its store.")
@_server_db
@remote_options
@click.pass_context
def devices_add(ctx: click.Context, name: str, public_key: tuple[Path, bytes], queues: list[str] | None,
                force: bool, create: bool, server_name: str | None, db: Path | None) -> None:
    """Register (or re-key, lifting a revocation) device NAME, its queue manager name.

    The server's store must exist (edgeq serve --name HOME creates it); if it does
    not, this offers to create it (--create does so without asking).

    \b
    Examples:
      edgeq keys new --out dev1.key        # on the device: dev1.key and dev1.pub
      edgeq server devices add DEV1 --public-key dev1.pub --queues ORDERS,TELEMETRY --db home.db
      edgeq server devices add DEV1 --public-key dev1.pub --db home.db --create --name HOME
      edgeq server devices add DEV1 --public-key dev1.pub --server http://home:8471 --token-file ops.token
    """
    from edgeq.sync.keys import fingerprint

    path, raw = public_key
    api = remote_api(ctx)
    if api is not None:
        if create or server_name is not None:
            raise click.UsageError("--create and --name make a local store: not with --server")
        others = api.register_device(name, path.read_text(encoding="utf-8"), queues, share_key=force,
                                     replace=True)
    else:
        others = _open_or_create(ctx, db, create, server_name).register_device(
            name, raw, queues=queues, share_key=force)
    _warn_shared(path, others)
    click.echo(f"Registered {name} ({fingerprint(raw)}), may push to {_may_push(queues)}.")


@devices.command("rekey")
@click.argument("name", type=DEVICE_NAME)
@_public_key_option
@_force_option
@_server_db
@remote_options
@click.pass_context
def devices_rekey(ctx: click.Context, name: str, public_key: tuple[Path, bytes], force: bool,
                  db: Path | None) -> None:
    """Re-register device NAME with a new key (a replaced device): its queues are kept, a revocation
    lifted, and requests signed with the old key refused from now on.

    \b
    Examples:
      edgeq server devices rekey DEV1 --public-key dev1-new.pub --db home.db
      edgeq server devices rekey DEV1 --public-key new.pub --server http://home:8471 --token-file ops.token
    """
    from edgeq.sync.keys import fingerprint

    path, raw = public_key
    api = remote_api(ctx)
    if api is not None:
        others = api.rekey_device(name, path.read_text(encoding="utf-8"), share_key=force)
    else:
        others = open_store(ctx, ADMIN, db=db).exchange.rekey_device(name, raw, share_key=force)
    _warn_shared(path, others)
    click.echo(f"Re-keyed {name} ({fingerprint(raw)}); requests signed with its old key are refused.")


@devices.command("set-queues")
@click.argument("name", type=DEVICE_NAME)
@click.option("--queue", "queues", multiple=True, type=QUEUE_NAME,
              help="A queue the device may push to (repeat it for more).")
@click.option("--any", "any_queue", is_flag=True, help="Let it push to any queue.")
@click.option("--none", "no_queue", is_flag=True, help="Let it push to no queue (its admin replies go).")
@_server_db
@remote_options
@click.pass_context
def devices_set_queues(ctx: click.Context, name: str, queues: tuple[str, ...], any_queue: bool,
                       no_queue: bool, db: Path | None) -> None:
    """Change the queues registered device NAME may push to, from its next request.

    \b
    Examples:
      edgeq server devices set-queues DEV1 --queue ORDERS --queue TELEMETRY --db home.db
      edgeq server devices set-queues DEV1 --any --server http://home:8471 --token-file ops.token
    """
    if (bool(queues) + any_queue + no_queue) != 1:
        raise click.UsageError("give the queues (--queue Q, repeated), or --any, or --none: one of them")
    wanted = None if any_queue else list(queues)
    api = remote_api(ctx)
    if api is not None:
        api.set_device_queues(name, wanted)
    else:
        open_store(ctx, ADMIN, db=db).exchange.set_device_queues(name, wanted)
    click.echo(f"{name} may push to {_may_push(wanted)} from its next request.")


def _may_push(queues: list[str] | None) -> str:
    return "any queue" if queues is None else ", ".join(queues) or "no queue"


def _warn_shared(path: Path, others: list[str]) -> None:
    if others:
        click.echo(f"Warning: the key in {path} is also registered to {', '.join(others)}; requests signed "
                   "with it may come from any of them.", err=True)


def _open_or_create(ctx: click.Context, db: Path | None, create: bool, name: str | None) -> QueueManager:
    """The server's store; a missing one is created if ``create``, or if the user says so."""
    path = store_path(ctx, db)
    if path.exists() and path.stat().st_size > 0:
        return open_store(ctx, ADMIN, db=db, name=name)  # a --name must be the store's
    name = name or group_options(ctx).name
    if not create:
        if not click.confirm(f"{path} does not exist. Create a new home server store there?", err=True):
            raise click.ClickException(
                f"{path} does not exist, and nothing was created: give the server's store "
                "(edgeq serve --db), or create it with --create --name HOME"
            )
        if name is None:
            name = click.prompt("The server's queue manager name", default="HOME", type=QM_NAME, err=True)
    return check_store(ctx, NEW_SERVER, db=db, name=name).open(ctx)


@devices.command("list")
@_server_db
@remote_options
@output_options
@click.pass_context
def devices_list(ctx: click.Context, db: Path | None, as_json: bool) -> None:
    """List the devices this server knows: registered, revoked, or only heard from."""
    api = remote_api(ctx)
    found = api.devices() if api is not None else keyed(open_store(ctx, ADMIN, db=db).devices())
    if wants_json(ctx, as_json):
        emit_json([device_json(d, key) for d, key in found])
    else:
        click.echo(format_devices(found))


@devices.command("revoke")
@click.argument("name", type=DEVICE_NAME)
@_server_db
@remote_options
@click.pass_context
def devices_revoke(ctx: click.Context, name: str, db: Path | None) -> None:
    """Revoke device NAME: the server refuses its requests from now on (re-add to restore).

    \b
    Examples:
      edgeq server devices revoke DEV1 --db home.db
      edgeq server devices revoke DEV1 --server http://home:8471 --token-file ops.token
    """
    api = remote_api(ctx)
    after: DeviceRecord | None
    if api is not None:
        revoked, after = api.revoke_device(name)
    else:
        revoked, after = _revoke(open_store(ctx, ADMIN, db=db), name)
    if not revoked and after is not None and after.revoked_ms is not None:
        click.echo(f"{name} was already revoked at {format_time(after.revoked_ms)}; nothing changed.")
        return
    when = "" if after is None or after.revoked_ms is None else f" at {format_time(after.revoked_ms)}"
    click.echo(f"Revoked {name}{when}.")


def _revoke(qm: QueueManager, name: str) -> tuple[bool, DeviceRecord | None]:
    """Revoke ``name`` unless it was already: whether it is revoked now, and the device after."""
    before = qm.device(name)
    if before is not None and before.revoked_ms is not None:
        return False, before
    qm.revoke_device(name)
    return True, qm.device(name)


server.add_command(token)
server.add_command(console_user)


@server.command("set-console-password")
@PASSWORD_FILE
@ROLE_OPTION
@_server_db
@local_only
@click.pass_context
def set_console_password(ctx: click.Context, password_file: Path | None, role: str, db: Path | None) -> None:
    """Set the password of the console account named after --role (operator, or viewer).

    The same as `console-user add operator --role operator --replace` (or viewer): that
    account's sessions end; other accounts are untouched. Stored as a salted scrypt hash.

    \b
    Examples:
      edgeq server set-console-password --db home.db
      edgeq server set-console-password --password-file console.pw --db home.db
    """
    from edgeq.sync.server.console.auth import set_password

    password = read_password(password_file)
    qm = open_store(ctx, ADMIN, db=db)
    set_password(qm.path, password, "viewer" if role == "viewer" else "operator")
    click.echo(f"Console password of account {role!r} ({role}) set for {qm.name}; its sessions signed in "
               "before are signed out.")


@server.group("held")
def held() -> None:
    """Puts devices left unconfirmed: stored locked and invisible, awaiting a confirm.

    The server undoes them itself after its hold (edgeq serve --hold, 1h by
    default); a device's resend of an undone put is stored afresh.
    """


_device_option = click.option("--device", type=DEVICE_NAME,
                              help="Only this device's (default: every device's).")


@held.command("list")
@_device_option
@click.option("--older-than", type=DURATION, help="Only those held at least this long (30m, 2h...).")
@_server_db
@remote_options
@output_options
@click.pass_context
def held_list(ctx: click.Context, device: str | None, older_than: int | None, db: Path | None,
              as_json: bool) -> None:
    """Show the unconfirmed puts the server holds, by device and queue.

    \b
    Examples:
      edgeq server held list --db home.db
      edgeq server held list --device DEV1 --older-than 30m --json --db home.db
      edgeq server held list --server http://home:8471 --token-file viewer.token
    """
    api = remote_api(ctx)
    if api is not None:
        groups, now = api.held(device, older_than)
    else:
        qm = open_store(ctx, ADMIN, db=db)
        groups, now = qm.exchange.held_puts(device, older_than_ms=older_than), qm.now_ms()
    if wants_json(ctx, as_json):
        emit_json([held_json(g, now) for g in groups])
    else:
        click.echo(format_held(groups, now))


@held.command("clear")
@_device_option
@click.option("--older-than", type=DURATION, default="0", show_default=True,
              help="Only those held at least this long (30m, 2h...).")
@_server_db
@remote_options
@output_options
@click.pass_context
def held_clear(
    ctx: click.Context, device: str | None, older_than: int, db: Path | None, as_json: bool
) -> None:
    """Undo unconfirmed puts now, as the server's hold would: as if they never arrived
    (rules see them deleted); each device's resend is stored afresh.

    \b
    Examples:
      edgeq server held clear --device DEV1 --db home.db
      edgeq server held clear --older-than 30m --server http://home:8471 --token-file ops.token
    """
    api = remote_api(ctx)
    undone = (int(api.clear_held(device, older_than)["undone"]) if api is not None
              else open_store(ctx, ADMIN, db=db).exchange.undo_held_puts(device, older_than_ms=older_than))
    if wants_json(ctx, as_json):
        emit_json({"undone": undone, "device": device, "older_than_ms": older_than})
        return
    whose = f"of {device}" if device is not None else "of every device"
    age = f", held {format_duration(older_than)} or longer" if older_than else ""
    click.echo(f"Undid {undone} unconfirmed put(s) {whose}{age}; a device's resend is stored afresh.")


@server.group("refusals")
def refusals() -> None:
    """Messages the server refused (no such queue, queue full, too large), per device, queue and reason.

    The device keeps a refused message and offers it again (up to its queue's refusal
    limit, then it is dead-lettered there): fix the cause here, e.g. define the queue.
    """


@refusals.command("list")
@_device_option
@_server_db
@remote_options
@output_options
@click.pass_context
def refusals_list(ctx: click.Context, device: str | None, db: Path | None, as_json: bool) -> None:
    """Show what the server refused, per device, queue and reason, the latest first.

    \b
    Examples:
      edgeq server refusals list --db home.db
      edgeq server refusals list --device DEV1 --json --db home.db
      edgeq server refusals list --server http://home:8471 --token-file viewer.token
    """
    api = remote_api(ctx)
    found = (api.refusals(device) if api is not None
             else open_store(ctx, ADMIN, db=db).exchange.device_refusals(device))
    if wants_json(ctx, as_json):
        emit_json([refusal_json(r) for r in found])
    else:
        click.echo(format_refusals(found))

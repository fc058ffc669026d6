"""``edgeq server token``: the management API's tokens (create, list, revoke), kept hashed in the
server's store (docs/management-api.md); ``edgeq server console-user``: the console's accounts."""

from __future__ import annotations

from pathlib import Path

import click

from edgeq.cli.base import emit_json
from edgeq.cli.format import format_time
from edgeq.cli.options import ADMIN, db_option, local_only, open_store, output_options, wants_json
from edgeq.cli.views import format_table

__all__ = ["PASSWORD_FILE", "ROLE_OPTION", "console_user", "read_password", "token"]

_db = db_option("The server's store (default: the group's --db).")
#: ``--role``: what a token (or the console's password) may do
ROLE_OPTION = click.option("--role", type=click.Choice(["viewer", "operator"]), default="operator",
                           show_default=True, help="viewer: read only; operator: read and act.")


@click.group("token")
def token() -> None:
    """Tokens for scripts using the management API (/api/v1, served with edgeq serve --console)."""


@token.command("create")
@click.option("--name", required=True, help="Who uses it, e.g. grafana: the actions it does are recorded so.")
@ROLE_OPTION
@_db
@local_only
@click.pass_context
def token_create(ctx: click.Context, name: str, role: str, db: Path | None) -> None:
    """Create a token and print it, once: only its hash is kept.

    \b
    Examples:
      edgeq server token create --name grafana --role viewer --db home.db > grafana.token
      curl -H "Authorization: Bearer $(cat grafana.token)" http://127.0.0.1:8471/api/v1/queues
    """
    from edgeq.sync.server.api.tokens import create_token

    qm = open_store(ctx, ADMIN, db=db)
    _, text = create_token(qm.path, name, "viewer" if role == "viewer" else "operator", now_ms=qm.now_ms())
    click.echo(f"Created token {name!r} ({role}) for {qm.name}; it is shown this once:", err=True)
    click.echo(text)


@token.command("list")
@_db
@local_only
@output_options
@click.pass_context
def token_list(ctx: click.Context, db: Path | None, as_json: bool) -> None:
    """List the tokens (never their secrets), revoked ones too."""
    from edgeq.sync.server.api.tokens import list_tokens

    found = list_tokens(open_store(ctx, ADMIN, db=db).path)
    if wants_json(ctx, as_json):
        emit_json([{"name": t.name, "role": t.role, "id": t.id, "created_ms": t.created_ms,
                    "revoked_ms": t.revoked_ms} for t in found])
    elif not found:
        click.echo("No tokens: edgeq server token create --name NAME --role viewer")
    else:
        click.echo(format_table(("NAME", "ROLE", "ID", "CREATED", "REVOKED"), [
            (t.name, t.role, t.id, format_time(t.created_ms),
             "-" if t.revoked_ms is None else format_time(t.revoked_ms)) for t in found]))


@token.command("revoke")
@click.argument("name")
@_db
@local_only
@click.pass_context
def token_revoke(ctx: click.Context, name: str, db: Path | None) -> None:
    """Revoke token NAME: the API refuses it (401) from its next request on."""
    from edgeq.sync.server.api.tokens import list_tokens, revoke_token

    qm = open_store(ctx, ADMIN, db=db)
    if revoke_token(qm.path, name, now_ms=qm.now_ms()):
        click.echo(f"Revoked token {name!r}.")
        return
    known = {t.name: t for t in list_tokens(qm.path)}
    if name not in known:
        raise click.ClickException(f"there is no token named {name!r}: see edgeq server token list")
    click.echo(f"Token {name!r} was already revoked; nothing changed.")


@click.group("console-user")
def console_user() -> None:
    """The console's accounts (edgeq serve --console): a name, a password and a role each."""


def read_password(password_file: Path | None) -> str:
    """A console password: ``password_file``'s first line, else asked twice without echo."""
    from edgeq.sync.server.console.auth import MIN_PASSWORD_CHARS

    if password_file is not None:
        lines = password_file.read_text(encoding="utf-8").splitlines()
        password = lines[0] if lines else ""
    else:
        password = click.prompt("Console password", hide_input=True, confirmation_prompt=True, err=True)
    if len(password) < MIN_PASSWORD_CHARS:
        raise click.BadParameter(f"the password must have at least {MIN_PASSWORD_CHARS} characters",
                                 param_hint="'--password-file'" if password_file else "password")
    return password


PASSWORD_FILE = click.option("--password-file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
                             help="Read the password from this file's first line (default: ask, twice, "
                                  "without echo).")


@console_user.command("add")
@click.argument("name")
@ROLE_OPTION
@PASSWORD_FILE
@click.option("--replace", is_flag=True, help="Give an existing account a new password and role (its "
                                              "sessions end).")
@_db
@local_only
@click.pass_context
def console_user_add(ctx: click.Context, name: str, role: str, password_file: Path | None, replace: bool,
                     db: Path | None) -> None:
    """Add console account NAME: it signs in with its own password and acts as its role.

    \b
    Examples:
      edgeq server console-user add alice --role operator --db home.db
      edgeq server console-user add grafana-wall --role viewer --password-file wall.pw --db home.db
    """
    from edgeq.sync.server.console.auth import add_account

    qm = open_store(ctx, ADMIN, db=db)
    add_account(qm.path, name, read_password(password_file), "viewer" if role == "viewer" else "operator",
                replace=replace)
    click.echo(f"Console account {name!r} ({role}) {'set' if replace else 'added'} for {qm.name}.")


@console_user.command("list")
@_db
@local_only
@output_options
@click.pass_context
def console_user_list(ctx: click.Context, db: Path | None, as_json: bool) -> None:
    """List the console's accounts and their roles (never their passwords)."""
    from edgeq.sync.server.console.auth import list_accounts

    found = list_accounts(open_store(ctx, ADMIN, db=db).path)
    if wants_json(ctx, as_json):
        emit_json([{"name": a.name, "role": a.role} for a in found])
    elif not found:
        click.echo("No console accounts: edgeq server console-user add NAME --role operator")
    else:
        click.echo(format_table(("NAME", "ROLE"), [(a.name, a.role) for a in found]))


@console_user.command("remove")
@click.argument("name")
@_db
@local_only
@click.pass_context
def console_user_remove(ctx: click.Context, name: str, db: Path | None) -> None:
    """Remove console account NAME: its sessions are refused from their next request on."""
    from edgeq.sync.server.console.auth import remove_account

    qm = open_store(ctx, ADMIN, db=db)
    if not remove_account(qm.path, name):
        raise click.ClickException(f"there is no console account named {name!r}: see edgeq server "
                                   "console-user list")
    click.echo(f"Removed console account {name!r}; its sessions are signed out.")

"""``edgeq server token``: the management API's tokens (create, list, revoke), kept hashed in the
server's store (docs/management-api.md)."""

from __future__ import annotations

from pathlib import Path

import click

from edgeq.cli.base import emit_json
from edgeq.cli.format import format_time
from edgeq.cli.options import ADMIN, db_option, local_only, open_store, output_options, wants_json
from edgeq.cli.views import format_table

__all__ = ["ROLE_OPTION", "token"]

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

"""The options commands share, one decorator per set, and ``open_store``, the one way to open a store."""

from __future__ import annotations

import shlex
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from edgeq.cli.params import QM_NAME

if TYPE_CHECKING:  # imported by open(): `edgeq --version` and --help load no store
    from edgeq.manager import QueueManager

if TYPE_CHECKING:
    from edgeq.sync.server.api.client import ApiClient

__all__ = [
    "ADMIN",
    "CREATE",
    "EXISTING",
    "SERVICE",
    "CheckedStore",
    "GroupOptions",
    "StoreUse",
    "check_store",
    "db_option",
    "group_options",
    "local_only",
    "log_level_option",
    "name_option",
    "need",
    "open_store",
    "output_options",
    "remote_api",
    "remote_options",
    "remote_words",
    "require_queue",
    "store_options",
    "store_path",
    "stored_name",
    "wants_json",
]

F = TypeVar("F", bound=Callable[..., Any])


# -- the options ---------------------------------------------------------------------------


@dataclass(slots=True)
class GroupOptions:
    """The ``edgeq`` group's options, for its commands."""

    db: Path | None
    name: str | None
    json: bool


def group_options(ctx: click.Context) -> GroupOptions:
    """The group's options from ``ctx``."""
    return ctx.find_object(GroupOptions) or GroupOptions(None, None, False)


def db_option(help: str, *, envvar: str | None = None) -> Callable[[F], F]:
    """``--db``, described by ``help``; the group's when not given."""
    def decorate(f: F) -> F:
        return click.option(
            "--db", type=click.Path(dir_okay=False, path_type=Path), envvar=envvar,
            show_envvar=envvar is not None, help=help,
        )(f)

    return decorate


def name_option(help: str, *, envvar: str | None = None) -> Callable[[F], F]:
    """``--name``, described by ``help``."""
    def decorate(f: F) -> F:
        return click.option("--name", type=QM_NAME, envvar=envvar, show_envvar=envvar is not None,
                            help=help)(f)

    return decorate


def store_options(f: F) -> F:
    """The group's ``--db`` and ``--name``."""
    for decorator in reversed((
        db_option("The store: an SQLite file holding one queue manager's queues.", envvar="EDGEQ_DB"),
        name_option("Queue manager name; needed only to create a new store (checked against it otherwise).",
                    envvar="EDGEQ_NAME"),
    )):
        f = decorator(f)
    return f


def output_options(f: F) -> F:
    """``--json``."""
    return click.option("--json", "as_json", is_flag=True,
                        help="Print JSON (for scripts) instead of text.")(f)


def wants_json(ctx: click.Context, as_json: bool) -> bool:
    """Whether the command's or the group's ``--json`` was given."""
    return as_json or group_options(ctx).json


_SERVER, _TOKEN_FILE = "edgeq.remote.server", "edgeq.remote.token_file"


def _remember(ctx: click.Context, param: click.Parameter, value: object) -> None:
    if value is not None:
        ctx.meta[_TOKEN_FILE if param.name == "token_file" else _SERVER] = value


def _refuse(ctx: click.Context, param: click.Parameter, value: object) -> None:
    if value is not None:
        raise click.UsageError(
            f"{ctx.command_path} is not available remotely: it manages the store's own credentials (API "
            "tokens, console accounts), so it needs the store itself: run it on the server's host with --db")


def _server_options(callback: Callable[[click.Context, click.Parameter, object], None],
                    hidden: bool) -> Callable[[F], F]:
    def decorate(f: F) -> F:
        f = click.option("--token-file", type=click.Path(dir_okay=False, path_type=Path), expose_value=False,
                         callback=callback, hidden=hidden, help="With --server: the API token's file "
                         "(chmod 600; default: $EDGEQ_TOKEN).")(f)
        return click.option("--server", metavar="URL", expose_value=False, callback=callback, hidden=hidden,
                            help="Run this on a home server through its management API, e.g. "
                                 "http://home:8471 (edgeq serve --console), instead of --db.")(f)

    return decorate


#: ``--server URL --token-file F``: the command runs through a home server's management API
#: (:func:`remote_api`); ``local_only``: the same options, hidden and refused (the commands managing the
#: store's credentials: tokens and console accounts, on purpose).
remote_options = _server_options(_remember, hidden=False)
local_only = _server_options(_refuse, hidden=True)


def remote_api(ctx: click.Context) -> ApiClient | None:
    """The management API client the command's ``--server`` asks for (closed when it ends), or None."""
    server, token_file = ctx.meta.get(_SERVER), ctx.meta.get(_TOKEN_FILE)
    if server is None:
        if token_file is not None:
            raise click.UsageError("--token-file goes with --server URL")
        return None
    if ctx.params.get("db") is not None:
        raise click.UsageError("give --server URL (a remote store) or --db PATH (a local one), not both")
    need("httpx", "sync")
    from edgeq.sync.server.api.client import ApiClient, load_token

    client = ApiClient(str(server), load_token(token_file))
    ctx.call_on_close(client.close)
    return client


def remote_words(ctx: click.Context) -> list[str]:
    """The ``--server URL --token-file F`` the command was given, to repeat in a hint."""
    words = ["--server", str(ctx.meta.get(_SERVER))]
    token_file = ctx.meta.get(_TOKEN_FILE)
    return words if token_file is None else [*words, "--token-file", str(token_file)]


_LOG_LEVELS = click.Choice(["debug", "info", "warning", "error"], case_sensitive=False)


def log_level_option(f: F) -> F:
    """``--log-level``."""
    return click.option("--log-level", type=_LOG_LEVELS, default="info", show_default=True)(f)


# -- the store -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StoreUse:
    """How a command uses its store: whether it may create it, and the advice its errors give."""

    #: Whether a missing (or empty) store file is created; that needs a queue manager name.
    create: bool
    #: Follows "PATH does not exist: " when the store may not be created ({db}: the path, shell-quoted).
    missing: str = ""
    #: Follows "PATH is a new store: " when it may be created but has no name.
    unnamed: str = ""
    #: Whether creating the store says so on stderr.
    announce: bool = False


#: The commands on a device's queues and rules: the store must exist.
EXISTING = StoreUse(
    create=False,
    missing="create a store by defining its first queue, e.g. "
            "edgeq --db {db} --name DEV1 queue define ORDERS",
)
#: ``edgeq queue define``: creates the store (given ``--name``) and says so on stderr.
CREATE = StoreUse(
    create=True,
    unnamed="name its queue manager with --name (or EDGEQ_NAME), e.g. "
            "edgeq --db {db} --name DEV1 queue define ...",
    announce=True,
)
#: ``edgeq serve``: creates the store given ``--name``, silently (it logs JSON on stderr). ``edgeq sync``
#: is EXISTING: a device's store is made by defining its queues, and a mistyped --db must not make one.
SERVICE = StoreUse(create=True, unnamed="name its queue manager with --name")
#: ``edgeq keys rotate`` and ``edgeq server devices ...``: administer a store that exists already.
ADMIN = StoreUse(create=False, missing="give an existing store (e.g. the one of edgeq serve --db)")


def store_path(ctx: click.Context, db: Path | None = None) -> Path:
    """The store's path: the command's ``--db``, else the group's, else a usage error."""
    path = db or group_options(ctx).db
    if path is None:
        raise click.ClickException("no store given: pass --db PATH (or set EDGEQ_DB)")
    return path


def stored_name(path: Path) -> str | None:
    """The queue manager name an edgeq store holds, read without writing to it (None if unreadable)."""
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error:
        return None
    try:
        row = conn.execute("SELECT value FROM edgeq_meta WHERE key = 'name'").fetchone()
    except sqlite3.Error:
        return None
    finally:
        conn.close()
    return None if row is None else str(row[0])


@dataclass(frozen=True, slots=True)
class CheckedStore:
    """A store path checked for what a command needs, before it is opened."""

    path: Path
    #: The queue manager name given (``--name``), if any: the new store's, or the one it must hold.
    name: str | None
    #: Whether the store is new (no file, or an empty one): opening creates it.
    fresh: bool
    use: StoreUse

    def open(self, ctx: click.Context, **qm_options: Any) -> QueueManager:
        from edgeq.manager import QueueManager

        qm = QueueManager(self.path, name=self.name, **qm_options)
        ctx.call_on_close(qm.close)
        if self.fresh and self.use.announce:
            click.echo(f"Created store {self.path} for queue manager {qm.name}.", err=True)
        return qm


def check_store(
    ctx: click.Context, use: StoreUse = EXISTING, *, db: Path | None = None, name: str | None = None
) -> CheckedStore:
    """Check the store a command names (its own --db/--name, else the group's), or fail saying what to do."""
    path = store_path(ctx, db)
    name = name or group_options(ctx).name
    fresh = not path.exists() or (path.is_file() and path.stat().st_size == 0)
    quoted = shlex.quote(str(path))
    if fresh and not use.create:
        raise click.ClickException(f"{path} does not exist: {use.missing.format(db=quoted)}")
    if fresh and not name:
        raise click.ClickException(f"{path} is a new store: {use.unnamed.format(db=quoted)}")
    if fresh and not path.parent.is_dir():
        raise click.ClickException(f"cannot create {path}: directory {path.parent} does not exist")
    stored = None if fresh or name is None else stored_name(path)
    if stored is not None and stored != name:
        raise click.ClickException(
            f"{path} belongs to queue manager {stored!r}, not {name!r}: drop --name "
            "(and EDGEQ_NAME) to use it, or give another --db"
        )
    return CheckedStore(path, name, fresh, use)


def open_store(
    ctx: click.Context, use: StoreUse = EXISTING, *, db: Path | None = None, name: str | None = None,
    **qm_options: Any,
) -> QueueManager:
    """Open the store a command works on (see :func:`check_store`), closed when the command ends."""
    return check_store(ctx, use, db=db, name=name).open(ctx, **qm_options)


def require_queue(qm: QueueManager, queue: str) -> None:
    """Fail with a command-line hint unless ``queue`` is defined (one differing only in case is named)."""
    names = qm.queue_names()
    if queue not in names:
        same = [name for name in names if name.lower() == queue.lower()]
        if same:
            raise click.ClickException(
                f"no queue {queue!r} on queue manager {qm.name}: did you mean {same[0]}? (queue names are "
                "case-sensitive)"
            )
        known = f"defined: {', '.join(names[:10])}" if names else "none are defined"
        raise click.ClickException(
            f"no queue {queue!r} on queue manager {qm.name} ({known}): "
            f"define it with `edgeq queue define {queue}`"
        )


def need(module: str, extra: str) -> None:
    """Fail with the extra to install when ``module`` (an optional stack) is missing."""
    try:
        __import__(module)
    except ImportError as exc:
        raise click.ClickException(
            f"this command needs {module}: install the {extra!r} extra, e.g. pip install 'edgeq[{extra}]'"
        ) from exc

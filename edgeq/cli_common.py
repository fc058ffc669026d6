"""Shared plumbing of the ``edgeq`` command line: error handling, opening the store, JSON."""

from __future__ import annotations

import json
import logging
import shlex
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click

from edgeq.errors import EdgeqError
from edgeq.manager import QueueManager
from edgeq.types import FieldValue

__all__ = [
    "EdgeqGroup",
    "Options",
    "emit_json",
    "json_flag",
    "log_to_stderr",
    "open_store",
    "parse_filter",
    "require_queue",
    "wants_json",
]

F = TypeVar("F", bound=Callable[..., Any])


class EdgeqGroup(click.Group):
    """A group that turns edgeq's own errors into one ``Error:`` line (exit 1), never a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command, turning edgeq, SQLite and OS errors into one ``Error:`` line (exit 1)."""
        try:
            return super().invoke(ctx)
        except EdgeqError as exc:
            raise click.ClickException(str(exc)) from exc
        except sqlite3.Error as exc:
            raise click.ClickException(f"SQLite failed: {exc}") from exc
        except OSError as exc:
            raise click.ClickException(str(exc)) from exc


class _WarningLine(logging.Handler):
    """Prints each warning or error edgeq logs (a rule that raised, a plugin that failed
    to load) as one ``Warning: ...`` line on stderr: the command itself still succeeded."""

    def emit(self, record: logging.LogRecord) -> None:
        """Echo the record as one ``Warning: ...`` line on stderr, naming its exception if any."""
        text = record.getMessage()
        if record.exc_info is not None and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            text += f": {type(exc).__name__}: {exc}"
        click.echo(f"Warning: {' '.join(text.split())}", err=True)


def log_to_stderr() -> None:
    """Send edgeq's log warnings to stderr as single lines, not tracebacks (idempotent)."""
    logger = logging.getLogger("edgeq")
    if not any(isinstance(h, _WarningLine) for h in logger.handlers):
        logger.addHandler(_WarningLine(logging.WARNING))


@dataclass(slots=True)
class Options:
    """The group's options, shared with every command through ``ctx.obj``."""

    db: Path | None
    name: str | None
    json: bool


def json_flag(f: F) -> F:
    """Add a command-level ``--json`` flag (the same as the group's)."""
    return click.option("--json", "as_json", is_flag=True, help="Print JSON (for scripts) instead of text.")(f)


def emit_json(value: object) -> None:
    """Print ``value`` as indented JSON on stdout."""
    click.echo(json.dumps(value, indent=2, ensure_ascii=False))


def open_store(ctx: click.Context, *, create: bool = False) -> QueueManager:
    """Open the store from --db; only ``create`` commands may make a new one (and need --name)."""
    opts: Options = ctx.find_object(Options) or Options(None, None, False)
    if opts.db is None:
        raise click.ClickException("no store given: pass --db PATH (or set EDGEQ_DB)")
    path = opts.db
    fresh = not path.exists() or (path.is_file() and path.stat().st_size == 0)
    if fresh and not create:
        raise click.ClickException(
            f"{path} does not exist: create a store by defining its first queue, e.g. "
            f"edgeq --db {shlex.quote(str(path))} --name DEV1 queue define ORDERS"
        )
    if fresh and not opts.name:
        raise click.ClickException(
            f"{path} is a new store: name its queue manager with --name (or EDGEQ_NAME), e.g. "
            f"edgeq --db {shlex.quote(str(path))} --name DEV1 queue define ..."
        )
    if fresh and not path.parent.is_dir():
        raise click.ClickException(f"cannot create {path}: directory {path.parent} does not exist")
    qm = QueueManager(path, name=opts.name if fresh else None)
    ctx.call_on_close(qm.close)
    if not fresh and opts.name is not None and opts.name != qm.name:
        raise click.ClickException(
            f"{path} belongs to queue manager {qm.name!r}, not {opts.name!r}: drop --name "
            "(and EDGEQ_NAME) to use it, or give another --db"
        )
    if fresh:
        click.echo(f"Created store {path} for queue manager {qm.name}.", err=True)
    return qm


def require_queue(qm: QueueManager, queue: str) -> None:
    """Fail with a command-line hint unless ``queue`` is defined."""
    names = qm.queue_names()
    if queue not in names:
        known = f"defined: {', '.join(names[:10])}" if names else "none are defined"
        raise click.ClickException(
            f"no queue {queue!r} on queue manager {qm.name} ({known}): "
            f"define it with `edgeq queue define {queue}`"
        )


def parse_filter(fields: Sequence[tuple[str, FieldValue]]) -> dict[str, FieldValue] | None:
    """The ``--field`` options as a dict (None if none given); a name given twice is an error."""
    out: dict[str, FieldValue] = {}
    for name, value in fields:
        if name in out:
            raise click.BadParameter(f"field {name!r} is given twice", param_hint="'--field'")
        out[name] = value
    return out or None


def wants_json(ctx: click.Context, as_json: bool) -> bool:
    """Whether JSON was asked for, on the group or on the command."""
    opts = ctx.find_object(Options)
    return as_json or (opts is not None and opts.json)



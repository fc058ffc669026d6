"""What every command group shares: errors as one line, log warnings on stderr, JSON output,
commands imported when named."""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Mapping
from typing import Any, cast

import click

from edgeq.errors import EdgeqError

__all__ = ["EdgeqGroup", "emit_json", "log_to_stderr"]


class EdgeqGroup(click.Group):
    """A group that turns edgeq, SQLite and OS errors into one ``Error:`` line (exit 1), never a traceback.

    ``lazy`` maps command names to ``"module:attribute"``: imported only when the command is named (or
    listed, by ``--help``), so a command pays for its own imports alone."""

    def __init__(self, *args: Any, lazy: Mapping[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy: Mapping[str, str] = lazy or {}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.lazy:
            return super().get_command(ctx, cmd_name)
        module, _, attribute = self.lazy[cmd_name].partition(":")
        # __import__, not importlib.import_module: -X importtime lists only what goes through it
        return cast(click.Command, getattr(__import__(module, fromlist=[attribute]), attribute))

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except EdgeqError as exc:
            raise click.ClickException(str(exc)) from exc
        except sqlite3.Error as exc:
            raise click.ClickException(f"SQLite failed: {exc}") from exc
        except OSError as exc:
            raise click.ClickException(str(exc)) from exc


class _WarningLine(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
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


def emit_json(value: object) -> None:
    """Print ``value`` as one JSON document on stdout."""
    click.echo(json.dumps(value, indent=2, ensure_ascii=False))

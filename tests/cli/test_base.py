"""edgeq.cli.base: errors as one line (exit 1), log warnings as one line, JSON output."""

from __future__ import annotations

import json
import logging
import sqlite3

import click
import pytest
from click.testing import CliRunner

from edgeq.cli.base import EdgeqGroup, emit_json, log_to_stderr
from edgeq.errors import EdgeqError, QueueNotFound


def group_raising(exc: BaseException) -> click.Group:
    @click.group(cls=EdgeqGroup)
    def group() -> None:
        """A group whose one command raises."""

    @group.command()
    def fail() -> None:
        raise exc

    return group


@pytest.mark.parametrize(("exc", "line"), [
    (EdgeqError("the store is busy: retry"), "Error: the store is busy: retry"),
    (QueueNotFound("no queue 'Q'"), "Error: no queue 'Q'"),
    (sqlite3.OperationalError("disk I/O error"), "Error: SQLite failed: disk I/O error"),
    (PermissionError(13, "Permission denied", "/x.db"), "Error: [Errno 13] Permission denied: '/x.db'"),
])
def test_errors_become_one_line_and_exit_1(exc: BaseException, line: str) -> None:
    result = CliRunner().invoke(group_raising(exc), ["fail"])
    assert result.exit_code == 1
    assert result.stderr == line + "\n"
    assert "Traceback" not in result.output


def test_other_exceptions_are_bugs_and_are_not_hidden() -> None:
    result = CliRunner().invoke(group_raising(KeyError("bug")), ["fail"])
    assert result.exit_code == 1 and isinstance(result.exception, KeyError)


def test_log_warnings_are_single_lines_on_stderr() -> None:
    @click.command()
    def warn() -> None:
        log_to_stderr()
        log_to_stderr()  # idempotent: still one line per record
        log = logging.getLogger("edgeq.test")
        log.warning("rule %s failed\n  in   on_expired", "counters")
        try:
            raise ValueError("boom")
        except ValueError:
            log.error("plugin failed to load", exc_info=True)
        log.info("not shown")
        click.echo("done")

    result = CliRunner().invoke(warn, [])
    assert result.exit_code == 0 and result.stdout == "done\n"
    assert result.stderr.splitlines() == [
        "Warning: rule counters failed in on_expired",
        "Warning: plugin failed to load: ValueError: boom",
    ]


def test_emit_json_is_indented_and_keeps_unicode() -> None:
    @click.command()
    def show() -> None:
        emit_json({"queue": "BESTELLUNGEN-ÄÖ", "depth": 2})

    out = CliRunner().invoke(show, []).stdout
    assert out == '{\n  "queue": "BESTELLUNGEN-ÄÖ",\n  "depth": 2\n}\n'
    assert json.loads(out) == {"queue": "BESTELLUNGEN-ÄÖ", "depth": 2}

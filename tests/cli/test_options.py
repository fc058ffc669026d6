"""edgeq.cli.options: the shared option decorators and the one store opener, on a small
command line of the test's own (real stores on disk, invoked through click)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result

from edgeq import QueueManager
from edgeq.cli.options import (
    ADMIN,
    CREATE,
    EXISTING,
    SERVICE,
    GroupOptions,
    StoreUse,
    check_store,
    db_option,
    name_option,
    open_store,
    output_options,
    store_options,
    store_path,
    stored_name,
    wants_json,
)
from edgeq.rules import QueueRule
from edgeq.rules.base import RuleEvent

USES = {"existing": EXISTING, "create": CREATE, "service": SERVICE, "admin": ADMIN}
Opened = list[QueueManager]


def make_cli(opened: Opened, **qm_options: Any) -> click.Group:
    """A group with the shared options; `open USE [--db] [--name]` opens the store and prints its name."""

    @click.group()
    @store_options
    @output_options
    @click.pass_context
    def group(ctx: click.Context, db: Path | None, name: str | None, as_json: bool) -> None:
        ctx.obj = GroupOptions(db, name, as_json)

    @group.command("open")
    @click.argument("use", type=click.Choice(sorted(USES)))
    @db_option("This command's store.")
    @name_option("This command's queue manager name.")
    @output_options
    @click.pass_context
    def open_(ctx: click.Context, use: str, db: Path | None, name: str | None, as_json: bool) -> None:
        qm = open_store(ctx, USES[use], db=db, name=name, **qm_options)
        opened.append(qm)
        click.echo(f"{qm.name} json={wants_json(ctx, as_json)}")

    @group.command("path")
    @db_option("This command's store.")
    @click.pass_context
    def path(ctx: click.Context, db: Path | None) -> None:
        click.echo(str(store_path(ctx, db)))

    return group


@pytest.fixture
def opened() -> Opened:
    return []


@pytest.fixture
def run(opened: Opened) -> Callable[..., Result]:
    def _run(*args: str, env: dict[str, str] | None = None, **qm_options: Any) -> Result:
        full_env: dict[str, str | None] = {"EDGEQ_DB": None, "EDGEQ_NAME": None, **(env or {})}
        return CliRunner().invoke(make_cli(opened, **qm_options), list(args), env=full_env)

    return _run


@pytest.fixture
def dev(tmp_path: Path) -> Path:
    """An existing store of queue manager DEV1 with queue Q."""
    path = tmp_path / "dev.db"
    with QueueManager(path, name="DEV1") as qm:
        qm.define_queue("Q")
    return path


def error(result: Result) -> str:
    """The one `Error:` line of a command that failed with exit 1."""
    assert result.exit_code == 1, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    return lines[0]


# -- where the store is --------------------------------------------------------------------------


def test_no_store_given_is_one_error_line(run: Callable[..., Result]) -> None:
    assert error(run("open", "existing")) == "Error: no store given: pass --db PATH (or set EDGEQ_DB)"
    assert error(run("path")) == "Error: no store given: pass --db PATH (or set EDGEQ_DB)"


def test_the_commands_db_wins_over_the_groups_and_edgeq_db(run: Callable[..., Result]) -> None:
    assert run("--db", "group.db", "path").output == "group.db\n"
    assert run("path", env={"EDGEQ_DB": "env.db"}).output == "env.db\n"
    assert run("--db", "group.db", "path", "--db", "own.db").output == "own.db\n"


def test_a_directory_is_not_a_store_and_is_a_usage_error(run: Callable[..., Result], tmp_path: Path) -> None:
    for args in (["--db", str(tmp_path), "path"], ["path", "--db", str(tmp_path)]):
        result = run(*args)
        assert result.exit_code == 2 and "is a directory" in result.stderr


def test_db_and_name_options_document_their_environment_variables(run: Callable[..., Result]) -> None:
    out = run("--help").output
    assert "env var: EDGEQ_DB" in out and "env var: EDGEQ_NAME" in out
    assert "env var" not in run("open", "--help").output


# -- opening an existing store -------------------------------------------------------------------


def test_an_existing_store_opens_with_or_without_its_name(run: Callable[..., Result], dev: Path) -> None:
    for use in USES:
        assert run("--db", str(dev), "open", use).output == "DEV1 json=False\n"
    assert run("--db", str(dev), "--name", "DEV1", "open", "existing").output == "DEV1 json=False\n"
    assert run("open", "admin", "--db", str(dev), "--name", "DEV1", "--json").output == "DEV1 json=True\n"
    assert run("--json", "--db", str(dev), "open", "service").output == "DEV1 json=True\n"


@pytest.mark.parametrize("use", sorted(USES))
def test_another_name_is_refused_before_anything_is_written(
    run: Callable[..., Result], dev: Path, use: str
) -> None:
    line = error(run("--db", str(dev), "open", use, "--name", "OTHER", journal="server"))
    assert line == (f"Error: {dev} belongs to queue manager 'DEV1', not 'OTHER': drop --name "
                    "(and EDGEQ_NAME) to use it, or give another --db")
    with QueueManager(dev) as qm:
        assert qm.journal_mode is None  # journal="server" was never written to the store


def test_a_name_that_is_no_queue_manager_name_is_a_usage_error(
    run: Callable[..., Result], tmp_path: Path
) -> None:
    db = str(tmp_path / "new.db")
    for result in (
        run("--db", db, "--name", "DEV 1", "open", "create"),  # the group's --name
        run("--db", db, "open", "create", env={"EDGEQ_NAME": "DEV/1"}),  # or its variable
        run("open", "create", "--db", db, "--name", "D!"),  # a command's own
    ):
        assert result.exit_code == 2 and "is not valid" in result.stderr, result.output
    assert not (tmp_path / "new.db").exists()


def test_edgeq_name_is_checked_like_name(run: Callable[..., Result], dev: Path) -> None:
    assert "not 'OTHER'" in error(run("--db", str(dev), "open", "existing", env={"EDGEQ_NAME": "OTHER"}))
    assert run("--db", str(dev), "open", "existing", env={"EDGEQ_NAME": "DEV1"}).exit_code == 0


def test_the_store_is_closed_when_the_command_ends(dev: Path) -> None:
    events: list[str] = []

    class Closed(QueueRule):
        def on_closed(self, event: RuleEvent) -> None:
            events.append(event.queue)

    @click.command()
    @click.pass_context
    def watch(ctx: click.Context) -> None:
        qm = open_store(ctx, db=dev)
        qm.add_rule("Q", Closed())
        qm.depth("Q")  # activates Q: on_closed fires for active queues
        assert events == []

    assert CliRunner().invoke(watch, []).exit_code == 0
    assert events == ["Q"]


def test_queue_manager_options_are_passed_on(run: Callable[..., Result], dev: Path, opened: Opened) -> None:
    assert run("--db", str(dev), "open", "service", journal="server").exit_code == 0
    assert opened[0].journal_mode == "server"


# -- a new store -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("use", "advice"), [
    ("existing",
     "create a store by defining its first queue, e.g. edgeq --db '{db}' --name DEV1 queue define ORDERS"),
    ("admin", "give an existing store (e.g. the one of edgeq serve --db)"),
])
def test_a_missing_store_is_not_created_where_the_command_needs_one(
    run: Callable[..., Result], tmp_path: Path, use: str, advice: str
) -> None:
    db = tmp_path / "two words.db"  # quoted in the advice, ready to paste into a shell
    assert error(run("--db", str(db), "--name", "DEV1", "open", use)) == (
        f"Error: {db} does not exist: {advice.format(db=db)}"
    )
    assert not db.exists()


@pytest.mark.parametrize(("use", "advice"), [
    ("create",
     "name its queue manager with --name (or EDGEQ_NAME), e.g. edgeq --db {db} --name DEV1 queue define ..."),
    ("service", "name its queue manager with --name"),
])
def test_a_new_store_needs_a_name(run: Callable[..., Result], tmp_path: Path, use: str, advice: str) -> None:
    db = tmp_path / "new.db"
    assert error(run("--db", str(db), "open", use)) == f"Error: {db} is a new store: {advice.format(db=db)}"
    assert not db.exists()


@pytest.mark.parametrize("use", ["create", "service"])
def test_a_new_store_needs_its_directory(run: Callable[..., Result], tmp_path: Path, use: str) -> None:
    db = tmp_path / "missing" / "new.db"
    line = error(run("--db", str(db), "--name", "DEV1", "open", use))
    assert line == f"Error: cannot create {db}: directory {db.parent} does not exist"


def test_create_makes_the_store_and_says_so_service_silently(
    run: Callable[..., Result], tmp_path: Path
) -> None:
    made = run("--db", str(tmp_path / "a.db"), "--name", "DEV1", "open", "create")
    assert made.exit_code == 0 and made.stdout == "DEV1 json=False\n"
    assert made.stderr == f"Created store {tmp_path / 'a.db'} for queue manager DEV1.\n"
    quiet = run("open", "service", "--db", str(tmp_path / "b.db"), env={"EDGEQ_NAME": "HOME"})
    assert (quiet.exit_code, quiet.stdout, quiet.stderr) == (0, "HOME json=False\n", "")
    assert stored_name(tmp_path / "b.db") == "HOME"


def test_an_empty_file_is_a_new_store(run: Callable[..., Result], tmp_path: Path) -> None:
    db = tmp_path / "empty.db"
    db.touch()
    assert "does not exist" in error(run("--db", str(db), "open", "existing"))
    assert run("--db", str(db), "--name", "DEV1", "open", "create").exit_code == 0
    assert stored_name(db) == "DEV1"


def test_check_store_opens_nothing(tmp_path: Path) -> None:
    ctx = click.Context(click.Command("x"), obj=GroupOptions(tmp_path / "new.db", "DEV1", False))
    checked = check_store(ctx, SERVICE)
    assert (checked.path, checked.name, checked.fresh) == (tmp_path / "new.db", "DEV1", True)
    assert not checked.path.exists()
    with ctx:
        assert checked.open(ctx).name == "DEV1"
    assert stored_name(checked.path) == "DEV1"


def test_a_use_is_advice_only() -> None:
    custom = StoreUse(create=False, missing="ask the operator for {db}")
    assert (custom.unnamed, custom.announce) == ("", False)
    assert [u.create for u in (EXISTING, CREATE, SERVICE, ADMIN)] == [False, True, True, False]
    assert [u.announce for u in (EXISTING, CREATE, SERVICE, ADMIN)] == [False, True, False, False]


# -- reading a store's name ------------------------------------------------------------------------


def test_stored_name_reads_without_writing(dev: Path, tmp_path: Path) -> None:
    before = dev.read_bytes()
    assert stored_name(dev) == "DEV1"
    assert dev.read_bytes() == before
    (tmp_path / "text.db").write_text("not a database")
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.close()
    assert ([stored_name(p) for p in (tmp_path / "text.db", other, tmp_path / "absent.db")]
            == [None, None, None])

"""edgeq.cli: the group, its entry points, and what a device install imports to show help."""

from __future__ import annotations

import importlib
import subprocess
import sys
import types
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from edgeq import QueueManager, __version__
from edgeq.cli import cli, main

EXTRAS = ("starlette", "uvicorn", "httpx", "pyarrow", "pyspark", "paho")
MODULES = ("admin", "bridge", "check", "consume", "demo", "dlq", "keys", "messages", "pipeline", "queue",
           "rules", "serve", "server", "sync")


def test_every_command_is_registered_once() -> None:
    ctx = click.Context(cli)
    names = cli.list_commands(ctx)
    assert names == [
        "admin", "bridge", "browse", "check", "consume", "demo", "depth", "dlq", "export", "get", "keys",
        "pipeline", "purge", "put", "queue", "rules", "serve", "server", "sweep", "sync",
    ]
    # each name loads (on demand) the command of that name
    assert [getattr(cli.get_command(ctx, name), "name", None) for name in names] == names


@pytest.mark.parametrize("name", MODULES)
def test_the_package_attributes_are_the_command_modules(name: str) -> None:
    """The modules share their commands' names; `edgeq.cli.queue` must stay the module."""
    module = importlib.import_module(f"edgeq.cli.{name}")
    assert isinstance(module, types.ModuleType)
    assert getattr(importlib.import_module("edgeq.cli"), name) is module


@pytest.mark.parametrize("args", [
    ["--help"], ["serve", "--help"], ["sync", "--help"], ["export", "--help"], ["pipeline", "run", "--help"],
    ["server", "devices", "list", "--help"], ["demo", "--help"], ["check", "--help"], ["admin", "--help"],
    ["admin", "DEV1", "queue", "define", "--help"], ["bridge", "define", "--help"],
], ids=" ".join)
def test_help_imports_no_optional_stack(args: list[str]) -> None:
    code = (
        "import sys\n"
        "from edgeq.cli import main\n"
        f"sys.argv = ['edgeq', *{args!r}]\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    assert exc.code == 0, exc.code\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & {set(EXTRAS)!r}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines()[0].startswith("Usage: edgeq")
    assert out.splitlines()[-1] == "[]"


@pytest.mark.parametrize("module", ["edgeq", "edgeq.cli"])
def test_python_dash_m_runs_the_command_line(module: str) -> None:
    done = subprocess.run([sys.executable, "-m", module, "--version"], capture_output=True, text=True,
                          check=False)
    assert (done.returncode, done.stdout) == (0, f"edgeq, version {__version__}\n")


def test_main_is_the_console_script(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "argv", ["anything", "--version"])
    with pytest.raises(SystemExit) as exit_:
        main()
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"edgeq, version {__version__}\n"


BAD_VALUES = [
    (["--name", "no spaces", "depth", "ORDERS"], "'--name'"),
    (["put", "no spaces", "x"], "'QUEUE'"),
    (["put", "ORDERS", "x", "--reply-to", "a/b"], "'--reply-to'"),
    (["get", "ORDERS!"], "'QUEUE'"),
    (["browse", "ORDERS!"], "'QUEUE'"),
    (["depth", "ORDERS!"], "'QUEUE'"),
    (["sweep", "ORDERS!"], "'[QUEUE]'"),
    (["keys", "rotate", "--key-file", "{junk}"], "'--key-file'"),
    (["keys", "fingerprint", "{junk}"], "'PATH'"),
    (["server", "devices", "revoke", "D.1"], "'NAME'"),
    (["server", "devices", "add", "D1", "--public-key", "{junk}"], "'--public-key'"),
    (["server", "held", "list", "--older-than", "later"], "'--older-than'"),
    (["serve", "--name", "HOME!"], "'--name'"),
    (["serve", "--hold", "-1h"], "'--hold'"),
    (["serve", "--held-quota-bytes", "0"], "'--held-quota-bytes'"),
    (["export", "--out", "{out}", "--since", "yesterday"], "'--since'"),
]


@pytest.mark.parametrize(("args", "option"), BAD_VALUES, ids=[" ".join(a[:3]) for a, _ in BAD_VALUES])
def test_every_bad_value_is_a_usage_error_that_changes_nothing(
    tmp_path: Path, args: list[str], option: str
) -> None:
    """A value a command cannot use exits 2 with click's usage message naming the option,
    before the store is opened (let alone created or changed). The commands of
    edgeq.cli.queue, edgeq.cli.sync, edgeq.cli.serve (but its hold and quota) and edgeq.cli.demo
    are their owners' to check."""
    base = tmp_path
    db = base / "dev.db"
    with QueueManager(db, name="DEV1") as qm:
        qm.define_queue("ORDERS")
    before = db.read_bytes()
    junk = base / "junk"
    junk.write_text("not a key")
    junk.chmod(0o600)
    filled = [a.format(junk=junk, out=base / "out") for a in args]
    result = CliRunner().invoke(cli, ["--db", str(db), *filled], env={"EDGEQ_DB": None, "EDGEQ_NAME": None})
    assert result.exit_code == 2, result.output
    assert f"Invalid value for {option}" in result.stderr
    assert db.read_bytes() == before and not (base / "out").exists()

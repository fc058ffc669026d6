"""edgeq.cli: the group, its entry points, and what a device install imports to show help."""

from __future__ import annotations

import importlib
import subprocess
import sys
import types

import pytest

from edgeq import __version__
from edgeq.cli import cli, main

EXTRAS = ("starlette", "uvicorn", "httpx", "pyarrow", "pyspark")
MODULES = ("demo", "keys", "messages", "pipeline", "queue", "rules", "server", "sync")


def test_every_command_is_registered_once() -> None:
    assert sorted(cli.commands) == [
        "browse", "demo", "depth", "export", "get", "keys", "pipeline", "purge", "put", "queue",
        "rules", "serve", "server", "sweep", "sync",
    ]


@pytest.mark.parametrize("name", MODULES)
def test_the_package_attributes_are_the_command_modules(name: str) -> None:
    """The modules share their commands' names; `edgeq.cli.queue` must stay the module."""
    module = importlib.import_module(f"edgeq.cli.{name}")
    assert isinstance(module, types.ModuleType)
    assert getattr(importlib.import_module("edgeq.cli"), name) is module


@pytest.mark.parametrize("args", [
    ["--help"], ["serve", "--help"], ["sync", "--help"], ["export", "--help"], ["pipeline", "run", "--help"],
    ["server", "devices", "list", "--help"], ["demo", "--help"],
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
    done = subprocess.run([sys.executable, "-m", module, "--version"], capture_output=True, text=True, check=False)
    assert (done.returncode, done.stdout) == (0, f"edgeq, version {__version__}\n")


def test_main_is_the_console_script(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["anything", "--version"])
    with pytest.raises(SystemExit) as exit_:
        main()
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"edgeq, version {__version__}\n"

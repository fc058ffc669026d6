"""``edgeq demo``: a guided tour in two acts (``expiry``, ``forward``) on real stores (docs/cli.md)."""

from __future__ import annotations

import importlib
import tempfile
from pathlib import Path

import click

from edgeq.cli.demo.base import (
    DEVICE_QM,
    HOME_QM,
    DemoFailed,
    DemoPathInUse,
    DemoResult,
    Echo,
    ForwardResult,
    Narration,
)
from edgeq.cli.demo.expiry import DEMO_QM, RULES, START_MS, run_expiry_act
from edgeq.cli.options import stored_name
from edgeq.errors import StoreError
from edgeq.store.opening import check_foreign

__all__ = [
    "ACT_TWO_MODULES", "DEMO_QM", "DEVICE_QM", "HOME_QM", "RULES", "START_MS", "DemoFailed", "DemoPathInUse",
    "DemoResult", "ForwardResult", "demo", "demo_paths", "prepare_path", "run_demo",
]

#: What act two imports beyond the device install: the ``server`` and ``sync`` extras.
ACT_TWO_MODULES = ("starlette", "uvicorn", "httpx")


@click.command()
@click.option("--db", "path", type=click.Path(dir_okay=False, path_type=Path),
              help="Where to write act one's store (must not exist); act two's go beside it "
                   "(tour.db: tour-device.db and tour-home.db). Default: a new temporary directory.")
@click.option("--replace", is_flag=True,
              help="Overwrite the demo's files if they hold an earlier demo's stores (never any other file).")
def demo(path: Path | None, replace: bool) -> None:
    """Run a guided tour of MQe expiry, rules, and store and forward (never on the global --db).

    \b
    Example:
      edgeq demo
    """
    if path is None:
        path = Path(tempfile.mkdtemp(prefix="edgeq-demo-")) / "demo.db"
    elif not path.parent.is_dir():
        raise click.BadParameter(f"directory {path.parent} does not exist", param_hint="'--db'")
    prepare_path(path, replace=replace)
    run_demo(path, click.echo)


def demo_paths(path: Path) -> dict[Path, str]:
    """The stores a demo with act one at ``path`` writes, each with its queue manager name."""
    return {
        path: DEMO_QM,
        path.with_name(f"{path.stem}-device{path.suffix}"): DEVICE_QM,
        path.with_name(f"{path.stem}-home{path.suffix}"): HOME_QM,
    }


def prepare_path(path: Path, *, replace: bool = False) -> None:
    """Make ``path`` and act two's stores beside it ready, or raise DemoPathInUse having deleted nothing."""
    if not path.parent.is_dir():
        raise DemoPathInUse(f"cannot write the demo store {path}: directory {path.parent} does not exist")
    taken = {p: name for p, name in demo_paths(path).items() if p.exists() and not _empty(p)}
    for found, name in taken.items():
        if not replace:
            raise DemoPathInUse(
                f"{found} already exists and the demo writes a new store there: choose another --db, "
                "or add --replace if it holds an earlier demo"
            )
        if _stored_name(found) != name:
            raise DemoPathInUse(
                f"{found} is not an earlier demo's store (queue manager {name}), so --replace "
                "leaves it alone: choose another --db"
            )
    for found in taken:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{found}{suffix}").unlink(missing_ok=True)


def _empty(path: Path) -> bool:
    return path.is_file() and path.stat().st_size == 0


def _stored_name(path: Path) -> str | None:
    try:
        return None if check_foreign(path) else stored_name(path)
    except StoreError:
        return None


def missing_modules() -> list[str]:
    """The optional modules the demo's second act needs that are not installed."""
    missing = []
    for name in ACT_TWO_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    return missing


def run_demo(path: Path, echo: Echo) -> DemoResult:
    """Run both acts on new stores (act one's at ``path``), printing through ``echo``."""
    path = Path(path)
    out = Narration(echo)
    result = DemoResult(path)
    echo("edgeq demo, in two acts: MQe's message expiry, then store and forward.")
    run_expiry_act(path, out, result)
    result.missing = missing_modules()
    if result.missing:
        echo("")
        echo("Act two, store and forward between a device and its home server over HTTP, needs the")
        echo(f"server and sync extras ({', '.join(result.missing)} cannot be imported here). Install them")
        echo("and run the demo again:")
        echo("    pip install 'edgeq[server,sync]'     (make demo installs them)")
        return result
    # Imported here: act two's modules import the network stacks, which the device install lacks.
    from edgeq.cli.demo.forward import run_forward_act

    device_path, home_path = list(demo_paths(path))[1:]
    result.forward = run_forward_act(device_path, home_path, out)
    return result

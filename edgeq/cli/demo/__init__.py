"""``edgeq demo``: a guided tour in two acts, step by step, on real stores.

* Act one (:mod:`~edgeq.cli.demo.expiry`): MQe's expiry semantics on one store,
  through the five check points, with rules narrating each discard.
* Act two (:mod:`~edgeq.cli.demo.forward`): store and forward, what edgeq exists
  for: a device queue manager and the real home server on loopback, puts while the
  link is down, the forward exactly once when it comes back, a reply pulled by a
  home-server queue, and MQe's "expires twice". It needs the ``server`` and ``sync``
  extras; without them the demo runs act one and says how to get act two.

Every queue manager runs on a :class:`~edgeq.clock.ManualClock`, so time moves
instantly and every run prints the same. :func:`run_demo` runs both; the ``demo``
command runs it on new stores (see :func:`prepare_path`), never on the user's ``--db``.
"""

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
from edgeq.store.connection import check_foreign

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
    """Run a guided tour of MQe expiry, rules, and store and forward.

    Act one, on a real SQLite file with a simulated clock, defines queues, puts
    messages with relative and absolute expiry, moves the clock through MQe's five
    expiry check points (add, get, depth, delete, activate) and a sweep, with a rule
    narrating each discard, then does an assured put and get. Act two runs a device
    and the real home server on loopback: puts while the link is down, the forward
    exactly once when it comes back, a reply pulled from the server, and a message
    that expires on both sides between MQe's two stages (it needs the server and
    sync extras: pip install 'edgeq[server,sync]'). The global --db is ignored: the
    demo never touches your store.

    \b
    Examples:
      edgeq demo
      edgeq demo --db /tmp/tour.db --replace
    """
    if path is None:
        path = Path(tempfile.mkdtemp(prefix="edgeq-demo-")) / "demo.db"
    elif not path.parent.is_dir():
        raise click.BadParameter(f"directory {path.parent} does not exist", param_hint="'--db'")
    prepare_path(path, replace=replace)
    run_demo(path, click.echo)


def demo_paths(path: Path) -> dict[Path, str]:
    """The stores a demo with act one at ``path`` writes, each with its queue manager name.

    >>> [f"{p} {name}" for p, name in demo_paths(Path("/tmp/tour.db")).items()]
    ['/tmp/tour.db EDGEQ.DEMO', '/tmp/tour-device.db DEMO-DEV1', '/tmp/tour-home.db DEMO-HOME']
    """
    return {
        path: DEMO_QM,
        path.with_name(f"{path.stem}-device{path.suffix}"): DEVICE_QM,
        path.with_name(f"{path.stem}-home{path.suffix}"): HOME_QM,
    }


def prepare_path(path: Path, *, replace: bool = False) -> None:
    """Make ``path`` and act two's stores beside it (:func:`demo_paths`) ready for a new
    demo, or raise :class:`DemoPathInUse` having deleted nothing.

    A missing or empty file is fine. With ``replace``, an earlier demo's stores (each
    with the queue manager name the demo gives it) are deleted; any other file is left alone.
    """
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
    """The queue manager name stored in ``path``, or None if it holds no edgeq store."""
    try:
        return None if check_foreign(path) else stored_name(path)
    except StoreError:
        return None


def missing_modules() -> list[str]:
    """The modules act two needs that cannot be imported here (none after ``make demo``)."""
    missing = []
    for name in ACT_TWO_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    return missing


def run_demo(path: Path, echo: Echo) -> DemoResult:
    """Run both acts, act one's store at ``path`` and act two's beside it (:func:`demo_paths`),
    printing through ``echo``; return what they did.

    The stores must not exist yet (see :func:`prepare_path`). Without the ``server``
    and ``sync`` extras, act two is skipped (``result.missing`` names what lacks) and
    the output says how to install them.
    """
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

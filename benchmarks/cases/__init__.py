"""The benchmark cases, in the order a full run measures them.

Each module has a runner side, ``run(ctx) -> list[Result]``, which starts
children, and child-side ``child_*`` functions (see :mod:`benchmarks.child`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from benchmarks.results import Result
from benchmarks.runner import Context

__all__ = ["CASES", "runner_of"]

#: case name -> module; ``--only`` takes these names.
CASES: dict[str, str] = {
    "import": "benchmarks.cases.import_time",
    "cli_start": "benchmarks.cases.cli_start",
    "put_single": "benchmarks.cases.put_single",
    "put_batch": "benchmarks.cases.put_batch",
    "put_threads": "benchmarks.cases.put_threads",
    "put_threads_slowsync": "benchmarks.cases.put_threads_slowsync",
    "aio_puts": "benchmarks.cases.aio_puts",
    "rule_cost": "benchmarks.cases.rule_cost",
    "get_confirm": "benchmarks.cases.get_confirm",
    "get_confirm_threads": "benchmarks.cases.get_confirm_threads",
    "drain": "benchmarks.cases.drain",
    "depth": "benchmarks.cases.depth",
    "expiry": "benchmarks.cases.expiry",
    "check": "benchmarks.cases.check",
    "memory": "benchmarks.cases.memory",
    "sync": "benchmarks.cases.sync",
    "sync_secure": "benchmarks.cases.sync_secure",
    "wire_bytes": "benchmarks.cases.wire_bytes",
    "fleet": "benchmarks.cases.fleet",
    "wakeup_same": "benchmarks.cases.wakeup_same",
    "wakeup_other": "benchmarks.cases.wakeup_other",
    "idle_wait": "benchmarks.cases.idle_wait",
    "bridge_out": "benchmarks.cases.bridge_out",
    "bridge_in": "benchmarks.cases.bridge_in",
}


def runner_of(case: str) -> Callable[[Context], list[Result]]:
    """The ``run`` function of a case."""
    run: Callable[[Context], list[Result]] = importlib.import_module(CASES[case]).run
    return run

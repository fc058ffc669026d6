"""``import`` time of each library in a fresh interpreter.

edgeq's row times ``from edgeq import QueueManager``, what a program that queues imports (``import
edgeq`` alone loads its names on first use: that is the ``edgeq-package`` row).
Two measures, medians over several fresh interpreters: the wall time of
``python -c "import M"`` minus that of ``python -c "pass"`` run just before it
(what a CLI or a service start pays; the median of those paired differences,
reported with their spread, since for a module that imports in a millisecond
the difference is within the noise and can come out below zero),
and ``-X importtime``'s cumulative figure for ``M`` (the import alone, without
interpreter start-up noise).
"""

from __future__ import annotations

import statistics
import subprocess
import time

from benchmarks.peers import LIBRARIES, installed
from benchmarks.results import Result
from benchmarks.runner import Context, child_env

__all__ = ["LIBS", "importtime_us", "run"]

LIBS = ["edgeq", "pq-ack", "litequeue", "raw-sqlite"]
#: Row -> (the library it measures, the statement, the modules whose -X importtime figures it sums);
#: a library not here imports its module.
STATEMENTS = {
    "edgeq": ("edgeq", "from edgeq import QueueManager", ("edgeq", "edgeq.manager")),
    "edgeq-package": ("edgeq", "import edgeq", ("edgeq",)),
}


def _wall(python: str, code: str) -> float:
    start = time.perf_counter()
    subprocess.run([python, "-c", code], check=True, env=child_env(), capture_output=True)
    return time.perf_counter() - start


def importtime_us(stderr: str, module: str) -> float:
    """The cumulative microseconds ``-X importtime`` reports for ``module``.

    >>> importtime_us("import time:       5 |         42 | edgeq\\n", "edgeq")
    42.0
    """
    for line in stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[2].strip() == module:
            return float(parts[1].strip())
    return 0.0


def _rows(libs: list[str]) -> list[tuple[str, str, str, tuple[str, ...]]]:
    rows = []
    for lib in [lib for lib in LIBS if lib in libs]:
        module = LIBRARIES[lib][2]
        variants = [(row, *spec) for row, spec in STATEMENTS.items() if spec[0] == lib]
        rows += variants or [(lib, lib, f"import {module}", (module,))]
    return rows


def run(ctx: Context) -> list[Result]:
    """Interleave bare and importing interpreters, ``import_repeats`` times each."""
    out: list[Result] = []
    repeats = max(1, ctx.settings.import_repeats)
    for row, lib, statement, modules in _rows(ctx.libs):
        if not installed(lib):
            out.append(Result("import", row, "not installed"))
            continue
        ctx.log(f"  {statement}")
        _wall(ctx.python, "pass")  # warm the OS file cache once
        bare, loaded, cumulative = [], [], []
        for _ in range(repeats):
            bare.append(_wall(ctx.python, "pass"))
            loaded.append(_wall(ctx.python, statement))
            proc = subprocess.run(
                [ctx.python, "-X", "importtime", "-c", statement],
                check=True, env=child_env(), capture_output=True, text=True,
            )
            cumulative.append(sum(importtime_us(proc.stderr, module) for module in modules))
        paired = [b - a for a, b in zip(bare, loaded, strict=True)]
        metrics = {
            "import_ms": statistics.median(cumulative) / 1e3,
            "wall_delta_ms": statistics.median(paired) * 1e3,
            "wall_noise_ms": (max(paired) - min(paired)) * 1e3,
            "bare_interpreter_ms": statistics.median(bare) * 1e3,
        }
        out.append(Result("import", row, "ok", metrics=metrics, info={"statement": statement}))
    return out

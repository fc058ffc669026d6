"""``cli_start``: the ``edgeq`` command line's whole-process wall time, what a cron job pays per call.

Each row is the median of ``cli_repeats`` runs, interleaved with a bare ``python -c pass``; bytecode is
cached (in the scratch directory) as in an installed package. The floors are benchmarks/targets.py's."""

from __future__ import annotations

import shlex
import statistics
import subprocess
import time
from pathlib import Path

from benchmarks.results import Result
from benchmarks.runner import Context, child_env

__all__ = ["ROWS", "run"]

#: Row -> the command it times (``edgeq``: the console script; ``python``: the interpreter).
ROWS = {
    "edgeq": "edgeq --version",
    "edgeq-put": "edgeq --db {db} put Q text",
    "edgeq-import": "python -c 'import edgeq'",
}


def _wall(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, env=env, cwd=cwd, capture_output=True, timeout=60)
    return time.perf_counter() - start


def run(ctx: Context) -> list[Result]:
    """Time each row ``cli_repeats`` times, the rows and a bare interpreter interleaved."""
    if "edgeq" not in ctx.libs:
        return []
    where = ctx.scratch("cli_start")
    script = Path(ctx.python).with_name("edgeq")
    edgeq = [str(script)] if script.exists() else [ctx.python, "-m", "edgeq"]
    env = {k: v for k, v in child_env().items()
           if k != "PYTHONDONTWRITEBYTECODE" and not k.startswith("EDGEQ_")}
    env["PYTHONPYCACHEPREFIX"] = str(where / "pycache")
    db = where / "cli.db"
    subprocess.run([*edgeq, "--db", str(db), "--name", "BENCH", "queue", "define", "Q"], check=True, env=env,
                   cwd=where, capture_output=True, timeout=60)
    argvs = {}
    for row, command in ROWS.items():
        head, *rest = shlex.split(command.format(db=shlex.quote(str(db))))
        argvs[row] = [*(edgeq if head == "edgeq" else [ctx.python]), *rest]
    bare_argv = [ctx.python, "-c", "pass"]
    for argv in [bare_argv, *argvs.values()]:
        _wall(argv, env, where)  # untimed: writes the bytecode, warms the OS file cache
    ctx.log(f"  {', '.join(command.format(db='DB') for command in ROWS.values())}")
    walls: dict[str, list[float]] = {row: [] for row in [*argvs, "bare"]}
    for _ in range(max(1, ctx.settings.cli_repeats)):
        walls["bare"].append(_wall(bare_argv, env, where))
        for row, argv in argvs.items():
            walls[row].append(_wall(argv, env, where))
    bare_ms = statistics.median(walls["bare"]) * 1e3
    out = []
    for row, command in ROWS.items():
        ms = [w * 1e3 for w in walls[row]]
        metrics = {"median_ms": statistics.median(ms), "min_ms": min(ms), "max_ms": max(ms),
                   "runs": float(len(ms)), "bare_interpreter_ms": bare_ms}
        out.append(Result("cli_start", row, "ok", metrics=metrics, info={"command": command.format(db="DB")}))
    ctx.discard(where)
    return out

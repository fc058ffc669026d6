"""``put_threads`` under the slowsync shim: every flush as slow as a cheap SD card's.

The shim (``benchmarks/slowsync/slowsync.c``, an ``LD_PRELOAD`` library) makes each ``fsync``,
``fdatasync`` and ``syncfs`` wait ``slowsync_us`` after the real flush, so group commit
is measured where a flush costs milliseconds. It is built with ``cc`` under the run's
scratch directory.
"""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path
from typing import Any

from benchmarks.cases.put_threads import child_put_threads, prepare
from benchmarks.cases.threads import run_thread_counts
from benchmarks.results import Result, Status
from benchmarks.runner import ROOT, Context

__all__ = ["LIBS", "SHIM_DIR", "child_put_threads_slowsync", "run", "shim"]

LIBS = ["edgeq", "raw-sqlite"]
#: The shim's source, kept in the repository (a copy of ../shared/tools/slowsync/slowsync.c), so a clean
#: clone builds it: CI has the compiler (gcc), not the shared tools folder.
SHIM_DIR = ROOT / "benchmarks" / "slowsync"


def shim(ctx: Context) -> tuple[Path | None, str]:
    """The shim's ``.so``, built into the run's work directory, or None and why it cannot be had."""
    source = SHIM_DIR / "slowsync.c"
    built = ctx.workdir / "slowsync" / "slowsync.so"
    if built.exists():
        return built, ""
    built.parent.mkdir(parents=True, exist_ok=True)
    command = ["cc", "-O2", "-shared", "-fPIC", "-o", str(built), str(source), "-ldl"]
    try:
        proc = subprocess.run(command, capture_output=True, text=True, check=False)
    except FileNotFoundError:
        return None, "the slowsync shim needs a C compiler (cc): apt-get install -y gcc"
    if proc.returncode != 0 or not built.exists():
        return None, f"the slowsync shim did not build ({' '.join(command)}): {proc.stderr.strip()[-300:]}"
    return built, ""


def child_put_threads_slowsync(spec: dict[str, Any]) -> dict[str, Any]:
    """``put_threads``, once this process is seen to have the shim loaded (the loader only
    warns on stderr when it cannot preload a library)."""
    so = spec["env"]["LD_PRELOAD"]
    if so not in Path("/proc/self/maps").read_text(encoding="utf-8"):
        raise RuntimeError(f"the slowsync shim {so} is not loaded in this process: LD_PRELOAD failed")
    return child_put_threads(spec)


def _under_shim(ctx: Context, so: Path, lib: str, threads: int) -> tuple[str, dict[str, Any], Path]:
    _, spec, where = prepare(ctx, lib, threads)
    spec["env"] = {"LD_PRELOAD": str(so), "SLOWSYNC_US": str(ctx.settings.slowsync_us)}
    return "put_threads_slowsync", spec, where


def run(ctx: Context) -> list[Result]:
    """edgeq and raw sqlite3 at 1 and 8 threads (``slowsync_threads``), each child under the shim."""
    s = ctx.settings
    libs = [lib for lib in LIBS if lib in ctx.libs]
    if not libs:
        return []
    so, why = shim(ctx)
    if so is None:
        ctx.log(f"  {why}")
        status: Status = "not available" if s.smoke else "error"
        return [Result("put_threads_slowsync", lib, status, n, note=why) for n in s.slowsync_threads
                for lib in libs]
    ctx.log(f"  slowsync shim on: LD_PRELOAD={so} SLOWSYNC_US={s.slowsync_us}")
    out = run_thread_counts(ctx, "put_threads_slowsync", libs, functools.partial(_under_shim, ctx, so),
                            s.slowsync_threads)
    for r in out:
        if r.status == "ok":
            r.metrics["slowsync_us"] = float(s.slowsync_us)
            r.info["ld_preload"] = str(so)
    return out

"""``put_threads`` under the slowsync shim: every flush as slow as a cheap SD card's.

The shim (``../shared/tools/slowsync``, an ``LD_PRELOAD`` library) makes each ``fsync``,
``fdatasync`` and ``syncfs`` wait ``slowsync_us`` after the real flush, so group commit
is measured where a flush costs milliseconds. It is built by its own ``build`` script
in a copy under the run's scratch directory when the tool has no ``slowsync.so``.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from pathlib import Path
from typing import Any

from benchmarks.cases.put_threads import child_put_threads, prepare
from benchmarks.cases.threads import run_thread_counts
from benchmarks.results import Result, Status
from benchmarks.runner import ROOT, Context

__all__ = ["LIBS", "SHIM_DIR", "child_put_threads_slowsync", "run", "shim"]

LIBS = ["edgeq", "raw-sqlite"]
SHIM_DIR = ROOT.parent / "shared" / "tools" / "slowsync"


def shim(ctx: Context) -> tuple[Path | None, str]:
    """The shim's ``.so`` (built when missing), or None and why it cannot be had."""
    built = SHIM_DIR / "slowsync.so"
    if built.exists():
        return built, ""
    if not (SHIM_DIR / "build").exists():
        return None, f"no slowsync shim: {SHIM_DIR}/build not found (the tool ships beside the repository)"
    copy = ctx.workdir / "slowsync"
    copy.mkdir(parents=True, exist_ok=True)
    for name in ("build", "slowsync.c"):
        shutil.copy(SHIM_DIR / name, copy / name)
    proc = subprocess.run(["sh", str(copy / "build")], capture_output=True, text=True, check=False)
    if proc.returncode != 0 or not (copy / "slowsync.so").exists():
        return None, (f"the slowsync shim did not build ({SHIM_DIR}/build, needs a C compiler: "
                      f"apt-get install -y gcc): {proc.stderr.strip()[-300:]}")
    return copy / "slowsync.so", ""


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

"""Helpers shared by the cases: opening adapters in a child, looping over libraries."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.peers import adapter_class, installed
from benchmarks.peers.base import QueueAdapter, make_payload
from benchmarks.results import Result, median_round
from benchmarks.runner import ChildError, Context

__all__ = ["describe", "open_adapter", "payloads", "run_for_libs"]


def open_adapter(spec: dict[str, Any]) -> QueueAdapter:
    """Open the spec's library on the spec's directory (child side)."""
    cls = adapter_class(spec["lib"])
    return cls(Path(spec["dir"]), now_ms=spec.get("now_ms"))


def describe(adapter: QueueAdapter) -> dict[str, Any]:
    """Version and the durability SQLite really uses, for the report."""
    return {"version": adapter.version(), "pragmas": adapter.pragmas()}


def payloads(count: int, size: int, start: int = 0) -> list[bytes]:
    """``count`` distinct payloads of ``size`` bytes."""
    return [make_payload(i, size) for i in range(start, start + count)]


def run_for_libs(
    ctx: Context,
    case: str,
    libs: list[str],
    prepare: Callable[[str], tuple[str, dict[str, Any], Path | None]],
    *,
    size: int | None = None,
) -> list[Result]:
    """Measure ``case`` per library, ``rounds`` times, each in a fresh child.

    Rounds are interleaved (every library once, then again), so a slow spell
    of the machine hits all libraries alike; the median round is reported.
    ``prepare(lib)`` returns the child action, its spec and the directory to
    delete afterwards; a missing library, an unsupported feature or a failed
    child becomes a result of its own rather than stopping the run.
    """
    rounds: dict[str, list[Result]] = {lib: [] for lib in libs}
    for number in range(ctx.settings.rounds):
        for lib in libs:
            if rounds[lib] and rounds[lib][-1].status != "ok":
                continue  # not installed, n/a or failed: no point repeating
            rounds[lib].append(_measure(ctx, case, lib, prepare, size, number))
    return [median_round(rounds[lib]) for lib in libs]


def _measure(
    ctx: Context,
    case: str,
    lib: str,
    prepare: Callable[[str], tuple[str, dict[str, Any], Path | None]],
    size: int | None,
    number: int,
) -> Result:
    """One round of ``case`` for ``lib`` in a fresh child."""
    if not installed(lib):
        return Result(case, lib, "not installed", size, note=f"{lib} is not installed")
    where: Path | None = None
    try:
        action, spec, where = prepare(lib)
        ctx.log(f"  {case} {lib}" + (f" @ {size:,}" if size is not None else "")
                + (f" (round {number + 1})" if ctx.settings.rounds > 1 else ""))
        got = ctx.child(action, spec)
    except ChildError as exc:
        ctx.log(f"    error: {exc}")
        return Result(case, lib, "error", size, note=str(exc))
    finally:
        if where is not None:
            ctx.discard(where)
    return Result(
        case,
        lib,
        got.get("status", "ok"),
        size,
        metrics=got.get("metrics", {}),
        info=got.get("info", {}),
        note=got.get("note", ""),
    )

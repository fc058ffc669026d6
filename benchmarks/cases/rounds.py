"""Rounds of a case whose rows each start servers and children of their own (sync_secure,
fleet): every row once per round, rows interleaved (a slow spell of the machine hits
them alike), a failed row not repeated, the median round of each reported."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Sequence
from typing import TypeVar

from benchmarks.results import Result, median_round
from benchmarks.runner import ChildError, Context

__all__ = ["FAILURES", "interleaved"]

#: What a failed measurement raises: its row becomes an "error" result, the run goes on.
FAILURES = (ChildError, OSError, RuntimeError, ValueError, KeyError, json.JSONDecodeError,
            subprocess.TimeoutExpired)

K = TypeVar("K")


def interleaved(ctx: Context, case: str, keys: Sequence[K], measure: Callable[[K], Result],
                failed: Callable[[K, str], Result]) -> list[Result]:
    """``measure(key)`` for every key, ``rounds`` times interleaved; ``failed(key, why)`` is
    the row of a measurement that raised one of :data:`FAILURES`."""
    rounds: dict[K, list[Result]] = {key: [] for key in keys}
    for number in range(ctx.settings.rounds):
        for key in keys:
            if rounds[key] and rounds[key][-1].status != "ok":
                continue
            if ctx.settings.rounds > 1:
                ctx.log(f"  {case} {key} (round {number + 1})")
            try:
                rounds[key].append(measure(key))
            except FAILURES as exc:
                ctx.log(f"    error: {exc}")
                rounds[key].append(failed(key, str(exc)))
    return [median_round(rounds[key]) for key in keys]

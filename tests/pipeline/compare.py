"""Comparing the job's reports with plain Python's, and reading an export back as journal entries."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds

from edgeq.store.journal import JOURNAL_COLUMNS, JournalEntry
from edgeq.sync.pipeline.report.results import ORDER_BY


def same(got: Any, want: Any) -> bool:
    """Equal, floats within rounding."""
    if isinstance(want, float) or isinstance(got, float):
        return (got is not None and want is not None
                and math.isclose(float(got), float(want), rel_tol=1e-9, abs_tol=1e-9))
    return bool(got == want)


def check(name: str, got: list[dict[str, Any]], want: list[dict[str, Any]]) -> None:
    """Report ``name``'s rows equal plain Python's, in any order, every column plain Python has."""
    key = ORDER_BY[name]
    got = sorted(got, key=lambda r: tuple(str(r[k]) for k in key))
    want = sorted(want, key=lambda r: tuple(str(r[k]) for k in key))
    assert len(got) == len(want), f"{name}: {len(got)} rows, expected {len(want)}"
    for g, w in zip(got, want, strict=True):
        bad = {k: (g[k], v) for k, v in w.items() if not same(g[k], v)}
        assert not bad, f"{name} row {w}: (got, expected) {bad}"


def check_totals(got: dict[str, int | float], want: dict[str, int | float]) -> None:
    """The headline totals equal plain Python's, key for key."""
    assert set(got) == set(want), f"keys differ: {set(got) ^ set(want)}"
    bad = {k: (got[k], v) for k, v in want.items() if not same(got[k], v)}
    assert not bad, f"totals (got, expected): {bad}"


def entries_of(journal: Path) -> list[JournalEntry]:
    """The journal entries an export directory holds (every committed part file)."""
    table = ds.dataset(journal, format="parquet", partitioning="hive").to_table(columns=list(JOURNAL_COLUMNS))
    return [JournalEntry(**row) for row in table.to_pylist()]

"""The API's record of actions (table ``api_actions``): who acted, when, on what, and how it ended;
refused ones too."""

from __future__ import annotations

from contextlib import closing
from pathlib import Path
from typing import Any

from edgeq.store.opening import connect

__all__ = ["one", "record", "recorded"]

_COLS = ("id", "at_ms", "who", "role", "action", "target", "outcome", "detail")


def record(path: str | Path, *, at_ms: int, who: str, role: str, action: str, target: str, outcome: str,
           detail: str) -> int:
    """Add one action to the record in the store at ``path``; its id."""
    with closing(connect(path)) as conn:
        done = conn.execute("INSERT INTO api_actions (at_ms, who, role, action, target, outcome, detail) "
                            "VALUES (?, ?, ?, ?, ?, ?, ?)",
                            (at_ms, who, role, action, target, outcome, detail))
        return done.lastrowid or 0


def recorded(path: str | Path, *, before: int | None, limit: int, who: str | None = None,
             action: str | None = None) -> list[dict[str, Any]]:
    """The latest ``limit`` actions (those with an id below ``before``, if given; only ``who``'s, only
    ``action``s, if given), newest first."""
    with closing(connect(path, read_only=True)) as conn:
        rows = conn.execute(
            f"SELECT {', '.join(_COLS)} FROM api_actions WHERE id < ? AND (? IS NULL OR who = ?) "
            "AND (? IS NULL OR action = ?) ORDER BY id DESC LIMIT ?",
            (before if before is not None else 2**63 - 1, who, who, action, action, limit))
        return [dict(zip(_COLS, row, strict=True)) for row in rows]


def one(path: str | Path, action_id: int) -> dict[str, Any] | None:
    """The recorded action ``action_id``, or None."""
    with closing(connect(path, read_only=True)) as conn:
        row = conn.execute(f"SELECT {', '.join(_COLS)} FROM api_actions WHERE id = ?",
                           (action_id,)).fetchone()
    return None if row is None else dict(zip(_COLS, row, strict=True))

"""The API's record of actions (table ``api_actions``): who acted, when, on what, and how it ended;
refused ones too. :func:`audited` does an action the way every endpoint (and the console) must."""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from edgeq.errors import EdgeqError
from edgeq.store.opening import connect
from edgeq.sync.server.api.http import ApiError

if TYPE_CHECKING:
    from edgeq.sync.server.api.auth import Principal

__all__ = ["audited", "one", "record", "recorded"]

_COLS = ("id", "at_ms", "who", "role", "action", "target", "outcome", "detail")
T = TypeVar("T")


def record(path: str | Path, *, at_ms: int, who: str, role: str, action: str, target: str, outcome: str,
           detail: str) -> int:
    """Add one action to the record in the store at ``path``; its id."""
    with closing(connect(path)) as conn:
        done = conn.execute("INSERT INTO api_actions (at_ms, who, role, action, target, outcome, detail) "
                            "VALUES (?, ?, ?, ?, ?, ?, ?)",
                            (at_ms, who, role, action, target, outcome, detail))
        return done.lastrowid or 0


def audited(path: str | Path, who: Principal, action: str, target: str, do: Callable[[], T], *,
            clock: Callable[[], int]) -> tuple[int, T]:
    """``do()`` as ``who`` asks it: only an operator may (a 403 :class:`ApiError`, nothing done), and it is
    recorded however it ends: ``refused``, ``failed`` (the error) or ``done`` (the answer). The record's id,
    and the answer."""
    def note(outcome: str, detail: str) -> int:
        return record(path, at_ms=clock(), who=who.who, role=who.role, action=action, target=target,
                      outcome=outcome, detail=detail)

    if who.role != "operator":
        refusal = ApiError(403, f"{action} needs the operator role; {who.who} is a {who.role}")
        note("refused", str(refusal))
        raise refusal
    try:
        body = do()
    except EdgeqError as exc:
        note("refused" if isinstance(exc, ApiError) and exc.status == 403 else "failed", str(exc))
        raise
    return note("done", json.dumps(body)[:500]), body


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

"""The record of one measurement, as stored in the JSON report."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["HEADLINE_METRIC", "SUMMED", "Result", "Status", "median_round"]

#: The figure each case is compared (and its rounds ranked) on, and whether higher is better.
HEADLINE_METRIC: dict[str, tuple[str, bool]] = {
    "import": ("import_ms", False),
    "cli_start": ("median_ms", False),
    "put_single": ("ops_per_s", True),
    "put_batch": ("msgs_per_s", True),
    "get_confirm": ("ops_per_s", True),
    "put_threads": ("ops_per_s", True),
    "put_threads_slowsync": ("ops_per_s", True),
    "aio_puts": ("ops_per_s", True),
    "rule_cost": ("msgs_per_s", True),
    "get_confirm_threads": ("ops_per_s", True),
    "drain": ("msgs_per_s", True),
    "depth": ("median_ms", False),
    "expiry": ("seconds", False),
    "check": ("msgs_per_s", True),
    "memory": ("peak_rss_mb", False),
    "sync": ("msgs_per_s", True),
    "sync_secure": ("msgs_per_s", True),
    "wire_bytes": ("bytes_per_msg", False),
    "fleet": ("msgs_per_s", True),
    "wakeup_same": ("p50_ms", False),
    "wakeup_other": ("p50_ms", False),
    "idle_wait": ("cpu_percent", False),
    "bridge_out": ("msgs_per_s", True),
    "bridge_in": ("msgs_per_s", True),
}

#: Per case: figures summed over every round (so no round's problem is hidden by the median).
SUMMED: dict[str, tuple[str, ...]] = {
    "drain": ("messages", "received", "duplicates", "losses", "left_on_queue", "errors"),
    "sync": ("duplicates", "losses"),
    "sync_secure": ("duplicates", "losses"),
    "fleet": ("lost", "duplicated", "errors"),
}

#: ok: measured; n/a: the library has no such feature; not installed: peer missing;
#: error: the child failed (its stderr tail is in ``note``); skipped: not selected;
#: not available: a baseline's external program (mosquitto, the slowsync shim) is missing, tolerated in
#: smoke runs only.
Status = Literal["ok", "n/a", "not installed", "error", "placeholder", "not available"]


@dataclass
class Result:
    """One (case, library, size) measurement."""

    case: str
    lib: str
    status: Status
    size: int | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Result:
        """Rebuild a result from :meth:`to_json` output."""
        return cls(**data)


def median_round(rounds: list[Result]) -> Result:
    """Merge the rounds of one (case, library, size) into the median round.

    The round whose headline figure is the median is kept whole (so its
    figures stay consistent with each other); every round's headline figure
    is kept in ``info["rounds"]``. For the drain, duplicates, losses and
    errors are summed over all rounds (for sync: duplicates and losses),
    never hidden by the choice of round.
    A failed or unsupported round wins, so problems are never averaged away.
    """
    bad = [r for r in rounds if r.status != "ok"]
    if bad or len(rounds) == 1:
        return bad[0] if bad else rounds[0]
    metric, _ = HEADLINE_METRIC[rounds[0].case]
    ranked = sorted(rounds, key=lambda r: r.metrics.get(metric, 0.0))
    chosen = ranked[(len(ranked) - 1) // 2]
    merged = Result(chosen.case, chosen.lib, chosen.status, chosen.size, dict(chosen.metrics),
                    dict(chosen.info), chosen.note)
    merged.info["rounds"] = [r.metrics.get(metric, 0.0) for r in rounds]
    merged.metrics["rounds"] = float(len(rounds))
    if chosen.case in SUMMED:
        for key in SUMMED[chosen.case]:
            merged.metrics[key] = sum(r.metrics.get(key, 0.0) for r in rounds)
        merged.note = "; ".join(r.note for r in rounds if r.note)
    return merged

"""The pipeline's results for people: the printed summary, and the HTML page re-exported from
:mod:`~edgeq.sync.pipeline.report.page`. Headline figures come from ``totals``, never from the rows."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from edgeq.sync.pipeline.report.cells import cell, format_ms
from edgeq.sync.pipeline.report.figures import count, headline, verdict
from edgeq.sync.pipeline.report.page import html_page, write_html
from edgeq.sync.pipeline.report.results import REPORTS, PipelineResult

__all__ = ["format_ms", "html_page", "report_table", "summary_text", "table", "write_html"]

_MAX_ROWS = 20
#: A cell right-aligned in its column: a count or a duration (a time or a name is not).
_NUMBER = re.compile(r"^(-|[+-]?[\d,]+(\.\d+)?( ms| s| min| h)?)$")


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], *, limit: int = _MAX_ROWS,
          total: int | None = None) -> str:
    """A text table of formatted cells (numbers right-aligned), cut after ``limit`` of ``total`` rows.

    >>> print(table(["queue", "n"], [["A", "1"], ["BB", "22"]]))
    queue   n
    -----  --
    A       1
    BB     22
    """
    shown = [["-" if v is None else str(v) for v in row] for row in rows[:limit]]
    right = [bool(shown) and all(_NUMBER.match(r[i]) for r in shown) for i in range(len(headers))]
    widths = [max([len(h)] + [len(r[i]) for r in shown]) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if right[i] else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()

    out = [line(list(headers)), line(["-" * w for w in widths])] + [line(r) for r in shown]
    more = (len(rows) if total is None else total) - len(shown)
    if more > 0:
        out.append(f"... {more:,} more row(s) in the Parquet report")
    return "\n".join(out)


def report_table(result: PipelineResult, name: str, columns: Sequence[str],
                 headers: Sequence[str] | None = None, *, limit: int = _MAX_ROWS) -> str:
    """Report ``name``'s ``columns`` as a text table, each value shown as :func:`cell` shows it."""
    rows = result.rows.get(name, [])
    return table(list(headers or columns), [[cell(c, r.get(c)) for c in columns] for r in rows[:limit]],
                 limit=limit, total=result.counts.get(name, len(rows)))


def _scope(result: PipelineResult) -> str:
    text: Any = result.audit_scope.get("text")
    return str(text) if text else ""


def summary_text(result: PipelineResult) -> str:
    """The readable summary printed after a run."""
    width = max(len(label) for label, _, _ in headline(result))
    ok, says = verdict(result)
    parts = [
        f"edgeq pipeline: {count(result.totals, 'journal_rows')} journal entries from {result.journal} "
        f"-> {result.out} ({result.total_seconds:.1f} s, reports schema v{result.schema_version})",
    ]
    if _scope(result):
        parts.append(f"Audit scope: {_scope(result)}")
    parts += ["", "Headline figures (over all the data)"]
    parts += [f"  {label.ljust(width)}  {value}" + (f"  ({detail})" if detail else "")
              for label, value, detail in headline(result)]
    parts += [
        "",
        "Journal entries",
        report_table(result, "journal_totals", ("kind", "side", "entries")),
        "",
        "Delivery latency, creation to server confirm (corrected by each device's clock offset)",
        report_table(result, "latency", ("device", "queue", "messages", "p50_ms", "p95_ms", "p99_ms",
                                         "max_ms", "uncorrected"),
                     ("device", "queue", "messages", "p50", "p95", "p99", "max", "uncorrected")),
        "",
        "End-to-end latency, creation to delivery, beside creation to server confirm "
        "(corrected; raw in Parquet)",
        report_table(result, "e2e_latency", ("device", "queue", "messages", "delivered", "confirm_p50_ms",
                                             "confirm_p99_ms", "delivered_p50_ms", "delivered_p99_ms",
                                             "uncorrected"),
                     ("device", "queue", "accepted", "delivered", "confirm p50", "confirm p99", "e2e p50",
                      "e2e p99", "uncorrected")),
        "",
        "Devices: last seen, clock offset (device clock minus server clock)",
        report_table(result, "device_health", ("device", "last_seen_ms", "offset_last_ms", "offset_min_ms",
                                               "offset_max_ms", "accepted", "uncorrected", "device_expired"),
                     ("device", "last seen (UTC)", "offset", "offset min", "offset max", "accepted",
                      "uncorrected", "expired on device")),
        "",
        "Expired messages per queue and day (each once, even if it expired on both sides)",
        report_table(result, "expiry_daily", ("date", "queue", "expired", "server_only", "device_only",
                                              "both", "delivered_then_device_expired", "entries"),
                     ("date", "queue", "expired", "server only", "device only", "both",
                      "delivered, then device copy expired", "entries")),
        "",
        "Exactly-once audit per origin device (duplicates and gaps must be 0)",
        report_table(result, "audit_devices", ("origin", "accepted", "first_stamp", "last_stamp",
                                               "duplicates", "expired_unaccepted", "gaps", "dead_lettered"),
                     ("origin", "accepted", "first created (UTC)", "last created (UTC)", "duplicates",
                      "expired unaccepted", "gaps", "dead-lettered")),
        says,
    ]
    if ok is False:
        parts.append(report_table(
            result, "audit_duplicates", ("uid", "origin", "times", "first_ms", "last_ms"),
            ("duplicate uid", "origin", "times", "first accepted", "last accepted"), limit=10))
        parts.append(report_table(result, "audit_gaps", ("uid", "origin", "kinds", "first_seen_ms"),
                                  ("gap uid", "origin", "seen as", "first seen"), limit=10))
    parts += [
        "",
        "Throughput per queue and hour (UTC)",
        report_table(result, "throughput_hourly", ("hour_ms", "queue", "accepted", "delivered",
                                                   "expired_entries", "accepted_bytes"),
                     ("hour (UTC)", "queue", "accepted", "delivered", "expired", "accepted bytes")),
        "",
        "Reports written (Parquet): " + ", ".join(f"{n} ({result.counts.get(n, 0):,})" for n in REPORTS),
    ]
    return "\n".join(parts)


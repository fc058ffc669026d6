"""The pipeline's results for people: a printed summary, and a self-contained HTML page.

The page needs nothing but a browser: its charts (the latency distribution,
expiries per day by where they expired, hourly throughput) are inline SVG, with
no script and no external file.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from datetime import UTC, date, datetime
from pathlib import Path

from edgeq.sync.pipeline.results import REPORTS, PipelineResult

__all__ = ["format_ms", "html_page", "summary_text", "table", "write_html"]

_MAX_ROWS = 20


def format_ms(value: float | None) -> str:
    """A duration for people.

    >>> [format_ms(v) for v in (None, 0, 12.5, 1500, 90_000, 7_200_000)]
    ['-', '0 ms', '12.5 ms', '1.50 s', '1.5 min', '2.0 h']
    """
    if value is None:
        return "-"
    if abs(value) < 1000:
        return f"{value:g} ms" if value == int(value) else f"{value:.1f} ms"
    if abs(value) < 60_000:
        return f"{value / 1000:.2f} s"
    if abs(value) < 3_600_000:
        return f"{value / 60_000:.1f} min"
    return f"{value / 3_600_000:.1f} h"


def _hour(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:00")


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], *, limit: int = _MAX_ROWS) -> str:
    """A plain text table, numbers right-aligned, cut after ``limit`` rows.

    >>> print(table(["queue", "n"], [["A", 1], ["BB", 22]]))
    queue   n
    -----  --
    A       1
    BB     22
    """
    shown = [[("-" if v is None else f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else str(v))
              for v in row] for row in rows[:limit]]
    numeric = [all(isinstance(r[i], (int, float)) and not isinstance(r[i], bool) for r in rows[:limit] if r[i] is not None)
               for i in range(len(headers))]
    widths = [max([len(h)] + [len(r[i]) for r in shown]) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        """One table line: numeric columns right-aligned, the rest left-aligned."""
        return "  ".join(c.rjust(w) if numeric[i] else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()

    out = [line(list(headers)), line(["-" * w for w in widths])] + [line(r) for r in shown]
    if len(rows) > limit:
        out.append(f"... {len(rows) - limit:,} more row(s) in the Parquet report")
    return "\n".join(out)


def summary_text(result: PipelineResult) -> str:
    """The readable summary printed after a run."""
    r = result.rows
    parts = [
        f"edgeq pipeline: {result.journal_rows:,} journal entries from {result.journal} "
        f"-> {result.out} ({result.total_seconds:.1f} s)",
        "",
        "Journal entries",
        table(["kind", "side", "entries"], [[x["kind"], x["side"], x["entries"]] for x in r.get("journal_totals", [])]),
        "",
        "Delivery latency, creation to server confirm (corrected by each device's clock offset)",
        table(
            ["device", "queue", "messages", "p50", "p95", "p99", "max", "uncorrected"],
            [[x["device"], x["queue"], x["messages"], format_ms(x["p50_ms"]), format_ms(x["p95_ms"]),
              format_ms(x["p99_ms"]), format_ms(x["max_ms"]), x["uncorrected"]] for x in r.get("latency", [])],
        ),
        "",
        "Expired messages per queue and day (each message once, even if it expired on both sides)",
        table(
            ["date", "queue", "expired", "server only", "device only", "both", "entries"],
            [[str(x["date"]), x["queue"], x["expired"], x["server_only"], x["device_only"], x["both"], x["entries"]]
             for x in r.get("expiry_daily", [])],
        ),
        "",
        "Exactly-once audit per origin device (duplicates and gaps must be 0)",
        table(
            ["origin", "accepted", "first stamp", "last stamp", "duplicates", "expired unaccepted",
             "expired on device after accept", "gaps"],
            [[x["origin"], x["accepted"], x["first_stamp"], x["last_stamp"], x["duplicates"],
              x["expired_unaccepted"], x["expired_on_device_after_accept"], x["gaps"]]
             for x in r.get("audit_devices", [])],
        ),
    ]
    dups, gaps = result.counts.get("audit_duplicates", 0), result.counts.get("audit_gaps", 0)
    verdict = "OK: no uid accepted twice, no gap" if not dups and not gaps else (
        f"ATTENTION: {dups:,} uid(s) accepted more than once, {gaps:,} gap(s): see audit_duplicates and audit_gaps"
    )
    parts += [verdict, "", "Throughput per queue and hour (UTC)"]
    parts.append(table(
        ["hour", "queue", "accepted", "delivered", "expired", "accepted bytes"],
        [[_hour(x["hour_ms"]), x["queue"], x["accepted"], x["delivered"], x["expired_entries"], x["accepted_bytes"]]
         for x in r.get("throughput_hourly", [])],
    ))
    parts += ["", "Reports written (Parquet): " + ", ".join(f"{n} ({result.counts.get(n, 0):,})" for n in REPORTS)]
    return "\n".join(parts)


# -- HTML ----------------------------------------------------------------------------------

_COLORS = {"server": "#4e79a7", "device": "#f28e2b", "both": "#e15759", "bar": "#4e79a7",
           "accepted": "#4e79a7", "delivered": "#59a14f", "expired": "#e15759"}


def _bars_svg(labels: Sequence[str], series: dict[str, Sequence[float]], *, title: str, unit: str) -> str:
    """A stacked bar chart as an SVG element."""
    width, height, left, bottom, top = 760, 260, 60, 70, 30
    n = max(1, len(labels))
    totals = [sum(values[i] for values in series.values()) for i in range(len(labels))]
    peak = max(totals, default=0) or 1
    slot = (width - left - 10) / n
    bar = max(1.0, slot * 0.8)
    plot_h = height - bottom - top
    e = html.escape
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
             f'aria-label="{e(title)}"><title>{e(title)}</title>',
             f'<line x1="{left}" y1="{top + plot_h}" x2="{width - 10}" y2="{top + plot_h}" stroke="#444"/>',
             f'<text x="{left - 6}" y="{top + 4}" text-anchor="end" font-size="11">{peak:,.0f}</text>',
             f'<text x="{left - 6}" y="{top + plot_h}" text-anchor="end" font-size="11">0</text>',
             f'<text x="12" y="{top + plot_h / 2}" font-size="11" transform="rotate(-90 12 {top + plot_h / 2})" '
             f'text-anchor="middle">{e(unit)}</text>']
    every = max(1, n // 24)
    for i, label in enumerate(labels):
        x = left + i * slot + (slot - bar) / 2
        y = float(top + plot_h)
        for name, values in series.items():
            h = values[i] / peak * plot_h
            if h > 0:
                y -= h
                parts.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar:.1f}" height="{h:.1f}" '
                             f'fill="{_COLORS.get(name, "#4e79a7")}"><title>{e(label)} {e(name)}: '
                             f'{values[i]:,.0f}</title></rect>')
        if i % every == 0:
            cx = x + bar / 2
            parts.append(f'<text x="{cx:.1f}" y="{top + plot_h + 12}" font-size="10" text-anchor="end" '
                         f'transform="rotate(-45 {cx:.1f} {top + plot_h + 12})">{e(label)}</text>')
    lx = left
    for name in series:
        if len(series) > 1:
            parts.append(f'<rect x="{lx}" y="6" width="10" height="10" fill="{_COLORS.get(name, "#4e79a7")}"/>'
                         f'<text x="{lx + 14}" y="15" font-size="11">{e(name)}</text>')
            lx += 20 + 7 * len(name)
    parts.append("</svg>")
    return "".join(parts)


def _html_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    e = html.escape
    head = "".join(f"<th>{e(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f"<td>{e('-' if v is None else f'{v:,}' if isinstance(v, int) else str(v))}</td>" for v in row)
        + "</tr>" for row in rows[:200]
    )
    more = f"<p>{len(rows) - 200:,} more row(s) in the Parquet report.</p>" if len(rows) > 200 else ""
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{more}"


def _bucket_label(low: int | None, high: int | None) -> str:
    if low is None:
        return "< 0"
    return f"≥ {format_ms(low)}" if high is None else f"{format_ms(low)} to {format_ms(high)}"


def html_page(result: PipelineResult) -> str:
    """The report page: headline figures, the charts, then the tables."""
    r = result.rows
    hist = [x for x in r.get("latency_histogram", [])]
    while hist and hist[-1]["messages"] == 0:
        hist.pop()
    while hist and hist[0]["messages"] == 0:
        hist.pop(0)
    days: dict[date, dict[str, int]] = {}
    for x in r.get("expiry_daily", []):
        day = days.setdefault(x["date"], {"server": 0, "device": 0, "both": 0})
        day["server"] += x["server_only"]
        day["device"] += x["device_only"]
        day["both"] += x["both"]
    hours: dict[int, dict[str, int]] = {}
    for x in r.get("throughput_hourly", []):
        hour = hours.setdefault(x["hour_ms"], {"accepted": 0, "delivered": 0})
        hour["accepted"] += x["accepted"]
        hour["delivered"] += x["delivered"]
    accepted = sum(x["accepted"] for x in r.get("audit_devices", []))
    expired = sum(x["expired"] for x in r.get("expiry_daily", []))
    both = sum(x["both"] for x in r.get("expiry_daily", []))
    dups, gaps = result.counts.get("audit_duplicates", 0), result.counts.get("audit_gaps", 0)
    audit_ok = dups == 0 and gaps == 0
    e = html.escape
    sections = [
        "<h2>Delivery latency</h2><p>From creation on the device (corrected by its clock offset) to the "
        "server's confirm, all devices and queues.</p>",
        _bars_svg([_bucket_label(x["low_ms"] if x["bucket"] >= 0 else None, x["high_ms"]) for x in hist],
                  {"bar": [x["messages"] for x in hist]}, title="latency distribution", unit="messages"),
        _html_table(["device", "queue", "messages", "p50", "p95", "p99", "max"],
                    [[x["device"], x["queue"], x["messages"], format_ms(x["p50_ms"]), format_ms(x["p95_ms"]),
                      format_ms(x["p99_ms"]), format_ms(x["max_ms"])] for x in r.get("latency", [])]),
        "<h2>Expiries over time</h2><p>Distinct messages per day (UTC), by where they expired; a message that "
        "expired on both the device and the server (MQe's “may seem to expire twice”) is counted once, as "
        "<em>both</em>.</p>",
        _bars_svg([str(d) for d in sorted(days)], {k: [days[d][k] for d in sorted(days)] for k in ("server", "device", "both")},
                  title="expired messages per day", unit="messages"),
        _html_table(["date", "queue", "expired", "server only", "device only", "both"],
                    [[str(x["date"]), x["queue"], x["expired"], x["server_only"], x["device_only"], x["both"]]
                     for x in r.get("expiry_daily", [])]),
        "<h2>Throughput</h2>",
        _bars_svg([_hour(h) for h in sorted(hours)], {k: [hours[h][k] for h in sorted(hours)] for k in ("accepted", "delivered")},
                  title="messages per hour", unit="messages / hour"),
        "<h2>Exactly-once audit</h2>",
        f'<p class="{"ok" if audit_ok else "bad"}">' + (
            "No uid was accepted twice and no device message is unaccounted for." if audit_ok else
            f"{dups:,} uid(s) accepted more than once and {gaps:,} unaccounted device message(s): "
            "see the audit_duplicates and audit_gaps reports.") + "</p>",
        _html_table(["origin", "accepted", "first stamp", "last stamp", "duplicates", "expired unaccepted",
                     "expired on device after accept", "gaps"],
                    [[x["origin"], x["accepted"], x["first_stamp"], x["last_stamp"], x["duplicates"],
                      x["expired_unaccepted"], x["expired_on_device_after_accept"], x["gaps"]]
                     for x in r.get("audit_devices", [])]),
    ]
    tiles = "".join(
        f'<div class="tile"><b>{e(v)}</b><span>{e(k)}</span></div>'
        for k, v in (("journal entries", f"{result.journal_rows:,}"), ("messages accepted", f"{accepted:,}"),
                     ("messages expired", f"{expired:,}"), ("expired on both sides", f"{both:,}"),
                     ("audit", "OK" if audit_ok else "ATTENTION"))
    )
    generated = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>edgeq journal report</title>
<style>
body{{font-family:system-ui,sans-serif;margin:2em auto;max-width:820px;color:#222}}
h1{{font-size:1.5em}} h2{{margin-top:1.6em;border-bottom:1px solid #ddd}}
.tiles{{display:flex;gap:1em;flex-wrap:wrap}} .tile{{background:#f4f6f8;padding:.6em 1em;border-radius:6px}}
.tile b{{display:block;font-size:1.4em}} .tile span{{font-size:.85em;color:#555}}
table{{border-collapse:collapse;font-size:.9em;margin:.8em 0}} th,td{{padding:2px 8px;border-bottom:1px solid #eee;text-align:right}}
th:first-child,td:first-child,th:nth-child(2),td:nth-child(2){{text-align:left}}
.ok{{color:#2b7a2b}} .bad{{color:#b00020;font-weight:bold}} svg{{max-width:100%;height:auto}}
</style></head><body>
<h1>edgeq journal report</h1>
<p>{e(result.journal)} → {e(result.out)}, generated {generated}</p>
<div class="tiles">{tiles}</div>
{"".join(sections)}
</body></html>
"""


def write_html(result: PipelineResult, path: Path) -> Path:
    """Write :func:`html_page` to ``path``; return it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(html_page(result), "utf-8")
    return path

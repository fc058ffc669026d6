"""The report page: one self-contained HTML file (inline CSS and SVG, no script, nothing fetched),
readable offline and printable. What it shows: docs/pipeline.md, 'The report page'."""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from edgeq.sync.pipeline.report.cells import cell, format_time, is_numeric, short_ms
from edgeq.sync.pipeline.report.charts import bar_chart, line_chart, time_marks
from edgeq.sync.pipeline.report.figures import count, headline, verdict
from edgeq.sync.pipeline.report.results import REPORTS, PipelineResult

__all__ = ["html_page", "html_table", "write_html"]

_E = html.escape
#: Rows of a table shown on the page (all are in the Parquet report).
_PAGE_ROWS = 200
#: Characters of table text the page's column holds in one line (at its width and font size).
_TABLE_CHARS = 130
_ISO_T = re.compile(r"(?<=\d\d-\d\d)T(?=\d\d:)")
#: Up to this many hours, throughput is drawn as grouped bars; beyond, as lines.
_BAR_HOURS = 48
_HOUR = 3_600_000
#: The most hours a chart spans hour by hour (90 days).
_MAX_HOURS = 24 * 90
#: Devices drawn in the clock offset chart (those whose offset moved most).
_OFFSET_DEVICES = 8

_CSS = ("""
*{box-sizing:border-box}
body{font-family:system-ui,sans-serif;margin:1.5em auto;max-width:1100px;"""
        """padding:0 1em;color:#222;line-height:1.4}
h1{font-size:1.5em;margin-bottom:.2em} h2{margin-top:1.8em;border-bottom:1px solid #ddd;font-size:1.2em}
h3{font-size:1em;margin:1.2em 0 .3em}
.meta{color:#555;font-size:.9em;overflow-wrap:anywhere}
.tiles{display:grid;grid-template-columns:repeat(auto-fill,minmax(170px,1fr));gap:.7em;margin:1em 0}
.tile{background:#f4f6f8;padding:.6em .8em;border-radius:6px;min-width:0}
.tile b{display:block;font-size:1.35em;overflow-wrap:anywhere} .tile span{font-size:.85em;color:#444}
.tile small{display:block;color:#666;font-size:.75em;overflow-wrap:anywhere}
.tile.bad{background:#fde8ea;color:#b00020} .tile.ok b{color:#2b7a2b}
.scroll{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;font-size:.85em;margin:.6em 0;width:100%;table-layout:fixed}
th,td{padding:3px 6px;border-bottom:1px solid #eee;text-align:left;vertical-align:top;overflow-wrap:anywhere}
th{background:#f4f6f8;font-weight:600} td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
.ok{color:#2b7a2b} .bad{color:#b00020;font-weight:bold}
.alert{border:2px solid #b00020;background:#fff5f6;color:#b00020;padding:.6em 1em;border-radius:6px}
.alert table{color:#222}
.warn{color:#9a5b00}
.note{color:#555;font-size:.85em}
svg.chart{display:block;width:100%;min-width:600px;height:auto;margin:.6em 0}
""")


def _wrappable(text: str) -> str:
    """``text`` escaped, with a line-break opportunity after an ISO time's ``T``.

    >>> _wrappable("2025-11-21T22:00:00.123Z")
    '2025-11-21T<wbr>22:00:00.123Z'
    """
    escaped = _E(text)
    return _ISO_T.sub("T<wbr>", escaped)


def _sum_by(rows: Sequence[dict[str, Any]], key: str, series: dict[str, str]) -> dict[Any, dict[str, float]]:
    """Per value of ``key``, each series' sum of its column (e.g. per hour, over queues)."""
    sums: dict[Any, dict[str, float]] = {}
    for row in rows:
        into = sums.setdefault(row[key], dict.fromkeys(series, 0.0))
        for name, column in series.items():
            into[name] += row.get(column) or 0
    return sums


def _partial(result: PipelineResult, name: str) -> str:
    """A note under a chart drawn from a report's collected rows when they are not all of it."""
    have, total = len(result.rows.get(name, [])), result.counts.get(name, 0)
    if total <= have:
        return ""
    return (f'<p class="note warn">Drawn from the first {have:,} of the {total:,} rows of <code>{name}</code>'
            " (in its order): the whole is in the Parquet report.</p>")


def _every_hour(hours: set[int]) -> list[int]:
    """Every hour from the first to the last of ``hours`` (an hour without data is a time too),
    or only ``hours`` if that would be more than ``_MAX_HOURS``."""
    if not hours:
        return []
    first, last = min(hours), max(hours)
    span = (last - first) // _HOUR + 1
    return list(range(first, last + 1, _HOUR)) if span <= _MAX_HOURS else sorted(hours)


def _box(svg: str) -> str:
    """A chart in a box of its own, which scrolls sideways on a screen too narrow to read it."""
    return f'<div class="scroll">{svg}</div>'


def html_table(result: PipelineResult, name: str, columns: Sequence[str],
               headers: Sequence[str] | None = None, *, limit: int = _PAGE_ROWS,
               rows: Sequence[dict[str, Any]] | None = None) -> str:
    """Report ``name``'s ``columns`` as an HTML table, cut after ``limit`` rows with a line saying
    how many more the Parquet report holds."""
    data = result.rows.get(name, []) if rows is None else rows
    if not data:
        return '<p class="note">No rows.</p>'
    kinds = ["n" if any(is_numeric(c, r.get(c)) for r in data[:limit]) else "" for c in columns]
    cells = [[cell(c, r.get(c)) for c in columns] for r in data[:limit]]
    titles = list(headers or columns)
    head = "".join(f'<th class="{k}">{_E(h)}</th>' for h, k in zip(titles, kinds, strict=True))
    body = "".join(
        "<tr>" + "".join(f'<td class="{k}">{_wrappable(v)}</td>' for v, k in zip(row, kinds, strict=True))
        + "</tr>"
        for row in cells
    )
    # A fixed layout shares the width by the <col> widths: give each column room for its
    # longest header word (bold: a little wider) and its longest value; when that is more
    # than the page holds, long values (times, uids: over 18 characters) get less and wrap
    # (a time after its "T"); names and numbers keep their room.
    words = [max(len(w) for w in f"{t} x".split()) * 1.2 + 2 for t in titles]
    weights = [max(words[i], 2 + max((len(row[i]) for row in cells), default=0)) for i in range(len(titles))]
    if sum(weights) > _TABLE_CHARS:
        weights = [w if w <= 20 else max(words[i], 16) for i, w in enumerate(weights)]
    cols = "".join(f'<col style="width:{100 * w / sum(weights):.1f}%">' for w in weights)
    more = (result.counts.get(name, len(data)) if rows is None else len(data)) - min(limit, len(data))
    tail = (f'<p class="note">{more:,} more row(s) in the Parquet report <code>{_E(name)}</code>.</p>'
            if more > 0 else "")
    return (f'<div class="scroll"><table><colgroup>{cols}</colgroup><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table></div>{tail}")


def _tiles(result: PipelineResult) -> str:
    ok, _ = verdict(result)
    tiles = [(value, label, detail, "") for label, value, detail in headline(result)]
    t = result.totals
    tiles.append(("-" if ok is None else "OK" if ok else "ATTENTION", "exactly-once audit",
                  f"{count(t, 'duplicates')} duplicate(s), {count(t, 'gaps')} gap(s)",
                  "" if ok is None else "ok" if ok else "bad"))
    return '<div class="tiles">' + "".join(
        f'<div class="tile {cls}"><b>{_E(value)}</b><span>{_E(label)}</span>'
        + (f"<small>{_E(detail)}</small>" if detail else "") + "</div>"
        for value, label, detail, cls in tiles
    ) + "</div>"


def _audit(result: PipelineResult) -> str:
    ok, says = verdict(result)
    scope = result.audit_scope.get("text")
    out = ["<h2>Exactly-once audit</h2>"]
    if scope:
        out.append(f'<p class="note">Scope: {_E(str(scope))}</p>')
    if ok is None:
        out.append(f'<p class="warn">{_E(says)}</p>')
    elif ok:
        out.append(f'<p class="ok">{_E(says)}</p>')
    else:
        out.append(f'<div class="alert" role="alert"><p class="bad">{_E(says)}</p>')
        if result.rows.get("audit_duplicates"):
            out.append("<h3>Uids accepted more than once</h3>")
            out.append(html_table(
                result, "audit_duplicates", ("uid", "origin", "times", "queues", "first_ms", "last_ms"),
                ("uid", "origin", "times", "queues", "first accepted (UTC)", "last accepted (UTC)"),
                limit=50))
        if result.rows.get("audit_gaps"):
            out.append("<h3>Device messages never accepted nor expired (gaps)</h3>")
            out.append(html_table(
                result, "audit_gaps", ("uid", "origin", "stamp", "kinds", "first_seen_ms"),
                ("uid", "origin", "created (UTC)", "seen as", "first seen (UTC)"), limit=50))
        out.append("</div>")
    out.append("<h3>Per device store</h3>")
    out.append(html_table(
        result, "audit_devices",
        ("origin", "accepted", "first_stamp", "last_stamp", "duplicates", "gaps", "expired_unaccepted",
         "delivered_then_device_expired", "unauditable", "dead_lettered"),
        ("origin", "accepted", "first created (UTC)", "last created (UTC)", "duplicates", "gaps",
         "expired before acceptance", "delivered, then device copy expired", "not judged",
         "waiting in the dead-letter queue"),
    ))
    return "".join(out)


def _bucket_label(row: dict[str, Any]) -> str:
    """A latency bucket by its lower bound (the bar holds latencies from it to the next one's)."""
    if row["bucket"] < 0:
        return "< 0"
    return f"≥ {short_ms(row['low_ms'])}" if row["high_ms"] is None else short_ms(row["low_ms"])


def _latency(result: PipelineResult) -> str:
    hist = list(result.rows.get("latency_histogram", []))
    while hist and hist[-1]["messages"] == 0:
        hist.pop()
    while hist and hist[0]["messages"] == 0:
        hist.pop(0)
    out = ["<h2>Latency</h2><p>Creation on the device, moved onto the server's clock by the device's "
           "measured clock offset, to the server's confirm (the message became visible there), all devices "
           "and queues. <em>uncorrected</em> counts messages whose device reported no offset: their "
           "latency is on two clocks. Each bar is labelled by its lower bound.</p>"]
    if hist:
        out.append(_box(bar_chart(
            [_bucket_label(x) for x in hist], {"messages": [x["messages"] for x in hist]},
            title="creation to server confirm: messages per latency bucket", unit="messages",
            x_title="latency (lower bound)")))
    out.append(html_table(result, "latency", ("device", "queue", "messages", "uncorrected", "p50_ms",
                                              "p95_ms", "p99_ms", "max_ms"),
                          ("device", "queue", "messages", "uncorrected", "p50", "p95", "p99", "max")))
    out.append("<h3>End to end: creation to delivery, beside creation to server confirm</h3>"
               '<p class="note">Delivery is the first get of the message on the server. Offset-corrected '
               "figures, and the median to delivery without the correction; every uncorrected (raw) "
               "percentile is in the Parquet report.</p>")
    out.append(html_table(result, "e2e_latency", ("device", "queue", "messages", "delivered", "uncorrected",
                                                  "confirm_p50_ms", "confirm_p99_ms", "delivered_p50_ms",
                                                  "delivered_p99_ms", "delivered_raw_p50_ms"),
                          ("device", "queue", "accepted", "delivered", "uncorrected", "to confirm p50",
                           "to confirm p99", "to delivery p50", "to delivery p99",
                           "to delivery p50, uncorrected")))
    return "".join(out)


def _devices(result: PipelineResult) -> str:
    out = ["<h2>Devices</h2><p>When each device last made a request to the server (its device record as "
           "exported, or its last journal row if later) and its clock offset (device clock minus server "
           "clock, as the sync server measured it). The journal does not record syncs, refusals or held "
           "puts: <code>edgeq sync status</code>, <code>edgeq server refusals list</code> and <code>edgeq "
           "server held list</code> show those.</p>"]
    hourly = result.rows.get("device_clock_hourly", [])
    if hourly:
        spread: dict[str, float] = {}
        for r in hourly:
            lo, hi = r.get("offset_min_ms"), r.get("offset_max_ms")
            if lo is not None and hi is not None:
                spread[r["device"]] = max(spread.get(r["device"], 0.0), abs(lo), abs(hi), hi - lo)
        devices = sorted(spread, key=lambda d: (-spread[d], d))[:_OFFSET_DEVICES]
        hours = _every_hour({r["hour_ms"] for r in hourly})
        by = {(r["device"], r["hour_ms"]): r.get("offset_last_ms") for r in hourly}
        if devices:
            note = (f" ({len(devices)} of {len(spread)} devices: those whose offset is largest)"
                    if len(spread) > len(devices) else "")
            out.append(f'<p class="note">Clock offset per hour (last measured in the hour){_E(note)}.</p>')
            largest = max((abs(v) for v in by.values() if v is not None), default=0)
            scale, unit = (1000, "offset (s)") if largest >= 2000 else (1, "offset (ms)")
            labels = [format_time(h, precision="minutes") for h in hours]
            out.append(_box(line_chart(labels, {d: [None if (v := by.get((d, h))) is None else v / scale
                                                    for h in hours] for d in devices},
                                       title="device clock offset per hour", unit=unit, x_title="hour (UTC)",
                                       marks=time_marks(hours, labels[0]))))
            out.append(_partial(result, "device_clock_hourly"))
    out.append(html_table(result, "device_health",
                          ("device", "last_seen_ms", "offset_last_ms", "offset_min_ms", "offset_max_ms",
                           "accepted", "uncorrected", "device_expired", "delivered_then_device_expired"),
                          ("device", "last seen (UTC)", "clock offset", "offset min", "offset max",
                           "accepted", "uncorrected", "expired on device",
                           "delivered, then device copy expired")))
    return "".join(out)


def _expiries(result: PipelineResult) -> str:
    days = _sum_by(result.rows.get("expiry_daily", []), "date",
                   {"server": "server_only", "device": "device_only", "both": "both"})
    order = sorted(days)
    out = ["<h2>Expiries</h2><p>Distinct messages per day (UTC) by where they expired. A message that "
           "expired on both the device and the server (MQe's “may seem to expire twice”) is counted once, "
           "as <em>both</em>. A message delivered on the server whose device copy expired later (a lost "
           "confirm reply) is not an expiry: it has its own column.</p>"]
    if order:
        sides = {k: [days[d][k] for d in order] for k in ("server", "device", "both")}
        out.append(_box(bar_chart([cell("date", d) for d in order], sides,
                                  title="expired messages per day, by side", unit="messages",
                                  x_title="day (UTC)")))
        out.append(_partial(result, "expiry_daily"))
    out.append(html_table(result, "expiry_daily", ("date", "queue", "expired", "server_only", "device_only",
                                                   "both", "delivered_then_device_expired", "entries"),
                          ("date", "queue", "expired", "server only", "device only", "both",
                           "delivered, then device copy expired", "journal entries")))
    out.append("<h3>Where expiry caught them</h3>")
    out.append(html_table(result, "expiry_where", ("queue", "side", "check_point", "messages"),
                          ("queue", "side", "check point", "messages")))
    return "".join(out)


def _throughput(result: PipelineResult) -> str:
    hours = _sum_by(result.rows.get("throughput_hourly", []), "hour_ms",
                    {"accepted": "accepted", "delivered": "delivered", "expired": "expired_entries"})
    order = _every_hour(set(hours))
    out = ["<h2>Throughput</h2><p>Journal entries per hour (UTC), all queues: accepted, delivered and "
           "expired, each its own series.</p>"]
    if order:
        labels = [format_time(h, precision="minutes") for h in order]
        none = {"accepted": 0.0, "delivered": 0.0, "expired": 0.0}
        series = {k: [hours.get(h, none)[k] for h in order] for k in none}
        title, unit, axis = "journal entries per hour", "entries / hour", "hour (UTC)"
        marks = time_marks(order, labels[0])
        if len(order) <= _BAR_HOURS:
            out.append(_box(bar_chart(labels, series, title=title, unit=unit, marks=marks, x_title=axis)))
        else:
            out.append(_box(line_chart(labels, dict(series), title=title, unit=unit, marks=marks,
                                       x_title=axis)))
        out.append(_partial(result, "throughput_hourly"))
    out.append(html_table(result, "throughput_hourly", ("hour_ms", "queue", "accepted", "delivered",
                                                        "expired_entries", "accepted_bytes"),
                          ("hour (UTC)", "queue", "accepted", "delivered", "expired", "accepted bytes")))
    return "".join(out)


def _reports(result: PipelineResult) -> str:
    rows = [{"report": name, "rows": result.counts.get(name, 0), "seconds": result.seconds.get(name),
             "what": what} for name, what in REPORTS.items()]
    return ("<h2>Reports written</h2><p class=\"note\">Each a Parquet directory under the output; "
            "columns and meaning in docs/pipeline.md.</p>"
            + html_table(result, "", ("report", "rows", "seconds", "what"),
                         ("report", "rows", "step (s)", "what"), rows=rows, limit=len(rows)))


def html_page(result: PipelineResult, *, generated: datetime | None = None) -> str:
    """The report page: headline figures, the audit, then latency, devices, expiries and throughput."""
    when = (generated or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%MZ")
    meta = (f"{_E(result.journal)} → {_E(result.out)} · generated {when} · {result.total_seconds:.1f} s · "
            f"reports schema v{result.schema_version}")
    return (f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" """
            f"""content="width=device-width,initial-scale=1">
<title>edgeq journal report</title>
<style>{_CSS}</style></head><body>
<h1>edgeq journal report</h1>
<p class="meta">{meta}</p>
{_tiles(result)}
{_audit(result)}
{_latency(result)}
{_devices(result)}
{_expiries(result)}
{_throughput(result)}
{_reports(result)}
</body></html>
""")


def write_html(result: PipelineResult, path: Path) -> Path:
    """Write the report page to ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(html_page(result), "utf-8")
    return path

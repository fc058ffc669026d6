"""Rendering one run's results: the comparison table, the targets, the durability check."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from benchmarks.labels import case_title, lib_label
from benchmarks.results import Result
from benchmarks.targets import Target

__all__ = ["Headline", "advantage", "render"]


@dataclass(frozen=True)
class Headline:
    """The figure a case is compared on."""

    metric: str
    unit: str
    higher_is_better: bool
    detail: Callable[[dict[str, float]], str]


def _cpu(m: dict[str, float]) -> str:
    """The process's CPU per operation, where the row measured it."""
    return f"; cpu/op {m['cpu_us_per_op']:,.0f} µs" if "cpu_us_per_op" in m else ""


def _lat(m: dict[str, float]) -> str:
    text = f"p50 {m.get('p50_us', 0):,.0f} µs, p99 {m.get('p99_us', 0):,.0f} µs, n={m.get('ops', 0):,.0f}"
    return text + (" (time budget hit)" if m.get("budget_hit") else "") + _cpu(m)


def _threads(m: dict[str, float]) -> str:
    """A thread-scaling row: its ratio to the library's own 1-thread rate first."""
    text = f"**{m['vs_1_thread']:.2f}x its 1-thread rate**; " if "vs_1_thread" in m else ""
    text += _lat(m) + f"; fsync p50 {m.get('fsync_p50_us', 0):,.0f} µs"
    if m.get("flushes"):
        text += f"; {m.get('commits_per_flush', 0):.1f} durable commits per WAL flush"
    if m.get("duplicates"):
        text += f"; **{m['duplicates']:.0f} taken twice**"
    return text


def _coroutines(m: dict[str, float]) -> str:
    """An asyncio row: its ratio to the 1-coroutine rate first, then the pool and the flushes."""
    text = f"**{m['vs_1_coroutine']:.2f}x the 1-coroutine rate**; " if "vs_1_coroutine" in m else ""
    text += _lat(m) + (f"; {m.get('workers', 0):.0f} worker thread(s); "
                       f"fsync p50 {m.get('fsync_p50_us', 0):,.0f} µs")
    if m.get("flushes"):
        text += f"; {m.get('commits_per_flush', 0):.1f} durable commits per WAL flush"
    return text


def _rule_cost(m: dict[str, float]) -> str:
    """A rule-cost row: its ratio to the same puts without the rule first."""
    text = ""
    if "vs_no_rule" in m:
        text = f"**{m['vs_no_rule']:.2f}x without the rule** (median of the rounds' ratios); "
    detail = _lat(m) if m.get("size") == 1 else f"median of {m.get('batches', 0):.0f} batches"
    return text + detail + f"; fsync p50 {m.get('fsync_p50_us', 0):,.0f} µs"


def _wakeup(m: dict[str, float]) -> str:
    """A wake-up row: put returned → get returned, median first (the headline)."""
    text = (
        f"p50 {m.get('p50_ms', 0):.2f} ms, p90 {m.get('p90_ms', 0):.2f} ms, p99 {m.get('p99_ms', 0):.2f} ms, "
        f"max {m.get('max_ms', 0):.2f} ms, n={m.get('wakeups', 0):.0f}")
    return text + (f"; **{m['timeouts']:.0f} never woken**" if m.get("timeouts") else "")


def _sync(m: dict[str, float]) -> str:
    """The sync row's detail: exactly-once counts, then how each side was driven."""
    once = f"**{m.get('duplicates', 0):.0f} dup, {m.get('losses', 0):.0f} lost**"
    if "delivered_msgs_per_s" in m:  # MQTT
        return (
            f"{once} at the subscriber; first publish → last PUBCOMP, {m.get('inflight', 0):.0f} in flight; "
            f"to last delivery {m.get('delivered_msgs_per_s', 0):,.0f} msg/s; "
            + ("broker snapshot (fsync) after every change, taken after the ack"
               if m.get("autosave_every_change") else
               "broker snapshot every 30 min: acked messages are in memory only until then"))
    return (f"{once} on the server, {m.get('device_left', 0):.0f} left on the device; push_once, "
            f"{m.get('batches', 0):.0f} batches of {m.get('batch_size', 0):.0f}; server --durability full")


def _secure(m: dict[str, float]) -> str:
    """A signed/TLS sync row: exactly once, then where the CPU went."""
    return (f"**{m.get('duplicates', 0):.0f} dup, {m.get('losses', 0):.0f} lost**; push_once, "
            f"{m.get('batches', 0):.0f} batches of {m.get('batch_size', 0):.0f}; CPU: agent "
            f"{m.get('client_cpu_s', 0):.2f} s, server {m.get('server_cpu_s', 0):.2f} s")


def _wire(m: dict[str, float]) -> str:
    """A bytes-on-the-wire row: up and down per message, against MQTT QoS 2."""
    text = f"{m.get('up_per_msg', 0):,.1f} up + {m.get('down_per_msg', 0):,.1f} down per message"
    if "vs_mqtt" in m:
        text += f"; **{m['vs_mqtt']:.2f}x MQTT QoS 2's bytes**"
    if m.get("requests"):
        text += (
            f"; {m['requests']:.0f} requests, {(m['bytes_up'] + m['bytes_down']) / m['requests']:,.0f} B each"
            f"; readings of {m.get('payload_bytes', 0):.0f} B")
    return text


def _fleet(m: dict[str, float]) -> str:
    """A fleet row: request latency, errors, exactly once by uid, CPU."""
    return (f"per request ({m.get('batch_size', 0):.0f} msgs) p50 {m.get('p50_ms', 0):,.1f} ms, "
            f"p99 {m.get('p99_ms', 0):,.1f} ms, n={m.get('requests', 0):,.0f}; "
            f"{m.get('errors', 0):.0f} errors; "
            f"**{m.get('lost', 0):.0f} lost, {m.get('duplicated', 0):.0f} duplicated** (by uid); CPU: server "
            f"{m.get('server_cpu_s', 0):.1f} s, devices {m.get('client_cpu_s', 0):.1f} s")


def _bridge_out(m: dict[str, float]) -> str:
    """A bridge_out row: the ratio to the broker's own client, peak RSS (the bridges'), CPU."""
    text = f"**{m['vs_client']:.2f}x the client**; " if "vs_client" in m else ""
    if "peak_rss_small_mb" in m:
        text += f"peak RSS {m['peak_rss_mb']:.1f} MB (smaller backlog: {m['peak_rss_small_mb']:.1f} MB); "
    elif "peak_rss_mb" in m:
        text += f"peak RSS {m['peak_rss_mb']:.1f} MB; "
    return text + f"CPU {m.get('client_cpu_s', 0):.1f} s"


#: Per case: the metric (see ``benchmarks.results.HEADLINE_METRIC``), its unit, how to detail a row.
HEADLINES: dict[str, Headline] = {
    "import": Headline("import_ms", "ms", False,
                       lambda m: f"-X importtime; wall {m.get('wall_delta_ms', 0):+.0f} ms over bare python"
                       f" (±{m.get('wall_noise_ms', 0):.0f} ms)"),
    "cli_start": Headline("median_ms", "ms", False, lambda m: (
        f"whole process, median of {m.get('runs', 0):.0f} (min {m.get('min_ms', 0):.0f}, "
        f"max {m.get('max_ms', 0):.0f}); bare python {m.get('bare_interpreter_ms', 0):.0f} ms")),
    "put_single": Headline("ops_per_s", "msg/s", True, _lat),
    "put_batch": Headline("msgs_per_s", "msg/s", True,
                          lambda m: f"median of {m.get('batches', 0):.0f} batches" + _cpu(m)),
    "get_confirm": Headline("ops_per_s", "ops/s", True, _lat),
    "put_threads": Headline("ops_per_s", "msg/s", True, _threads),
    "put_threads_slowsync": Headline("ops_per_s", "msg/s", True, _threads),
    "aio_puts": Headline("ops_per_s", "msg/s", True, _coroutines),
    "rule_cost": Headline("msgs_per_s", "msg/s", True, _rule_cost),
    "get_confirm_threads": Headline("ops_per_s", "ops/s", True, _threads),
    "drain": Headline("msgs_per_s", "msg/s", True,
                      lambda m: (f"**{m.get('duplicates', 0):.0f} dup, {m.get('losses', 0):.0f} lost**, "
                                 f"{m.get('left_on_queue', 0):.0f} left, {m.get('errors', 0):.0f} errors")),
    "depth": Headline("median_ms", "ms", False,
                      lambda m: f"first call {m.get('first_ms', 0):.2f} ms; open {m.get('open_s', 0):.2f} s"),
    "expiry": Headline("seconds", "s", False, lambda m: f"{m.get('discarded', 0):,.0f} discarded"),
    "check": Headline("msgs_per_s", "msg/s", True, lambda m: (
        f"{m.get('seconds', 0):.2f} s"
        + (f"; PRAGMA integrity_check alone {m['sqlite_check_s']:.2f} s; `edgeq check` command "
           f"{m['cli_s']:.2f} s"
           if "cli_s" in m else ""))),
    "memory": Headline("peak_rss_mb", "MB", False,
                       lambda m: f"{m.get('baseline_rss_mb', 0):.1f} MB before opening the queue"),
    "sync": Headline("msgs_per_s", "msg/s", True, _sync),
    "sync_secure": Headline("msgs_per_s", "msg/s", True, _secure),
    "wire_bytes": Headline("bytes_per_msg", "B/msg", False, _wire),
    "fleet": Headline("msgs_per_s", "msg/s", True, _fleet),
    "wakeup_same": Headline("p50_ms", "ms", False, lambda m: _wakeup(m)),
    "wakeup_other": Headline("p50_ms", "ms", False, lambda m: _wakeup(m)),
    "bridge_out": Headline("msgs_per_s", "msg/s", True, _bridge_out),
    "bridge_in": Headline("msgs_per_s", "msg/s", True, lambda m: (
        f"{m.get('seconds', 0):.2f} s"
        + (f"; peak RSS {m['peak_rss_mb']:.1f} MB" if "peak_rss_mb" in m else "")
        + (f"; {m['vs_consume']:.2f}x the client consuming, {m['vs_publish']:.2f}x publishing"
           if "vs_consume" in m and "vs_publish" in m else ""))),
    "idle_wait": Headline("cpu_percent", "% of a core", False,
                          lambda m: f"{m.get('cpu_ms', 0):.0f} ms CPU (user {m.get('user_ms', 0):.0f}, "
                                    f"sys {m.get('sys_ms', 0):.0f}) in {m.get('wall_s', 0):.1f} s"),
}


def _fmt(value: float, unit: str) -> str:
    if unit in ("msg/s", "ops/s"):
        return f"{value:,.0f} {unit}"
    if value < 1:
        return f"{value:.3f} {unit}"
    return f"{value:,.1f} {unit}" if value < 100 else f"{value:,.0f} {unit}"


def advantage(edgeq: float, peer: float, higher_is_better: bool) -> float | None:
    """How many times better edgeq is than a peer (> 1: edgeq better).

    >>> advantage(200.0, 100.0, True), advantage(1.0, 4.0, False)
    (2.0, 4.0)
    """
    if edgeq <= 0 or peer <= 0:
        return None
    return edgeq / peer if higher_is_better else peer / edgeq


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(c.replace("|", "/") for c in cells) + " |"


def _results_table(results: list[Result]) -> list[str]:
    lines = [_row(["case", "library", "result", "edgeq advantage", "detail"]),
             _row(["---", "---", "---:", "---:", "---"])]
    groups: dict[tuple[str, int | None], list[Result]] = {}
    for r in results:
        groups.setdefault((r.case, r.size), []).append(r)
    small_memory: dict[str, float] = {}
    for (case, size), rows in groups.items():
        head = HEADLINES.get(case)
        base = next((r for r in rows if r.lib == "edgeq" and r.status == "ok"), None)
        extra = next((r.metrics for r in rows if r.status == "ok"), {})
        title = case_title(case, size, extra)
        for i, r in enumerate(rows):
            label = lib_label(r.lib, case)
            first = title if i == 0 else ""
            if r.status != "ok" or head is None:
                note = r.note.strip().splitlines()[-1] if r.note.strip() else ""
                lines.append(_row([first, label, r.status, "", note[:200]]))
                continue
            value = r.metrics.get(head.metric, 0.0)
            if r.lib == "edgeq":
                ratio = "—"
            elif r.lib.startswith("edgeq-"):  # a variant of edgeq (compressed, signed...): no peer
                ratio = ""
            elif base is not None:
                adv = advantage(base.metrics.get(head.metric, 0.0), value, head.higher_is_better)
                ratio = f"{adv:.2f}x" if adv is not None else ""
            else:
                ratio = ""
            detail = head.detail(r.metrics)
            if len(r.info.get("rounds", [])) > 1:
                spread = ", ".join(_fmt(v, head.unit).split()[0] for v in r.info["rounds"])
                detail += f"; rounds: {spread}"
            if case == "memory":
                if r.lib not in small_memory:
                    small_memory[r.lib] = value
                else:
                    detail += f"; {value - small_memory[r.lib]:+.1f} MB vs the smaller queue"
            if r.note:
                detail += f"; {r.note}"
            lines.append(_row([first, label, _fmt(value, head.unit), ratio, detail]))
    return lines


def _targets_table(targets: list[Target]) -> list[str]:
    """The judged targets, how many were met, then the names of those this run could not judge."""
    judged = [t for t in targets if t.status != "n/a"]
    lines = [_row(["target", "goal", "measured", "verdict"]), _row(["---", "---", "---", "---"])]
    lines += [_row([t.name, t.goal, t.measured, f"**{t.status}**"]) for t in judged]
    lines += ["", f"{sum(t.status == 'met' for t in judged)} of {len(judged)} met."]
    unjudged = [t.name for t in targets if t.status == "n/a"]
    if unjudged:
        lines.append(f"Not judged (a figure they need was not measured in this run): {'; '.join(unjudged)}.")
    return lines


def _durability_table(results: list[Result]) -> list[str]:
    seen: dict[str, tuple[str, str, str]] = {}
    for r in results:
        pragmas = r.info.get("pragmas")
        if pragmas and r.lib not in seen:
            seen[r.lib] = (r.info.get("version", ""), pragmas.get("journal_mode", ""),
                           pragmas.get("synchronous", ""))
    lines = [_row(["library", "version", "journal_mode", "synchronous"]), _row(["---", "---", "---", "---"])]
    for lib, (version, journal, sync) in seen.items():
        lines.append(_row([lib_label(lib, ""), version, journal, sync]))
    return lines


def _probe(p: dict[str, float] | None) -> str:
    if not p:
        return "not measured"
    return f"p50 {p['p50_us']:,.0f} µs, p90 {p['p90_us']:,.0f} µs, p99 {p['p99_us']:,.0f} µs"


def render(results: list[Result], targets: list[Target], meta: dict[str, Any]) -> str:
    """The whole report as Markdown (readable as plain text too)."""
    lines = [
        f"edgeq benchmarks — {meta.get('mode', '')} run, {meta.get('started', '')}",
        f"machine: {meta.get('machine', '')}",
        f"fsync of a 4 KiB append, before / after the run: {_probe(meta.get('fsync_before'))} / "
        f"{_probe(meta.get('fsync_after'))}",
        "",
        "Results (one fresh process per row, but the two rows of a bound rule's cost share one, alternating; "
        "edgeq advantage > 1 means edgeq is better by that factor):",
        "",
        *_results_table(results),
        "",
        "Targets:",
        "",
        *_targets_table(targets),
        "",
        "Durability each library ran at (read back from its own connections):",
        "",
        *_durability_table(results),
    ]
    return "\n".join(lines) + "\n"


"""The headline figures and the audit's verdict, for the printed summary and the page alike: read
from ``PipelineResult.totals`` only, never from the collected rows (cut after ``COLLECT_LIMIT``)."""

from __future__ import annotations

from edgeq.sync.pipeline.report.cells import format_ms
from edgeq.sync.pipeline.report.results import PipelineResult

__all__ = ["count", "headline", "verdict"]


def count(totals: dict[str, int | float], key: str) -> str:
    """A count from ``totals`` for people (``-``: not computed).

    >>> count({"accepted": 63211}, "accepted"), count({}, "gaps")
    ('63,211', '-')
    """
    value = totals.get(key)
    return "-" if value is None else f"{int(value):,}"


def headline(result: PipelineResult) -> list[tuple[str, str, str]]:
    """The headline figures as (label, value, detail), all from ``result.totals``."""
    t = result.totals
    return [
        ("journal entries", count(t, "journal_rows"), ""),
        ("messages accepted", count(t, "accepted"), f"{count(t, 'accepted_entries')} acceptances"),
        ("messages delivered", count(t, "delivered"), ""),
        ("messages expired", count(t, "expired"),
         f"server only {count(t, 'expired_server_only')}, device only {count(t, 'expired_device_only')}, "
         f"both sides {count(t, 'expired_both')}"),
        ("delivered, then the device copy expired", count(t, "delivered_then_device_expired"),
         "a lost confirm reply: neither lost nor expired"),
        ("accepted, then the device copy expired", count(t, "accepted_then_device_expired"),
         "not delivered yet; neither lost nor expired"),
        ("latency p50 / p99 (creation to server confirm)",
         f"{format_ms(t.get('latency_p50_ms'))} / {format_ms(t.get('latency_p99_ms'))}",
         f"{count(t, 'uncorrected')} acceptance(s) without a clock offset (uncorrected)"),
        ("end-to-end p50 / p99 (creation to delivery)",
         f"{format_ms(t.get('e2e_p50_ms'))} / {format_ms(t.get('e2e_p99_ms'))}", ""),
        ("devices", count(t, "device_names"), f"{count(t, 'devices')} device stores audited"),
    ]


def verdict(result: PipelineResult) -> tuple[bool | None, str]:
    """Whether the exactly-once audit passed (None: no audit figures), and a sentence saying so.

    >>> verdict(PipelineResult("j", "o", totals={"duplicates": 0, "gaps": 0}))
    (True, 'OK: no uid accepted twice, no gap')
    >>> verdict(PipelineResult("j", "o", totals={"duplicates": 0, "gaps": 0, "dead_lettered": 2}))[1][:44]
    'ATTENTION: 2 message(s) wait in their device'
    """
    t = result.totals
    if "duplicates" not in t or "gaps" not in t:
        return None, "The audit's figures are not in this result: run the pipeline again to compute them."
    dups, gaps, unjudged = int(t["duplicates"]), int(t["gaps"]), int(t.get("unauditable", 0))
    tail = f"; {unjudged:,} uid(s) could not be judged (see the audit scope)" if unjudged else ""
    dead = int(t.get("dead_lettered", 0))
    if not dups and not gaps and dead:
        return False, (f"ATTENTION: {dead:,} message(s) wait in their device's dead-letter queue (the "
                       "server refused them): see audit_devices.dead_lettered, then edgeq dlq browse on the "
                       f"device; no uid accepted twice, no gap{tail}")
    if not dups and not gaps:
        return True, f"OK: no uid accepted twice, no gap{tail}"
    waiting = f"; {dead:,} message(s) wait in their device's dead-letter queue" if dead else ""
    return False, (f"ATTENTION: {dups:,} uid(s) accepted more than once, {gaps:,} gap(s): "
                   f"see audit_duplicates and audit_gaps{waiting}{tail}")

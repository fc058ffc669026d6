"""``edgeq check``: look for damage in a store, and repair it with ``--repair``."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path

import click

from edgeq.check.checker import NotAStore, StoreCheck, preflight
from edgeq.check.records import sqlite_said
from edgeq.check.report import CheckReport
from edgeq.cli.base import emit_json
from edgeq.cli.options import db_option, group_options, output_options, wants_json
from edgeq.clock import system_clock
from edgeq.errors import EdgeqError
from edgeq.manager import QueueManager
from edgeq.store.connection import ConnectionFactory

__all__ = ["check"]

#: Lines printed per finding or repair section (``--json`` lists everything).
_SHOWN = 20


@click.command("check")
@db_option("The store to check (default: the group's --db).")
@click.option("--repair", is_flag=True,
              help="Quarantine damaged rows (rules see them removed), rebuild indexes, recount queues; "
                   "then check again.")
@output_options
@click.pass_context
def check(ctx: click.Context, db: Path | None, repair: bool, as_json: bool) -> None:
    """Check a store for damage (integrity, checksums, counters, rules, journal, identity); --repair fixes it.

    \b
    Examples:
      edgeq check --db device.db
      edgeq check --db device.db --repair

    Exit status: 0 the store is sound; 1 damage was found (even if --repair repaired it all),
    or the file is unreadable; 2 not an edgeq store (nothing touched), or a usage mistake.
    """
    path = db or group_options(ctx).db
    if path is None:
        raise click.UsageError("no store given: pass --db PATH (or set EDGEQ_DB)")
    try:
        report, after = _run(path, repair)
    except NotAStore as exc:
        click.echo(f"Error: {exc}", err=True)
        ctx.exit(2)
    if wants_json(ctx, as_json):
        emit_json({**report.to_json(), "after": None if after is None else after.to_json()})
    else:
        _print(report, after, repair)
    ctx.exit(0 if report.clean else 1)


def _run(path: Path, repair: bool) -> tuple[CheckReport, CheckReport | None]:
    early = preflight(path)
    if early is not None:
        return early, None
    try:
        db = ConnectionFactory(path)
        try:
            first = StoreCheck(db).unblock(system_clock()) if repair else StoreCheck(db).run()
        finally:
            db.close()
    except NotAStore:
        raise
    except EdgeqError as exc:  # SQLite gave up on the file
        return CheckReport(str(path),
                           unreadable=(f"SQLite cannot read the store ({sqlite_said(exc)})",)), None
    if not repair:
        return first, None
    # The rest needs the queue manager: its rules must see the quarantined messages.
    try:
        qm = QueueManager(path)
    except EdgeqError as exc:
        return first.joined(CheckReport(str(path),
                                        unreadable=(f"it cannot be opened to repair it ({exc})",))), None
    with qm:
        report = first.joined(qm.check(repair=True))
        return report, (qm.check() if not report.clean else None)


def _print(report: CheckReport, after: CheckReport | None, repair: bool) -> None:
    echo = click.echo
    echo(f"edgeq check {report.path}: {report.checked:,} message(s) checked in {report.seconds:.2f} s.")
    for line in report.unreadable:
        echo(f"  unreadable: {line}")
    if report.unreadable and not (report.checked or report.sqlite or report.records or report.identity):
        echo("The store cannot be read: restore it from a backup "
             "(SQLite's `.recover` may save what is readable).")
        return
    # With part of the store unreadable, finding nothing in the rest is not "ok".
    fine = "nothing found in what could be read" if report.unreadable else "ok"
    _section = functools.partial(_found, fine)
    _section("SQLite integrity check", report.sqlite)
    _section("messages", [
        f"{m.queue or '(no queue)'}  {m.uid}  {m.what}"
        + {"rerank": " (repair re-ranks it)", "leave": " (repair leaves it)"}.get(m.fix, "")
        for m in report.messages
    ])
    _section("queue counters", [
        f"{c.queue}: depth {c.depth} but {c.rows} rows, bytes {c.bytes} but {c.row_bytes} held"
        for c in report.counters
    ])
    _section("queues, rule bindings, rule events, journal", [
        f"{r.table} row {r.id}{f' (queue {r.queue})' if r.queue else ''}: {r.what}" for r in report.records
    ])
    _section("identity", report.identity)
    if report.clean:
        echo("The store is sound.")
        return
    if report.repairs is None:
        if repair:
            echo("Nothing could be repaired: restore the store from a backup.")
        else:
            echo(f"Damage found: `edgeq check --db {report.path} --repair` moves damaged rows to the "
                 "quarantine, rebuilds indexes and recounts queues.")
        return
    r = report.repairs
    echo("Repaired:")
    for label, lines in (("quarantined", r.quarantined), ("re-ranked", r.reranked),
                         ("recounted", r.recounted), ("identity", r.identity)):
        _lines([f"{label} {line}" for line in lines])
    if r.rebuilt:
        echo(f"  rebuilt indexes {', '.join(r.rebuilt)}")
    if not r.done:
        echo("  nothing")
    if r.left:
        echo("Left as it is:")
        _lines(r.left)
    if after is not None:
        echo("Checked again: sound." if after.clean else
             "Checked again: still damaged (`edgeq check --json` lists what).")


def _found(fine: str, title: str, lines: Sequence[str]) -> None:
    if not lines:
        click.echo(f"  {title}: {fine}")
        return
    click.echo(f"  {title}: {len(lines)} problem(s)")
    _lines(lines, indent="    ")


def _lines(lines: Sequence[str], indent: str = "  ") -> None:
    for line in lines[:_SHOWN]:
        click.echo(f"{indent}{line}")
    if len(lines) > _SHOWN:
        click.echo(f"{indent}... and {len(lines) - _SHOWN} more (--json lists them all)")

"""``edgeq export`` and ``edgeq pipeline run``: the home server's journal, as Parquet and as reports."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from edgeq.cli.base import EdgeqGroup
from edgeq.cli.format import format_duration
from edgeq.cli.options import db_option, store_path
from edgeq.cli.params import DURATION

if TYPE_CHECKING:
    from edgeq.sync.pipeline.export.exporter import Since

__all__ = ["PRUNE_FLOOR_MS", "export", "pipeline"]

#: The shortest ``--prune-after`` taken without ``--yes``: anything shorter removes what the
#: operator is likely still looking at (the console's history reads the live journal).
PRUNE_FLOOR_MS = 3_600_000


def _since(ctx: click.Context, param: click.Parameter, value: str | None) -> Since:
    from edgeq.sync.pipeline.errors import MalformedJournal
    from edgeq.sync.pipeline.export.exporter import parse_since

    try:
        return parse_since(value)
    except MalformedJournal as exc:
        raise click.BadParameter(str(exc).removeprefix("--since "), ctx, param) from None


@click.command("export")
@db_option("The home server's store (default: the global --db, or EDGEQ_DB).")
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="The Parquet dataset directory (created if missing; appended to on every run).")
@click.option("--since", metavar="ID|DATETIME", callback=_since,
              help="Start at this journal id, or at this date/time (ISO 8601, UTC unless a zone is given). "
                   "Never re-exports what the directory holds already.")
@click.option("--batch", "batch_rows", type=click.IntRange(min=1), default=100_000, show_default=True,
              help="Journal entries read per batch (one part file per date per batch).")
@click.option("--prune-after", type=DURATION, metavar="DURATION",
              help="Then remove from the store the exported journal entries older than this (30d, 12h...); "
                   "never an entry not exported yet. The console's history reads the live journal, so it "
                   "no longer shows what is pruned; under 1h needs --yes.")
@click.option("--yes", is_flag=True, help="Prune with a --prune-after under 1h (0: every exported entry).")
@click.option("--quiet", is_flag=True, help="Print only the one-line result.")
@click.pass_context
def export(ctx: click.Context, db: Path | None, out: Path, since: Since, batch_rows: int,
           prune_after: int | None, yes: bool, quiet: bool) -> None:
    """Export a home server's journal as Parquet, partitioned by date, incrementally (store opened read-only).

    \b
    Example:
      edgeq export --db home.db --out journal/ --prune-after 30d
    """
    from edgeq.sync.pipeline.export.exporter import export_journal
    from edgeq.sync.pipeline.export.prune import prune_journal

    if prune_after is not None and prune_after < PRUNE_FLOOR_MS and not yes:
        raise click.BadParameter(
            f"{format_duration(prune_after)} would remove journal entries exported in the last hour too (0: "
            "every one); the console's history reads the live journal and would no longer show them. Give "
            "1h or more (e.g. 30d), or --yes if that is meant", ctx, param_hint="'--prune-after'")
    store = store_path(ctx, db)
    say = None if quiet else (lambda text: click.echo(text, err=True))
    result = export_journal(store, out, since=since, batch_rows=batch_rows, progress=say)
    if result.rows == 0 and result.skipped == 0:
        click.echo(f"Nothing new: {out} is up to date (journal id {result.watermark}).")
    else:
        skipped = f", {result.skipped:,} skipped by --since" if result.skipped else ""
        click.echo(f"Exported {result.rows:,} journal entries{skipped} into {len(result.files):,} file(s) "
                   f"under {out} (up to journal id {result.watermark}).")
    if prune_after is not None:
        click.echo(prune_journal(store, out, older_than_ms=prune_after, progress=say).describe(store))


@click.group(cls=EdgeqGroup)
def pipeline() -> None:
    """Analytics over an exported journal, on Apache Spark (needs Java 17+).

    \b
    Example:
      edgeq pipeline run --journal journal/ --out reports/
    """


@pipeline.command("run")
@click.option("--journal", "journals", required=True, multiple=True,
              help="The directory edgeq export wrote (or an hdfs://, s3a:// URI). Repeat it to read several "
                   "servers' journals as one fleet (one directory per server).")
@click.option("--out", required=True,
              help="Where to write the reports: one Parquet directory each (replaced).")
@click.option("--master", default="local[*]", show_default=True,
              help="Spark master: local[N], spark://host:7077, yarn, k8s://...")
@click.option("--html", is_flag=True, help="Also write OUT/report.html, a page with charts.")
@click.option("--conf", "confs", multiple=True, metavar="KEY=VALUE",
              help="A Spark setting, e.g. --conf spark.driver.memory=8g (repeatable).")
@click.option("--full", is_flag=True,
              help="Read every part file again and rebuild OUT/_state/ "
                   "(default: only those exported since the last run).")
@click.option("--quiet", is_flag=True, help="Print no progress, only the summary.")
def pipeline_run(journals: tuple[str, ...], out: str, master: str, html: bool, confs: tuple[str, ...],
                 full: bool, quiet: bool) -> None:
    """Compute the reports of docs/pipeline.md from exported journals (one --journal per home server).

    \b
    Examples:
      edgeq pipeline run --journal journal/ --out reports/ --html
      edgeq pipeline run --journal journals/HOMEA --journal journals/HOMEB --out reports/
    """
    from edgeq.sync.pipeline.job.inputs import JournalConflict, check_arguments, check_servers
    from edgeq.sync.pipeline.job.runner import check_journal, rows_to_read, run_pipeline, spark_session
    from edgeq.sync.pipeline.report.summary import summary_text, write_html

    conf: dict[str, str] = {}
    for item in confs:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="'--conf'")
        conf[key.strip()] = value.strip()
    if master.startswith("local"):
        conf.setdefault("spark.driver.memory", "4g")
    if html and "://" in out and not out.startswith("file://"):
        raise click.ClickException(f"--html writes a local file, and --out {out} is not local")
    try:  # arguments that cannot go together are a usage error (exit 2)
        check_arguments(journals, out)
        # A missing or malformed journal fails now, before Spark starts.
        found = [check_journal(journal) for journal in journals]
        check_servers(found)
    except JournalConflict as exc:
        raise click.BadParameter(str(exc), param_hint="'--journal'") from None
    say = None if quiet else (lambda text: click.echo(text, err=True))
    if say:
        say(f"starting Spark ({master})")
    owned = not _spark_running()
    spark = spark_session(master, conf=conf, journal_rows=rows_to_read(found, out, full=full))
    try:
        result = run_pipeline(spark, list(journals), out, full=full, progress=say)
    finally:
        if owned:
            spark.stop()
    click.echo(summary_text(result))
    if html:
        page = write_html(result, Path(out.removeprefix("file://")) / "report.html")
        click.echo(f"Report page: {page}")


def _spark_running() -> bool:
    from pyspark.sql import SparkSession

    return SparkSession.getActiveSession() is not None

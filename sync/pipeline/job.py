"""The Spark job: delivery latency, expiry reconciliation, an exactly-once audit, throughput
and device health, from a journal exported by ``edgeq export``.

Every report is computed with the DataFrame API (no Python UDFs, no DataFrame made
from Python data: executors run no Python) and written as Parquet under ``--out``;
their definitions are in ``docs/pipeline.md``. A run keeps its state in
``OUT/_state/`` (:mod:`edgeq.sync.pipeline.state`), so the next run over the same
export reads only the part files exported since (``--full`` rebuilds from every part).
Run it as::

    edgeq pipeline run --journal journal/ --out reports/ [--master local[*]] [--html] [--full]
    python -m edgeq.sync.pipeline.job --journal journal/ --out reports/
    spark-submit --py-files build/edgeq-pipeline.zip build/edgeq-pipeline-job.py --journal ... --out ...

This module and the ones it imports load with nothing but pyspark and the standard
library (see :mod:`edgeq.sync.pipeline.bundle`).
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgeq.sync.pipeline.errors import MalformedJournal, PipelineError
from edgeq.sync.pipeline.files import Files, files_for, is_local, join, local_path
from edgeq.sync.pipeline.finals import finals, totals
from edgeq.sync.pipeline.inputs import Journal, check_journal, check_part_files, find_journal, read_parts
from edgeq.sync.pipeline.results import (
    COLLECT_LIMIT,
    COLUMNS,
    LATENCY_BUCKETS_MS,
    ORDER_BY,
    REPORTS,
    SCHEMA_VERSION,
    PipelineResult,
)
from edgeq.sync.pipeline.session import job_settings, spark_errors, spark_session
from edgeq.sync.pipeline.state import Plan, State, StateWriter, load_state, part_entries, plan_run
from edgeq.sync.pipeline.update import Restart, apply_rows

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "BUCKET_MS",
    "COLUMNS",
    "LATENCY_BUCKETS_MS",
    "ORDER_BY",
    "REPORTS",
    "PipelineResult",
    "check_journal",
    "main",
    "read_journal",
    "run_pipeline",
    "spark_session",
]

Progress = Callable[[str], None]

#: The width of the uid status's buckets (by the uid's creation time): a day.
BUCKET_MS = 86_400_000
REPORTS_META = "_edgeq_reports.json"


def read_journal(spark: SparkSession, path: str) -> DataFrame:
    """Every committed part of the export at ``path`` as one DataFrame (the journal's columns,
    and ``stamp``: the uid's stamp as a long)."""
    from edgeq.sync.pipeline.uids import stamp_of

    journal = check_journal(path, files_for(path, spark))
    return read_parts(spark, path, journal.parts).withColumn("stamp", stamp_of())


def _check_paths(journal: str, out: str) -> None:
    if is_local(journal) and is_local(out):
        j_path, o_path = local_path(journal).resolve(), local_path(out).resolve()
        if o_path == j_path or j_path in o_path.parents:
            raise MalformedJournal(f"--out {out} is inside --journal {journal}: write the reports elsewhere")


def _plan(journal: Journal, ofiles: Files, out: str, full: bool, bucket_ms: int) -> Plan:
    previous, why = (None, "--full asks for a rebuild") if full else load_state(ofiles, out)
    return plan_run(journal.parts, journal.server, previous, why, bucket_ms)


def _scope(plan: Plan, state: State, new_rows: int, unauditable: int) -> dict[str, Any]:
    ids = [v for pair in state.parts.values() for v in pair[:2]]
    scope: dict[str, Any] = {
        "mode": "incremental" if plan.incremental else "full", "reason": plan.reason,
        "from_ms": state.from_ms, "from_id": min(ids, default=None), "to_id": max(ids, default=None),
        "parts": len(state.parts), "new_parts": len(plan.new), "new_rows": new_rows, "unauditable": unauditable,
        "runs": state.runs,
    }
    since = "" if state.from_ms is None else (
        " since " + datetime.fromtimestamp(state.from_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC"))
    what = (f"{'Incremental' if plan.incremental else 'Full'} run: {len(plan.new):,} new part file(s), "
            f"{new_rows:,} new entries; the reports cover {len(state.parts):,} part file(s)")
    if scope["from_id"] is not None:
        what += f" (journal ids {scope['from_id']:,} to {scope['to_id']:,})"
    audit = (f"The audit judged every device message in the data{since}." if not unauditable else
             f"{unauditable:,} device message(s) were seen without their acceptance but reached the server before "
             f"the data starts{since}: their acceptance may lie before it, so they are counted as unauditable, "
             "not as gaps.")
    scope["text"] = f"{what}. {audit}"
    return scope


def _update(
    spark: SparkSession, journal: Journal, ofiles: Files, out: str, plan: Plan, say: Progress,
) -> tuple[Plan, State, StateWriter | None, int]:
    """Merge the plan's new parts into the state; a merge that cannot be done restarts as a full run."""
    if plan.incremental and not plan.new:
        return plan, plan.state, None, 0
    no_nulls = check_part_files(journal.path, plan.new)
    if plan.incremental:
        previous, state = plan.state, copy.deepcopy(plan.state)
        say(f"incremental run: {plan.reason}")
    else:
        previous, state = State(bucket_ms=plan.state.bucket_ms), plan.state
        say(f"full run ({plan.reason}): reading {journal.rows_hint()}")
    writer = StateWriter(spark, ofiles, out, previous)
    rows = read_parts(spark, journal.path, plan.new)
    with spark_errors(f"reading {journal.path} and updating the state in {out}"):
        done = apply_rows(spark, writer, previous, state, rows, incremental=plan.incremental, say=say,
                          check_nulls=not no_nulls)
    if isinstance(done, Restart):
        say(f"rebuilding the state: {done.reason}")
        again = plan_run(journal.parts, journal.server, None, done.reason, plan.state.bucket_ms)
        return _update(spark, journal, ofiles, out, again, say)
    state.parts.update(part_entries(plan.new))
    state.runs += 1
    return plan, state, writer, done.rows


def run_pipeline(
    spark: SparkSession,
    journal: str | Path,
    out: str | Path,
    *,
    full: bool = False,
    progress: Progress | None = None,
    collect_limit: int = COLLECT_LIMIT,
    bucket_ms: int = BUCKET_MS,
) -> PipelineResult:
    """Compute every report of ``journal`` into ``out`` (one Parquet directory each, replaced).

    The state kept in ``out/_state/`` makes this incremental: only the part files exported
    since the last run are read, unless ``full`` (or the state does not fit the journal: then
    it is rebuilt, and ``audit_scope`` says why). ``collect_limit`` bounds the rows of each
    report kept in the result (the Parquet has them all; ``totals`` never depend on it).
    """
    say = progress or (lambda _text: None)
    journal, out = str(journal), str(out)
    _check_paths(journal, out)
    started = time.perf_counter()
    jfiles, ofiles = files_for(journal, spark), files_for(out, spark)
    with job_settings(spark):
        return _run(spark, journal, out, jfiles, ofiles, full, say, collect_limit, bucket_ms, started)


def _run(
    spark: SparkSession, journal: str, out: str, jfiles: Files, ofiles: Files, full: bool, say: Progress,
    collect_limit: int, bucket_ms: int, started: float,
) -> PipelineResult:
    result = PipelineResult(journal=journal, out=out)
    t0 = time.perf_counter()
    found = find_journal(journal, jfiles)
    plan = _plan(found, ofiles, out, full, bucket_ms)
    plan, state, writer, new_rows = _update(spark, found, ofiles, out, plan, say)
    result.seconds["update"] = time.perf_counter() - t0
    say(f"  state updated ({result.seconds['update']:.1f} s)")
    reports = finals(spark, state)
    for index, (name, frame) in enumerate(reports.items(), 1):
        t0 = time.perf_counter()
        say(f"[{index}/{len(reports)}] {name}: {REPORTS[name]}")
        target = join(out, name)
        with spark_errors(f"computing {name}"):
            result.counts[name], result.rows[name] = _write_report(frame, name, target, collect_limit)
        result.seconds[name] = time.perf_counter() - t0
        say(f"      {result.counts[name]:,} row(s) -> {target} ({result.seconds[name]:.1f} s)")
    t0 = time.perf_counter()
    with spark_errors("computing the totals"):
        result.totals = totals(spark, state)
    result.seconds["totals"] = time.perf_counter() - t0
    if writer is not None:
        writer.commit(state)
    result.journal_rows = int(result.totals.get("journal_rows", 0))
    result.audit_scope = _scope(plan, state, new_rows, int(result.totals.get("unauditable", 0)))
    result.total_seconds = time.perf_counter() - started
    meta = {
        "schema_version": SCHEMA_VERSION, "journal": journal, "journal_rows": result.journal_rows,
        "reports": result.counts, "totals": result.totals, "audit_scope": result.audit_scope,
        "seconds": {k: round(v, 3) for k, v in result.seconds.items()},
        "finished": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    ofiles.write_text(join(out, REPORTS_META), json.dumps(meta, indent=2, default=str) + "\n")
    return result


def _write_report(frame: DataFrame, name: str, target: str, limit: int) -> tuple[int, list[dict[str, Any]]]:
    """Write one report (ordered, one file) and return its row count and first ``limit`` rows.
    The rows are read back from the file on the driver when it can (a local file and pyarrow:
    no second Spark job); else the report is kept in memory between the write and a collect."""
    from pyspark import StorageLevel

    ordered = frame.select(*COLUMNS[name]).orderBy(*ORDER_BY[name]).coalesce(1)
    back = _read_back(target, limit)
    if back is not None:
        ordered.write.mode("overwrite").parquet(target)
        return back()
    ordered = ordered.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        ordered.write.mode("overwrite").parquet(target)
        rows = [r.asDict(recursive=True) for r in ordered.limit(limit).collect()] if limit > 0 else []
        count = len(rows) if len(rows) < limit else ordered.count()
        return count, rows
    finally:
        ordered.unpersist()


def _read_back(target: str, limit: int) -> Callable[[], tuple[int, list[dict[str, Any]]]] | None:
    """A reader of a local report's rows as pyspark gives them (timestamps as naive local
    datetimes), or None if the driver cannot read it itself."""
    if not is_local(target):
        return None
    try:
        import pyarrow.parquet as pq
    except ImportError:
        return None

    def read() -> tuple[int, list[dict[str, Any]]]:
        table = pq.read_table(local_path(target))
        rows = table.slice(0, max(limit, 0)).to_pylist()
        stamps = [f.name for f in table.schema if str(f.type).startswith("timestamp")]
        for row in rows:
            for column in stamps:
                if row[column] is not None:  # pyspark's own conversion: naive, local time
                    moment = row[column] if row[column].tzinfo else row[column].replace(tzinfo=UTC)
                    row[column] = datetime.fromtimestamp(moment.timestamp())
        return table.num_rows, rows

    return read


# -- spark-submit / python -m ------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """The ``job.py`` command line parser."""
    parser = argparse.ArgumentParser(
        prog="edgeq.sync.pipeline.job",
        description="edgeq's journal analytics on Spark: latency, expiry reconciliation, audit, throughput, "
                    "device health.",
    )
    parser.add_argument("--journal", required=True, help="the directory (or URI) edgeq export wrote")
    parser.add_argument("--out", required=True, help="where to write the reports (each a Parquet directory)")
    parser.add_argument("--master", default=None,
                        help="Spark master (default: spark-submit's, else local[*])")
    parser.add_argument("--full", action="store_true",
                        help="read every part file again instead of only those exported since the last run")
    parser.add_argument("--html", action="store_true", help="also write OUT/report.html (local --out only)")
    parser.add_argument("--quiet", action="store_true", help="print no progress, only the summary")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """``spark-submit job.py ...`` / ``python -m edgeq.sync.pipeline.job ...``: exit 0, or 1 with one line."""
    args = build_parser().parse_args(argv)

    def say(text: str) -> None:
        """Print a progress line on stderr, unless ``--quiet``."""
        if not args.quiet:
            print(text, file=sys.stderr, flush=True)

    try:
        if args.html and not is_local(args.out):
            raise PipelineError(f"--html writes a local file, and --out {args.out} is not local")
        check_journal(args.journal)
        say("starting Spark" + (f" ({args.master})" if args.master else ""))
        spark = spark_session(args.master)
        try:
            result = run_pipeline(spark, args.journal, args.out, full=args.full, progress=say)
        finally:
            spark.stop()
        _print_summary(result, args.html, say)
    except PipelineError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    return 0


def _print_summary(result: PipelineResult, html: bool, say: Progress) -> None:
    """The summary (and the page), if the report writer can be loaded: on a bare Spark driver
    it may not (it is edgeq's, not the job's), and then the totals are printed as JSON."""
    try:
        from edgeq.sync.pipeline.report import summary_text, write_html
    except ImportError as exc:
        say(f"(the summary needs edgeq installed: {exc}; the totals follow)")
        print(json.dumps({"totals": result.totals, "audit_scope": result.audit_scope}, indent=2, default=str))
        return
    print(summary_text(result))
    if html:
        page = write_html(result, local_path(result.out) / "report.html")
        say(f"wrote {page}")


if __name__ == "__main__":  # spark-submit sync/pipeline/job.py, python -m edgeq.sync.pipeline.job
    sys.exit(main())

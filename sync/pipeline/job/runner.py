"""The Spark job: latency, expiry reconciliation, exactly-once audit, throughput and device health,
from ``edgeq export``'s journals, incrementally. Needs only pyspark and the stdlib (docs/pipeline.md)."""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgeq.sync.pipeline.errors import PipelineError
from edgeq.sync.pipeline.job import fleet
from edgeq.sync.pipeline.job.files import Files, files_for, is_local, join, local_path
from edgeq.sync.pipeline.job.finals import write_reports
from edgeq.sync.pipeline.job.inputs import (
    Journal,
    JournalConflict,
    check_arguments,
    check_journal,
    check_part_files,
    check_servers,
    find_journal,
    journal_rows,
    read_contacts,
    read_parts,
)
from edgeq.sync.pipeline.job.session import job_settings, spark_errors, spark_session
from edgeq.sync.pipeline.job.state import (
    JournalRecord,
    Plan,
    State,
    StateWriter,
    load_state,
    part_entries,
    plan_run,
)
from edgeq.sync.pipeline.job.update import Restart, apply_rows
from edgeq.sync.pipeline.report.results import (
    COLLECT_LIMIT,
    COLUMNS,
    LATENCY_BUCKETS_MS,
    ORDER_BY,
    REPORTS,
    SCHEMA_VERSION,
    PipelineResult,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "COLUMNS",
    "LATENCY_BUCKETS_MS",
    "ORDER_BY",
    "REPORTS",
    "PipelineResult",
    "check_journal",
    "main",
    "read_journal",
    "rows_to_read",
    "run_pipeline",
    "spark_session",
]

Progress = Callable[[str], None]

REPORTS_META = "_edgeq_reports.json"


def read_journal(spark: SparkSession, path: str) -> DataFrame:
    """Every committed part of the export at ``path`` as one DataFrame, with ``stamp`` (a long)."""
    from edgeq.sync.pipeline.job.uids import stamp_of

    journal = check_journal(path, files_for(path, spark))
    return read_parts(spark, path, journal.parts).withColumn("stamp", stamp_of())


def _plan(journals: list[Journal], ofiles: Files, out: str, full: bool, bucket_ms: int | None) -> Plan:
    previous, why = (None, "--full asks for a rebuild") if full else load_state(ofiles, out)
    return plan_run(journals, previous, why, bucket_ms)


def rows_to_read(journals: list[Journal], out: str, *, full: bool = False) -> int:
    """About how many journal rows a run will read, from the part files' names, to choose the
    JVM before Spark starts: the new parts' if ``out`` is local and holds a state that fits, else all."""
    if full or not is_local(out):
        return journal_rows(journals)
    try:
        plan = _plan(journals, files_for(out, None), out, False, None)  # plan_run: order does not matter
    except OSError:  # unreadable: the run itself will say so
        return journal_rows(journals)
    if not plan.incremental:
        return journal_rows(journals)
    return journal_rows([replace(j, parts=plan.new[j.key]) for j in journals])


def _scope(journals: list[Journal], plan: Plan, state: State, new_rows: int,
           unauditable: int) -> dict[str, Any]:
    listed, covers, since = fleet.describe(journals, plan, state)
    single = listed[0] if len(listed) == 1 else {"from_id": None, "to_id": None}
    scope: dict[str, Any] = {
        "mode": "incremental" if plan.incremental else "full", "reason": plan.reason,
        "from_ms": state.from_ms, "from_id": single["from_id"], "to_id": single["to_id"],
        "parts": state.part_count, "new_parts": plan.new_parts, "new_rows": new_rows,
        "unauditable": unauditable,
        "runs": state.runs, "journals": listed,
    }
    what = (f"{'Incremental' if plan.incremental else 'Full'} run: {plan.new_parts:,} new part file(s), "
            f"{new_rows:,} new entries; the reports cover {state.part_count:,} part file(s){covers}")
    audit = (f"The audit judged every device message in the data{since}." if not unauditable else
             f"{unauditable:,} device message(s) were seen without their acceptance but reached the "
             f"server before the data starts{since}: their acceptance may lie before it, so they are "
             "counted as unauditable, not as gaps.")
    scope["text"] = f"{what}. {audit}"
    return scope


def _update(
    spark: SparkSession, journals: list[Journal], ofiles: Files, out: str, plan: Plan, say: Progress,
) -> tuple[Plan, State, StateWriter | None, int]:
    """Merge the plan's new parts into the state; a merge that cannot be done restarts as a full run."""
    if plan.incremental and not plan.new_parts:
        return plan, plan.state, None, 0
    checked = [check_part_files(j.path, plan.new[j.key]) for j in journals if plan.new[j.key]]
    if plan.incremental:
        previous, state = plan.state, copy.deepcopy(plan.state)
        say(f"incremental run: {plan.reason}")
    else:
        previous, state = State(bucket_ms=plan.state.bucket_ms), plan.state
        say(f"full run ({plan.reason}): reading " + "; ".join(
            (f"{j.label}: " if len(journals) > 1 else "") + j.rows_hint() for j in journals)
            + f"; state kept in buckets of {_hours(state.bucket_ms)} of uid creation time")
    writer = StateWriter(spark, ofiles, out, previous)
    with spark_errors(f"reading {', '.join(j.path for j in journals)} and updating the state in {out}"):
        rows = fleet.new_rows(spark, journals, plan, state)
        done = rows if isinstance(rows, str) else apply_rows(
            spark, writer, previous, state, rows, incremental=plan.incremental, say=say,
            check_nulls=not all(checked))
    if isinstance(done, (str, Restart)):
        reason = done if isinstance(done, str) else done.reason
        say(f"rebuilding the state: {reason}")
        return _update(spark, journals, ofiles, out, plan_run(journals, None, reason, plan.state.bucket_ms),
                       say)
    for journal in journals:
        record = state.journals.setdefault(journal.key, JournalRecord(journal.path))
        record.path = journal.path
        record.parts.update(part_entries(plan.new[journal.key]))
    state.runs += 1
    return plan, state, writer, done.rows


def _hours(ms: int) -> str:
    """A bucket width as it is said.

    >>> _hours(21_600_000), _hours(86_400_000), _hours(90_000)
    ('6 h', '24 h', '90 s')
    """
    return f"{ms // 3_600_000} h" if ms % 3_600_000 == 0 else f"{ms / 1000:g} s"


def _journal_list(journal: str | Path | Sequence[str | Path]) -> list[str]:
    return [str(journal)] if isinstance(journal, (str, Path)) else [str(j) for j in journal]


def run_pipeline(
    spark: SparkSession,
    journal: str | Path | Sequence[str | Path],
    out: str | Path,
    *,
    full: bool = False,
    progress: Progress | None = None,
    collect_limit: int = COLLECT_LIMIT,
    bucket_ms: int | None = None,
) -> PipelineResult:
    """Compute every report of ``journal`` (an export directory, or a list: one fleet) into ``out``,
    incrementally unless ``full``; ``collect_limit``: rows kept per report; ``bucket_ms``: the state's width.
    """
    for name, value, least in (("collect_limit", collect_limit, 0), ("bucket_ms", bucket_ms, 1)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least):
            raise PipelineError(f"{name} must be an int of at least {least}, not {value!r}")
    say = progress or (lambda _text: None)
    journals, out = _journal_list(journal), str(out)
    check_arguments(journals, out)
    started = time.perf_counter()
    ofiles = files_for(out, spark)
    with job_settings(spark):
        return _run(spark, journals, out, ofiles, full, say, collect_limit, bucket_ms, started)


def _run(
    spark: SparkSession, paths: list[str], out: str, ofiles: Files, full: bool, say: Progress,
    collect_limit: int, bucket_ms: int | None, started: float,
) -> PipelineResult:
    result = PipelineResult(journal=", ".join(paths), out=out)
    t0 = time.perf_counter()
    found = [find_journal(path, files_for(path, spark)) for path in paths]
    check_servers(found)
    # ranked by server: the rows' order across servers
    journals = sorted(found, key=lambda j: (j.key, j.path))
    plan = _plan(journals, ofiles, out, full, bucket_ms)
    plan, state, writer, new_rows = _update(spark, journals, ofiles, out, plan, say)
    result.seconds["update"] = time.perf_counter() - t0
    say(f"  state updated ({result.seconds['update']:.1f} s)")
    written = write_reports(spark, state, out, limit=collect_limit, say=say,
                            contacts=read_contacts(spark, journals))
    result.counts = {name: written.counts[name] for name in REPORTS}
    result.rows = {name: written.rows[name] for name in REPORTS}
    result.seconds |= {name: written.seconds[name] for name in (*REPORTS, "totals")}
    result.totals = written.totals
    if writer is not None:
        writer.commit(state)
    result.journal_rows = int(result.totals.get("journal_rows", 0))
    result.audit_scope = _scope(journals, plan, state, new_rows, int(result.totals.get("unauditable", 0)))
    result.total_seconds = time.perf_counter() - started
    meta = {
        "schema_version": SCHEMA_VERSION, "journal": result.journal,
        "journals": [{"server": j.server, "path": j.path} for j in journals],
        "journal_rows": result.journal_rows,
        "reports": result.counts, "totals": result.totals, "audit_scope": result.audit_scope,
        "seconds": {k: round(v, 3) for k, v in result.seconds.items()},
        "finished": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    ofiles.write_text(join(out, REPORTS_META), json.dumps(meta, indent=2, default=str) + "\n")
    return result


# -- spark-submit / python -m ------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """``edgeq pipeline run``'s argument parser."""
    parser = argparse.ArgumentParser(
        prog="edgeq.sync.pipeline.job.runner",
        description="edgeq's journal analytics on Spark: latency, expiry reconciliation, audit, throughput, "
                    "device health.",
    )
    parser.add_argument("--journal", required=True, action="append",
                        help="the directory (or URI) edgeq export wrote; "
                             "repeat it for each server of a fleet")
    parser.add_argument("--out", required=True, help="where to write the reports (each a Parquet directory)")
    parser.add_argument("--master", default=None,
                        help="Spark master (default: spark-submit's, else local[*])")
    parser.add_argument("--full", action="store_true",
                        help="read every part file again instead of only those exported since the last run")
    parser.add_argument("--html", action="store_true", help="also write OUT/report.html (local --out only)")
    parser.add_argument("--quiet", action="store_true", help="print no progress, only the summary")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """``spark-submit job.py ...`` / ``python -m ...``: exit 0, 1 with one line, or 2 (a usage error)."""
    args = build_parser().parse_args(argv)

    def say(text: str) -> None:
        if not args.quiet:
            print(text, file=sys.stderr, flush=True)

    try:
        if args.html and not is_local(args.out):
            raise PipelineError(f"--html writes a local file, and --out {args.out} is not local")
        check_arguments(args.journal, args.out)
        found = [check_journal(journal) for journal in args.journal]
        check_servers(found)
        say("starting Spark" + (f" ({args.master})" if args.master else ""))
        spark = spark_session(args.master, journal_rows=rows_to_read(found, args.out, full=args.full))
        try:
            result = run_pipeline(spark, args.journal, args.out, full=args.full, progress=say)
        finally:
            spark.stop()
        _print_summary(result, args.html, say)
    except JournalConflict as exc:  # arguments that cannot go together: a usage error
        print(f"Error: {exc}", file=sys.stderr)
        return 2
    except PipelineError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    return 0


def _print_summary(result: PipelineResult, html: bool, say: Progress) -> None:
    """The summary (and the page), or, on a bare Spark driver without edgeq's report writer,
    the totals as JSON."""
    try:
        from edgeq.sync.pipeline.report.summary import summary_text, write_html
    except ImportError as exc:
        say(f"(the summary needs edgeq installed: {exc}; the totals follow)")
        print(json.dumps({"totals": result.totals, "audit_scope": result.audit_scope}, indent=2, default=str))
        return
    print(summary_text(result))
    if html:
        page = write_html(result, local_path(result.out) / "report.html")
        say(f"wrote {page}")


# spark-submit sync/pipeline/job/runner.py, python -m edgeq.sync.pipeline.job.runner
if __name__ == "__main__":
    sys.exit(main())

"""Several home servers' journals read as one fleet: rows ordered by (server, journal id), and an
audit window per journal. See docs/pipeline.md, 'Several journals: one fleet'."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from edgeq.sync.pipeline.job.inputs import Journal, read_parts
from edgeq.sync.pipeline.job.state import Plan, State

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["ID_BITS", "describe", "new_rows"]

#: Each journal's ids are moved this many bits up by its rank among the run's journals.
ID_BITS = 40


def _firsts(rows: DataFrame) -> dict[int, int]:
    """Each journal's (by rank) earliest server-side ``at_ms`` among ``rows``."""
    from pyspark.sql import functions as F

    found = (rows.filter(F.col("side") == "server").groupBy(F.shiftright("id", ID_BITS).alias("rank"))
             .agg(F.min("at_ms").alias("first_ms")).collect())
    return {int(r["rank"]): int(r["first_ms"]) for r in found}


def new_rows(spark: SparkSession, journals: list[Journal], plan: Plan, state: State) -> DataFrame | str:
    """The new parts' rows of every journal, ``id`` ordered by (server, id), with ``window_ms``;
    or why the state must be rebuilt (new rows start a journal's window earlier than the state has it)."""
    from pyspark.sql import functions as F

    frames: list[DataFrame] = []
    for rank, journal in enumerate(journals):  # ranked by server (the journals come sorted)
        if plan.new[journal.key]:
            rows = read_parts(spark, journal.path, plan.new[journal.key])
            frames.append(rows if rank == 0 else rows.withColumn("id", F.col("id") + F.lit(rank << ID_BITS)))
    union = frames[0]
    for frame in frames[1:]:
        union = union.unionByName(frame)
    if len(journals) == 1:  # the state's from_ms is the window
        return union.withColumn("window_ms", F.lit(None).cast("long"))
    firsts = _firsts(union)
    for rank, journal in enumerate(journals):
        record, first = state.journals[journal.key], firsts.get(rank)
        if plan.incremental and first is not None:
            if record.window_ms is None:
                return f"{journal.label}'s first server-side rows arrived: its audit window starts with them"
            if first < record.window_ms:
                return (f"{journal.label}'s new rows hold server events"
                        " older than any the state has seen of it")
        elif not plan.incremental:
            record.window_ms = first
    window = F.lit(None).cast("long")
    for rank, journal in reversed(list(enumerate(journals))):
        start = state.journals[journal.key].window_ms
        if start is not None:
            window = F.when(F.shiftright("id", ID_BITS) == rank, F.lit(start)).otherwise(window)
    return union.withColumn("window_ms", window.cast("long"))


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def describe(journals: list[Journal], plan: Plan, state: State) -> tuple[list[dict[str, Any]], str, str]:
    """Each journal as the audit scope lists it, what the reports cover, and since when the audit judged."""
    listed: list[dict[str, Any]] = []
    for journal in journals:
        record = state.journals[journal.key]
        ids = [v for pair in record.parts.values() for v in pair[:2]]
        listed.append({
            "server": journal.server, "path": journal.path, "parts": len(record.parts),
            "new_parts": len(plan.new[journal.key]), "from_id": min(ids, default=None),
            "to_id": max(ids, default=None), "window_ms": record.window_ms,
        })
    if len(journals) == 1:
        only = listed[0]
        covers = "" if only["from_id"] is None else f" (journal ids {only['from_id']:,} to {only['to_id']:,})"
        since = "" if state.from_ms is None else f" since {_when(state.from_ms)}"
        return listed, covers, since
    covers = f" of {len(journals)} journals (" + "; ".join(
        f"{j['server']}: journal ids {j['from_id']:,} to {j['to_id']:,}" if j["from_id"] is not None else
        f"{j['server']}: none" for j in listed) + ")"
    windows = [f"{j['server']} since {_when(j['window_ms'])}" for j in listed if j["window_ms"] is not None]
    since = f", each journal's from its first server event on ({', '.join(windows)})" if windows else ""
    return listed, covers, since

"""One run's new journal rows merged into the state, in four Spark jobs (docs/pipeline.md, 'Incremental
runs'). A full run is the same merge into an empty state: both compute every dataset with one code."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from edgeq.sync.pipeline.errors import MalformedJournal
from edgeq.sync.pipeline.export.layout import REQUIRED
from edgeq.sync.pipeline.job import latency, traffic, uids
from edgeq.sync.pipeline.job.audit import device_origins
from edgeq.sync.pipeline.job.merge import Spec, is_, one_partition
from edgeq.sync.pipeline.job.state import State, StateWriter, read_dataset

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["Restart", "Update", "apply_rows"]

Say = Callable[[str], None]


@dataclass(slots=True)
class Update:
    """What merging the new rows did."""

    rows: int
    touched: set[int]


@dataclass(slots=True)
class Restart:
    """The new rows cannot be merged into the state: rebuild it (why)."""

    reason: str


@dataclass(slots=True)
class _Survey:
    """What step 1 found in the new rows."""

    rows: int
    incomplete: int
    first_server: int | None
    touched: set[int]
    more: set[int]


def _union(old: DataFrame | None, new: DataFrame) -> DataFrame:
    return new if old is None else old.unionByName(new)


def _survey(rows: DataFrame, previous: State, *, incremental: bool, check_nulls: bool,
            bucket_ms: int) -> _Survey:
    """Step 1, one collect: entries per kind and side, incomplete rows, the earliest server-side row
    and the buckets the new rows touch."""
    from pyspark.sql import functions as F

    incomplete = F.lit(False)
    for name in REQUIRED if check_nulls else ():
        incomplete = incomplete | F.col(name).isNull()
    # The bucket only when it is needed: reading it off the uid costs a regex per row.
    bucket = uids.bucket_of(bucket_ms) if incremental else F.lit(None).cast("int")
    found = rows.groupBy((F.col("side") == F.lit("server")).alias("server"), bucket.alias("bucket")).agg(
        F.count("*").alias("entries"), F.sum(incomplete.cast("long")).alias("incomplete"),
        F.min("at_ms").alias("first_ms"),
    ).select(F.lit(0).alias("what"), "server", "bucket", "entries", "incomplete", "first_ms")
    old_audit = read_dataset(rows.sparkSession, previous, "audit") if incremental else None
    if old_audit is not None:
        old_audit = one_partition(old_audit)[0]
        # An origin that shows itself a device in the new rows (an acceptance, an expiry it
        # reported of its own message, or a dead-lettering: as uids.audit_partial's evidence)
        # and did not before: the buckets of its earlier uids.
        evidence = is_("kind", "accepted") | is_("kind", "dead-lettered") | (
            is_("kind", "expired") & is_("side", "device") & (uids.device_name() == F.col("device")))
        new_devices = rows.filter(evidence).select("origin").distinct().join(
            device_origins(old_audit), "origin", "left_anti")
        flipped = old_audit.join(new_devices, "origin", "left_semi").select("bucket").distinct()
        none = F.lit(None).cast("long")
        found = found.unionByName(flipped.select(
            F.lit(1).alias("what"), F.lit(None).cast("boolean").alias("server"), "bucket",
            none.alias("entries"), none.alias("incomplete"), none.alias("first_ms")))
    seen = found.collect()
    counts = [r for r in seen if r["what"] == 0]
    return _Survey(
        rows=sum(int(r["entries"]) for r in counts),
        incomplete=sum(int(r["incomplete"] or 0) for r in counts),
        first_server=min((int(r["first_ms"]) for r in counts if r["server"]), default=None),
        touched={int(r["bucket"]) for r in counts if r["bucket"] is not None},
        more={int(r["bucket"]) for r in seen if r["what"] == 1},
    )


def apply_rows(
    spark: SparkSession, writer: StateWriter, previous: State, state: State, rows: DataFrame,
    *, incremental: bool, say: Say, check_nulls: bool = True,
) -> Update | Restart:
    """Merge journal ``rows`` into ``state`` (a copy of ``previous``, or fresh), writing a generation."""
    # A small run (new rows, or the state's datasets it merges them with) is done in one
    # partition: no shuffles, a Spark job per step (merge.one_partition).
    rows, small = one_partition(rows)
    survey = _survey(rows, previous, incremental=incremental, check_nulls=check_nulls,
                     bucket_ms=state.bucket_ms)
    if survey.incomplete:
        raise MalformedJournal(
            f"{survey.incomplete:,} journal row(s) lack a column edgeq's journal always fills "
            "(id, kind, side, at_ms, queue, uid, origin): these files were not written by edgeq export; "
            "re-export into a new directory"
        )
    first = survey.first_server
    if incremental and previous.from_ms is not None and first is not None and first < previous.from_ms:
        return Restart("the new rows hold server events older than any the state has seen")
    if first is not None:
        state.from_ms = first if state.from_ms is None else min(state.from_ms, first)
    say(f"  {survey.rows:,} new journal entries")

    # Steps 2-3 and step 4 are independent: submitted together, each job's gaps (planning,
    # committing files, a stage with fewer tasks than cores) are filled by the other's tasks.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="edgeq-rows") as pool:
        additive = pool.submit(_row_additive, spark, writer, previous, state, rows, incremental)
        redo = _per_uid(spark, writer, previous, state, rows, survey, incremental, small)
        additive.result()
    return Update(survey.rows, redo)


def _per_uid(spark: SparkSession, writer: StateWriter, previous: State, state: State, rows: DataFrame,
             survey: _Survey, incremental: bool, small: bool) -> set[int]:
    """Steps 2 and 3: the uid status and expired rows of the buckets the new rows touch, then their
    partials and those of the buckets of an origin that became a device (returned)."""
    touched = survey.touched
    status = uids.uid_status(rows, state.bucket_ms, spread=not small)
    expired = uids.expired_keys(rows, state.bucket_ms)
    if incremental:
        before = read_dataset(spark, previous, "uids", touched)
        if before is not None:
            status = uids.merge_status(one_partition(before.unionByName(status))[0])
        expired = _union(read_dataset(spark, previous, "expired", touched), expired)
    writer.write_bundle(state, "uids", {"uids": status, "expired": expired}, buckets=touched)
    if not incremental:
        touched = set(state.bucketed.get("uids", {}))
    redo = touched | survey.more
    _partials(spark, writer, state, redo)
    return redo


def _row_additive(spark: SparkSession, writer: StateWriter, previous: State, state: State, rows: DataFrame,
                  incremental: bool) -> None:
    """Step 4: the row-additive datasets, the state's merged with the new rows'."""

    def merged(name: str, spec: Spec) -> DataFrame:
        new, before = spec.of_rows(rows), read_dataset(spark, previous, name) if incremental else None
        return new if before is None else spec.merged(one_partition(before.unionByName(new))[0])

    writer.write_bundle(state, "rows", {
        "kinds": merged("kinds", traffic.kind_totals(check_nulls=False)),
        "throughput": merged("throughput", traffic.throughput()),
        "device_hourly": merged("device_hourly", traffic.device_hourly()),
        "queues": merged("queues", traffic.queue_names()),
        "latency_buckets": merged("latency_buckets", latency.latency_buckets()),
        "latency_values": merged("latency_values", latency.latency_values()),
        "latency_groups": merged("latency_groups", latency.latency_groups()),
    })


def _partials(spark: SparkSession, writer: StateWriter, state: State, buckets: set[int]) -> None:
    """The partials of ``buckets``, read back from the status just written (only the columns each
    needs: cheaper than keeping the status in memory)."""
    status = read_dataset(spark, state, "uids", buckets)
    keys = read_dataset(spark, state, "expired", buckets)
    assert status is not None and keys is not None  # just written
    status, keys = one_partition(status)[0], one_partition(keys)[0]
    derived = uids.derive(status, state.from_ms)
    audit = uids.audit_partial(derived)
    # Which origins are devices is decided over every bucket: the others' audit partials
    # (the state's, not rewritten by this run) and these.
    others = read_dataset(spark, state, "audit", set(state.bucketed.get("audit", {})) - buckets)
    every = audit if others is None else one_partition(others.unionByName(audit))[0]
    e2e = uids.e2e_values(status)
    writer.write_bundle(state, "partials", {
        "audit": audit,
        "gaps": uids.gap_partial(derived, device_origins(every)),
        "dups": uids.dup_partial(derived),
        "expiry_daily": uids.expiry_daily_partial(derived),
        "expiry_where": uids.expiry_where_partial(keys),
        "device_expired": uids.device_expired_partial(keys),
        "e2e": latency.e2e_partial(e2e),
        "e2e_delivered": latency.e2e_delivered(e2e),
    }, buckets=buckets)

"""One run's new journal rows, merged into the state (:mod:`edgeq.sync.pipeline.state`).

A full run is the same merge into an empty state, so a full run and an incremental
one compute every dataset with the same code. What the new rows concern:

* the row-additive datasets (entries per kind, throughput, device activity, queue names,
  the latencies sorted per device and queue) take the new rows' aggregates;
* the uid status takes them in the buckets they touch (the creation days of their uids),
  and those buckets' partials are computed again; so are the gap lists of the buckets of
  an origin that became a device in this run (its earlier uids are now audited).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from edgeq.sync.pipeline import latency, traffic, uids
from edgeq.sync.pipeline.audit import device_origins
from edgeq.sync.pipeline.errors import MalformedJournal
from edgeq.sync.pipeline.merge import Spec
from edgeq.sync.pipeline.state import State, StateWriter, read_dataset

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


def _union(old: DataFrame | None, new: DataFrame) -> DataFrame:
    return new if old is None else old.unionByName(new)


def _outside(frame: DataFrame | None, buckets: set[int]) -> DataFrame | None:
    from pyspark.sql import functions as F

    if frame is None or not buckets:
        return frame
    return frame.filter(~F.col("bucket").isin(sorted(buckets)))


class _Run:
    def __init__(self, spark: SparkSession, writer: StateWriter, previous: State, state: State) -> None:
        self.spark, self.writer, self.previous, self.state = spark, writer, previous, state

    def old(self, name: str, buckets: set[int] | None = None) -> DataFrame | None:
        return read_dataset(self.spark, self.previous, name, buckets)

    def merged(self, name: str, spec: Spec, rows: DataFrame) -> DataFrame:
        """A row-additive dataset: the state's merged with the new rows'."""
        new, old = spec.of_rows(rows), self.old(name)
        return new if old is None else spec.merged(old.unionByName(new))

    def replaced(self, name: str, new: DataFrame, buckets: set[int]) -> DataFrame:
        """A dataset of per-bucket partials: the state's for other buckets, and ``new``."""
        return _union(_outside(self.old(name), buckets), new)


def apply_rows(
    spark: SparkSession, writer: StateWriter, previous: State, state: State, rows: DataFrame,
    *, incremental: bool, say: Say, check_nulls: bool = True,
) -> Update | Restart:
    """Merge journal ``rows`` into ``state`` (a copy of ``previous``, or a fresh one), writing
    the new generation's datasets."""
    run = _Run(spark, writer, previous, state)

    # Entries per kind: also how many rows lack a required column, and the earliest
    # server-side row, which bounds what the audit can judge.
    kinds = traffic.kind_totals(check_nulls=check_nulls)
    seen = kinds.of_rows(rows).collect()
    incomplete = sum(int(r["incomplete"]) for r in seen)
    if incomplete:
        raise MalformedJournal(
            f"{incomplete:,} journal row(s) lack a column edgeq's journal always fills (id, kind, side, at_ms, "
            "queue, uid, origin): these files were not written by edgeq export; re-export into a new directory"
        )
    count = sum(int(r["entries"]) for r in seen)
    first_server = min((int(r["first_ms"]) for r in seen if r["side"] == "server"), default=None)
    if incremental and previous.from_ms is not None and first_server is not None and first_server < previous.from_ms:
        return Restart("the new rows hold server events older than any the state has seen")
    if first_server is not None:
        state.from_ms = first_server if state.from_ms is None else min(state.from_ms, first_server)
    say(f"  {count:,} new journal entries")

    # The uid status of the buckets the new rows touch.
    fresh = uids.uid_status(rows, state.bucket_ms)
    touched: set[int] = set()
    if incremental:
        # The buckets the new rows concern: read off their uids (a scan of one column).
        found = rows.select(uids.bucket_of(state.bucket_ms).alias("bucket")).distinct().collect()
        touched = {int(r["bucket"]) for r in found}
        old = run.old("uids", touched)
        status = fresh if old is None else uids.merge_status(old.unionByName(fresh))
    else:
        status = fresh
    writer.write_bucketed(state, "uids", status, touched)
    if not incremental:
        touched = set(state.bucketed.get("uids", {}))
    # The touched buckets' expired rows: the state's and the new ones, rewritten as one file each.
    writer.write_bucketed(state, "expired", _union(run.old("expired", touched), uids.expired_keys(rows, state.bucket_ms)),
                          touched)
    # Read back what was just written (columnar, only the columns each partial needs): cheaper
    # than keeping the whole status in memory.
    written = read_dataset(spark, state, "uids", touched)
    assert written is not None
    _partials(run, written, touched, incremental)

    writer.write_bundle(state, "rows", {
        "kinds": run.merged("kinds", kinds, rows),
        "throughput": run.merged("throughput", traffic.throughput(), rows),
        "device_hourly": run.merged("device_hourly", traffic.device_hourly(), rows),
        "queues": run.merged("queues", traffic.queue_names(), rows),
        "latency_buckets": run.merged("latency_buckets", latency.latency_buckets(), rows),
        "latency_values": run.merged("latency_values", latency.latency_values(), rows),
        "latency_groups": run.merged("latency_groups", latency.latency_groups(), rows),
    })
    return Update(count, touched)


def _partials(run: _Run, status: DataFrame, touched: set[int], incremental: bool) -> None:
    """Compute the touched buckets' partials again, and keep the others'."""
    state = run.state
    derived = uids.derive(status, state.from_ms)
    audit = run.replaced("audit", uids.audit_partial(derived), touched)
    devices = device_origins(audit)
    # An origin that became a device in this run: its uids in untouched buckets are audited
    # now, so those buckets' gap lists are made again.
    more: set[int] = set()
    old_audit = run.old("audit")
    if incremental and old_audit is not None:
        flipped = devices.join(device_origins(old_audit), "origin", "left_anti")
        more = {int(r["bucket"]) for r in old_audit.join(flipped, "origin", "left_semi").select("bucket").distinct().collect()}
        more -= touched
    gaps = uids.gap_partial(derived, devices)
    if more:
        again = read_dataset(run.spark, run.previous, "uids", more)
        if again is not None:
            gaps = gaps.unionByName(uids.gap_partial(uids.derive(again, state.from_ms), devices))
    e2e = uids.e2e_values(status)
    run.writer.write_bundle(state, "e2e", {"e2e": latency.e2e_partial(e2e), "e2e_delivered": latency.e2e_delivered(e2e)},
                            buckets=touched)
    keys = read_dataset(run.spark, state, "expired", touched)
    assert keys is not None  # just written
    run.writer.write_bundle(state, "partials", {
        "audit": audit,
        "gaps": run.replaced("gaps", gaps, touched | more),
        "dups": run.replaced("dups", uids.dup_partial(derived), touched),
        "expiry_daily": run.replaced("expiry_daily", uids.expiry_daily_partial(derived), touched),
        "expiry_where": run.replaced("expiry_where", uids.expiry_where_partial(keys), touched),
        "device_expired": run.replaced("device_expired", uids.device_expired_partial(keys), touched),
    })

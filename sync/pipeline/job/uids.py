"""Each message's story: the journal grouped by uid (the **uid status**, in buckets of creation time),
whence the **partials** of the audit, the expiry reconciliation and the end-to-end latency."""

from __future__ import annotations

from typing import TYPE_CHECKING

from edgeq.sync.pipeline.job.merge import Col, aggregate, count_if, is_, merge

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = [
    "CATEGORIES",
    "KEYS",
    "audit_partial",
    "bucket_of",
    "derive",
    "device_expired_partial",
    "device_name",
    "dup_partial",
    "e2e_values",
    "expired_keys",
    "expiry_daily_partial",
    "expiry_where_partial",
    "gap_partial",
    "merge_status",
    "queue_id",
    "stamp_of",
    "uid_status",
]

DAY_MS = 86_400_000
KEYS = ("bucket", "uid", "origin", "stamp")
#: Bits of the ``kinds`` column: which kinds of row a uid has.
KIND_BITS = {"accepted": 1, "delivered": 2, "expired": 4, "other": 8, "dead-lettered": 16, "discarded": 32}
#: A uid's expiry category (0: not expired); docs/pipeline.md, 'expiry reconciliation'.
CATEGORIES = {1: "server_only", 2: "device_only", 3: "both", 4: "delivered_then_device_expired",
              5: "accepted_then_device_expired"}


def queue_id(column: str = "queue") -> Column:
    """A queue name as a number (64-bit xxhash): aggregates stay numeric; a collision is reported."""
    from pyspark.sql import functions as F

    return F.xxhash64(F.col(column))


def device_name(origin: str = "origin") -> Column:
    """The queue manager name of an origin (``DEV1:k3x9qam2pa`` -> ``DEV1``)."""
    from pyspark.sql import functions as F

    return F.substring_index(F.col(origin), ":", 1)


def stamp_of(uid: str = "uid") -> Column:
    """A uid's stamp (``ORIGIN.STAMP``) as a long; null if it has none."""
    from pyspark.sql import functions as F

    # try_cast: a uid without a numeric stamp gives null (Spark 4's ANSI cast would fail the job)
    return F.expr(rf"try_cast(regexp_extract({uid}, '\\.([0-9]{{1,18}})$', 1) AS BIGINT)")


def bucket_of(bucket_ms: int, stamp: Column | None = None) -> Column:
    """A uid's bucket: its creation time (from its stamp) in ``bucket_ms`` units; -1 without a stamp."""
    from pyspark.sql import functions as F

    stamp = stamp_of() if stamp is None else stamp
    return F.coalesce(F.floor(stamp / F.lit(bucket_ms * 1000)).cast("int"), F.lit(-1))


def _columns() -> list[Col]:
    from pyspark.sql import functions as F

    # Over :func:`_narrow`'s rows: the kind as its bit, the side as a flag each.
    code = F.col("kind_bit")
    acc, dl, ex, dead, gone = (
        code == KIND_BITS[k] for k in ("accepted", "delivered", "expired", "dead-lettered", "discarded"))
    srv, dev = F.col("side_server"), F.col("side_device")
    qid, at, jid = F.col("qid"), F.col("at_ms"), F.col("id")
    own_report = ex & dev & F.col("own_device")
    return [
        Col("accepted", acc.cast("long"), "sum"),
        Col("acc_first_id", F.when(acc, jid), "min"),
        Col("acc_last_id", F.when(acc, jid), "max"),
        Col("acc_min_ms", F.when(acc, at), "min"),
        Col("acc_max_ms", F.when(acc, at), "max"),
        Col("acc_first_qid", F.when(acc, qid), "min_by:acc_first_id"),
        Col("acc_last_qid", F.when(acc, qid), "max_by:acc_last_id"),
        Col("acc_first_offset", F.when(acc, F.col("clock_offset_ms")), "min_by:acc_first_id"),
        Col("acc_first_confirmed", F.when(acc, F.col("confirmed_ms")), "min_by:acc_first_id"),
        Col("created_ms", F.col("created_ms"), "min"),
        Col("delivered", dl.cast("long"), "sum"),
        Col("del_first_ms", F.when(dl, at), "min"),
        Col("expired", ex.cast("long"), "sum"),
        Col("exp_first_ms", F.when(ex, at), "min"),
        Col("exp_server_first_id", F.when(ex & srv, jid), "min"),
        Col("exp_server_qid", F.when(ex & srv, qid), "min_by:exp_server_first_id"),
        Col("exp_device_first_id", F.when(ex & dev, jid), "min"),
        Col("exp_device_qid", F.when(ex & dev, qid), "min_by:exp_device_first_id"),
        Col("self_reported", F.coalesce(own_report, F.lit(False)).cast("int"), "max"),
        Col("dead_lettered", dead.cast("long"), "sum"),
        Col("discarded", gone.cast("long"), "sum"),
        Col("kinds", code, "bit_or"),
        Col("first_seen_ms", at, "min"),
        Col("first_arrival_ms", F.col("arrived_ms"), "min"),
        Col("window_ms", F.col("window_ms"), "max"),  # its journal's audit window (several journals)
    ]


def _narrow(rows: DataFrame, spread: bool) -> DataFrame:
    """The columns the uid status needs, queue names as ids, kind and side as numbers, spread by uid
    unless not ``spread``: the one shuffle moves these few columns, not the aggregate's wide buffers."""
    from pyspark.sql import functions as F

    kind = F.lit(KIND_BITS["other"])
    for name in ("discarded", "dead-lettered", "expired", "delivered", "accepted"):
        kind = F.when(is_("kind", name), KIND_BITS[name]).otherwise(kind)
    narrow = rows.select(
        "id", kind.alias("kind_bit"), is_("side", "server").alias("side_server"),
        is_("side", "device").alias("side_device"),
        "at_ms", "uid", "origin", "created_ms", "arrived_ms", "confirmed_ms", "clock_offset_ms", "window_ms",
        queue_id().alias("qid"),
        F.coalesce(device_name() == F.col("device"), F.lit(False)).alias("own_device"),
    )
    return narrow.repartition("uid") if spread else narrow


def uid_status(rows: DataFrame, bucket_ms: int, *, spread: bool = True) -> DataFrame:
    """The uid status of journal ``rows`` (keys :data:`KEYS`); ``spread``: not in one partition."""
    from pyspark.sql import functions as F

    cols = _columns()
    status = aggregate(_narrow(rows, spread), ["uid", "origin"], ("uid", "origin"), cols)
    stamp = stamp_of()
    return status.select(bucket_of(bucket_ms, stamp).alias("bucket"), "uid", "origin", stamp.alias("stamp"),
                         *(F.col(c.name) for c in cols))


def merge_status(frame: DataFrame) -> DataFrame:
    """Uid statuses (the state's and a run's, unioned), merged."""
    return merge(frame, KEYS, _columns())


def derive(status: DataFrame, from_ms: int | None) -> DataFrame:
    """The uid status with what the audits need: ``category``, ``gap``, ``unauditable``, and more."""
    from pyspark.sql import functions as F

    acc, dl = F.col("accepted") > 0, F.col("delivered") > 0
    es, ed = F.col("exp_server_first_id").isNotNull(), F.col("exp_device_first_id").isNotNull()
    own = F.col("self_reported") == 1  # the device-side expiry is of the origin's own copy
    category = (
        F.when(~(es | ed), 0).when(ed & ~es & own & dl, 4).when(ed & ~es & own & acc, 5)
        .when(es & ed, 3).when(es, 1).otherwise(2)
    )
    dead, gone = F.col("dead_lettered") > 0, F.col("discarded") > 0
    candidate = ~acc & ~es & ~ed & ~dead & ~gone  # a dead-lettered uid is accounted for, not a gap
    arrival = F.coalesce(F.col("first_arrival_ms"), F.col("first_seen_ms"))
    # Each journal's own window in a run over several (edgeq.sync.pipeline.job.fleet), else the data's.
    early = F.coalesce(arrival < F.coalesce(F.col("window_ms"), F.lit(from_ms).cast("long")), F.lit(False))
    return status.select(
        "*", acc.alias("is_accepted"), dl.alias("is_delivered"), ed.alias("on_device"),
        category.alias("category"),
        (candidate & ~early).alias("gap"), (candidate & early).alias("unauditable"),
        (~acc & es).alias("held_expired"), (dead & ~acc & ~es & ~ed & ~gone).alias("dead_letter_waiting"),
    )


def audit_partial(derived: DataFrame) -> DataFrame:
    """Per bucket and origin: the audit's counts, and ``evidence`` that the origin is a device
    (which are devices is decided over all buckets)."""
    from pyspark.sql import functions as F

    acc, stamp = F.col("is_accepted"), F.col("stamp")
    cat = F.col("category")
    return derived.groupBy("bucket", "origin").agg(
        F.count("*").alias("uids"),
        count_if(acc).alias("accepted"),
        F.min(F.when(acc, stamp)).alias("first_stamp"),
        F.max(F.when(acc, stamp)).alias("last_stamp"),
        count_if(F.col("accepted") > 1).alias("duplicates"),
        count_if(~acc & (cat > 0)).alias("expired_unaccepted"),
        count_if(acc & F.col("on_device")).alias("expired_on_device_after_accept"),
        count_if(cat == 4).alias("delivered_then_device_expired"),
        count_if(cat == 5).alias("accepted_then_device_expired"),
        count_if(F.col("held_expired")).alias("held_expired"),
        count_if(F.col("gap")).alias("gaps"),
        count_if(F.col("unauditable")).alias("unauditable"),
        count_if(F.col("is_delivered")).alias("delivered"),
        count_if(F.col("dead_letter_waiting")).alias("dead_lettered"),
        F.max((acc | (F.col("self_reported") == 1) | (F.col("dead_lettered") > 0)).cast("int"))
        .alias("evidence"),
    )


def _kinds() -> Column:
    from pyspark.sql import functions as F

    k = F.col("kinds")
    return F.array_compact(F.array(*(F.when((k.bitwiseAND(F.lit(bit))) != 0, F.lit(name))
                                     for name, bit in sorted(KIND_BITS.items()))))


def gap_partial(derived: DataFrame, devices: DataFrame) -> DataFrame:
    """The gaps of device origins (``devices``: one column, ``origin``)."""
    from pyspark.sql import functions as F

    return (
        derived.filter(F.col("gap"))
        .join(F.broadcast(devices), "origin", "left_semi")
        .select("bucket", "origin", "uid", "stamp", _kinds().alias("kinds"), "first_seen_ms")
    )


def dup_partial(derived: DataFrame) -> DataFrame:
    """Uids accepted more than once, with their first and last acceptance's queue (as ids)."""
    from pyspark.sql import functions as F

    return derived.filter(F.col("accepted") > 1).select(
        "bucket", "uid", "origin", F.col("accepted").alias("times"),
        F.col("acc_first_qid").alias("first_qid"),
        F.col("acc_last_qid").alias("last_qid"), F.col("acc_min_ms").alias("first_ms"),
        F.col("acc_max_ms").alias("last_ms"),
    )


def expiry_daily_partial(derived: DataFrame) -> DataFrame:
    """Per bucket, queue (the first server-side expiry's, else device-side) and UTC date
    of the first expiry: messages by category, and expired entries."""
    from pyspark.sql import functions as F

    cat = F.col("category")
    return (
        derived.filter(cat > 0)
        .select(
            "bucket", cat.alias("category"), F.col("expired").alias("entries"),
            F.coalesce(F.col("exp_server_qid"), F.col("exp_device_qid")).alias("qid"),
            F.date_from_unix_date(F.floor(F.col("exp_first_ms") / DAY_MS).cast("int")).alias("date"),
        )
        .groupBy("bucket", "qid", "date")
        .agg(
            count_if(cat.isin(1, 2, 3)).alias("expired"),
            *(count_if(cat == code).alias(name) for code, name in CATEGORIES.items()),
            F.sum("entries").cast("long").alias("entries"),
        )
    )


def expired_keys(rows: DataFrame, bucket_ms: int) -> DataFrame:
    """What expiry_where and device health need of each expired row."""

    return rows.filter(is_("kind", "expired")).select(
        bucket_of(bucket_ms).alias("bucket"), "uid", "queue", "side", "check_point", "device",
    )


def expiry_where_partial(keys: DataFrame) -> DataFrame:
    """Distinct expired uids per bucket, queue, side and check point."""
    from pyspark.sql import functions as F

    return (
        keys.select("bucket", "uid", "queue", "side", "check_point").distinct()
        .groupBy("bucket", "queue", "side", "check_point").agg(F.count("*").alias("messages"))
    )


def device_expired_partial(keys: DataFrame) -> DataFrame:
    """Distinct uids each device reported expired (device-side rows), per bucket."""
    from pyspark.sql import functions as F

    return (
        keys.filter(is_("side", "device") & F.col("device").isNotNull())
        .select("bucket", "device", "uid").distinct()
        .groupBy("bucket", "device").agg(F.count("*").alias("device_expired"))
    )


#: The end-to-end latencies of an accepted message (see docs/pipeline.md, e2e_latency).
E2E_METRICS = ("confirm", "confirm_raw", "delivered", "delivered_raw")


def e2e_values(status: DataFrame) -> DataFrame:
    """Per accepted uid: the device, its first acceptance's queue id, whether that had no clock
    offset, and each of :data:`E2E_METRICS` (null if not delivered)."""
    from pyspark.sql import functions as F

    created, offset = F.col("created_ms"), F.coalesce(F.col("acc_first_offset"), F.lit(0))
    confirmed, delivered = F.col("acc_first_confirmed"), F.col("del_first_ms")
    return status.filter(F.col("accepted") > 0).select(
        "bucket", device_name().alias("device"), F.col("acc_first_qid").alias("qid"),
        F.col("acc_first_offset").isNull().alias("uncorrected"), delivered.isNotNull().alias("is_delivered"),
        (confirmed - created + offset).alias("confirm"), (confirmed - created).alias("confirm_raw"),
        (delivered - created + offset).alias("delivered"), (delivered - created).alias("delivered_raw"),
    )

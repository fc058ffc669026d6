"""Mergeable aggregates: one definition computes a dataset from journal rows *and* merges two such
datasets, so an incremental run gives exactly what a full run gives."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = [
    "SMALL_BYTES", "Col", "Spec", "aggregate", "count_if", "estimated_bytes", "is_", "merge", "one_partition",
]


#: A frame Spark estimates at most this big (the bytes of the Parquet files it reads, scaled
#: to the columns it keeps) is small enough for one task: see :func:`one_partition`.
SMALL_BYTES = 16 << 20


def estimated_bytes(frame: DataFrame) -> int | None:
    """Spark's estimate of ``frame``'s size in bytes (optimizer statistics: no job runs), or None."""
    try:
        # sizeInBytes is a BigInt, or an int
        return int(str(frame._jdf.queryExecution().optimizedPlan().stats().sizeInBytes()))
    except Exception:  # py4j's errors, or a frame of another kind (Spark Connect): no estimate
        return None


def one_partition(frame: DataFrame, *, limit: int | None = None) -> tuple[DataFrame, bool]:
    """``frame`` in one partition (no shuffle after it) if at most ``limit`` bytes, and whether it is."""
    size = estimated_bytes(frame)
    small = size is not None and size <= (SMALL_BYTES if limit is None else limit)
    return (frame.coalesce(1) if small else frame), small


@dataclass(frozen=True, slots=True)
class Col:
    """One column of a mergeable dataset: a journal row's contribution (``row``) and how they combine
    (``how``): ``sum``, ``min``, ``max``, ``bit_or``, ``min_by:<col>``, ``max_by:<col>`` or ``sorted`` (one
    sorted array). All but ``sorted`` are numeric, so Spark aggregates them in a hash map."""

    name: str
    row: Column
    how: str


def is_(column: str, value: str) -> Column:
    """``column == value``, as a Spark condition."""
    from pyspark.sql import functions as F

    return F.col(column) == F.lit(value)


def count_if(condition: Column) -> Column:
    """How many rows meet ``condition`` (0, not null, if none)."""
    from pyspark.sql import functions as F

    return F.sum(F.when(condition, 1).otherwise(0)).cast("long")


def _combine(col: Col, *, rows: bool = False) -> Column:
    """How ``col`` combines: rows' contributions (``rows``), or datasets' values."""
    from pyspark.sql import functions as F

    c = F.col(col.name)
    how, _, other = col.how.partition(":")
    if how == "sum":
        return F.sum(c).cast("long").alias(col.name)
    if how == "min":
        return F.min(c).alias(col.name)
    if how == "max":
        return F.max(c).alias(col.name)
    if how == "bit_or":
        return F.bit_or(c).alias(col.name)
    if how == "min_by":
        return F.min_by(c, F.col(other)).alias(col.name)
    if how == "max_by":
        return F.max_by(c, F.col(other)).alias(col.name)
    if how == "sorted" and rows:  # rows' values, sorted into one array
        return F.sort_array(F.collect_list(c)).alias(col.name)
    if how == "sorted":  # sorted arrays, merged into one sorted array
        return F.sort_array(F.flatten(F.collect_list(c))).alias(col.name)
    raise ValueError(f"unknown merge {col.how!r} for {col.name}")


def merge(frame: DataFrame, keys: Sequence[str], cols: Sequence[Col]) -> DataFrame:
    """Combine the rows of ``frame`` (datasets of this shape, unioned) that share ``keys``."""
    return frame.groupBy(*keys).agg(*(_combine(c) for c in cols))


def aggregate(rows: DataFrame, keys: Sequence[Column | str], key_names: Sequence[str],
              cols: Sequence[Col]) -> DataFrame:
    """The dataset of journal ``rows``: contributions combined by ``keys`` (named ``key_names``)."""
    from pyspark.sql import functions as F

    projected = rows.select(
        *(F.col(k).alias(n) if isinstance(k, str) else k.alias(n)
          for k, n in zip(keys, key_names, strict=True)),
        *(c.row.alias(c.name) for c in cols),
    )
    return projected.groupBy(*key_names).agg(*(_combine(c, rows=True) for c in cols))


@dataclass(frozen=True, slots=True)
class Spec:
    """A mergeable dataset: its keys (expressions, and names), its columns, the rows it takes (``where``)."""

    keys: tuple[Column | str, ...]
    names: tuple[str, ...]
    cols: tuple[Col, ...]
    where: Column | None = None
    #: what to do to journal rows first (e.g. narrow them, and spread them by a key so that the
    #: aggregate needs no shuffle of its own)
    prepare: Callable[[DataFrame], DataFrame] | None = None

    def of_rows(self, rows: DataFrame) -> DataFrame:
        """The dataset of journal ``rows`` (without ``cols``: ``prepare``'s rows as they are)."""
        rows = rows if self.where is None else rows.filter(self.where)
        rows = rows if self.prepare is None else self.prepare(rows)
        return rows if not self.cols else aggregate(rows, self.keys, self.names, self.cols)

    def merged(self, frame: DataFrame) -> DataFrame:
        return merge(frame, self.names, self.cols)


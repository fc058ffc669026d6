"""What can go wrong in the pipeline, each error saying what to do about it."""

from __future__ import annotations

from edgeq.errors import EdgeqError

__all__ = ["JournalNotFound", "MalformedJournal", "MissingDependency", "PipelineError", "SparkFailed"]


class PipelineError(EdgeqError):
    """Base class of the export's and the Spark job's errors."""


class MissingDependency(PipelineError):
    """pyarrow or pyspark (or Java, for Spark) is not installed."""


class JournalNotFound(PipelineError, LookupError):
    """The store or the exported journal directory does not exist, or holds no journal."""


class MalformedJournal(PipelineError, ValueError):
    """The input is not an edgeq journal: wrong columns or types, unreadable Parquet, bad --since."""


class SparkFailed(PipelineError):
    """Spark could not start or the job failed for a reason other than its input."""


def require(module: str) -> None:
    """Raise :class:`MissingDependency` unless ``module`` (pyarrow, pyspark) can be imported."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise MissingDependency(
            f"{module} is not installed: the pipeline needs it; pip install 'edgeq[pipeline]'"
        )

"""The home server's analytics: its journal exported as Parquet (``export/``), a Spark job over it
(``job/``) and the report (``report/``); imports neither pyarrow nor pyspark. See docs/pipeline.md."""

from edgeq.sync.pipeline.errors import JournalNotFound, MalformedJournal, MissingDependency, PipelineError

__all__ = ["JournalNotFound", "MalformedJournal", "MissingDependency", "PipelineError"]

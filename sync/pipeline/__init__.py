"""The home server's analytics: its journal exported as Parquet, and a Spark job over it.

* :mod:`edgeq.sync.pipeline.export` -- ``edgeq export``: the journal of a home
  server's store, appended incrementally to a date-partitioned Parquet dataset
  (needs pyarrow);
* :mod:`edgeq.sync.pipeline.job` -- ``edgeq pipeline run`` (or ``spark-submit``):
  delivery latency, expiry reconciliation, an exactly-once audit and hourly
  throughput, computed with Spark's DataFrame API (needs pyspark and Java);
* :mod:`edgeq.sync.pipeline.report` -- the printed summary and the HTML page.

Importing this package imports neither pyarrow nor pyspark (``pip install
'edgeq[pipeline]'`` brings both). See ``docs/pipeline.md``.
"""

from edgeq.sync.pipeline.errors import JournalNotFound, MalformedJournal, MissingDependency, PipelineError

__all__ = ["JournalNotFound", "MalformedJournal", "MissingDependency", "PipelineError"]

"""The home server's analytics: its journal exported as Parquet, and a Spark job over it.

* :mod:`edgeq.sync.pipeline.export` -- ``edgeq export``: the journal of a home
  server's store, appended incrementally to a date-partitioned Parquet dataset
  (needs pyarrow);
* :mod:`edgeq.sync.pipeline.job` -- ``edgeq pipeline run`` (or ``spark-submit``):
  delivery latency, expiry reconciliation, an exactly-once audit, hourly
  throughput and device health, computed with Spark's DataFrame API (needs
  pyspark and Java), incrementally: its parts are :mod:`~edgeq.sync.pipeline.session`
  (the session, Spark's errors), :mod:`~edgeq.sync.pipeline.inputs` (finding and
  reading the export), :mod:`~edgeq.sync.pipeline.state` and
  :mod:`~edgeq.sync.pipeline.update` (the state kept between runs),
  :mod:`~edgeq.sync.pipeline.uids` (each message's story: the audit's one pass),
  :mod:`~edgeq.sync.pipeline.latency`, :mod:`~edgeq.sync.pipeline.traffic`,
  :mod:`~edgeq.sync.pipeline.audit` and :mod:`~edgeq.sync.pipeline.finals`
  (the reports); :mod:`~edgeq.sync.pipeline.bundle` packs it for ``spark-submit``;
* :mod:`edgeq.sync.pipeline.report` -- the printed summary and the HTML page.

Importing this package imports neither pyarrow nor pyspark (``pip install
'edgeq[pipeline]'`` brings both). See ``docs/pipeline.md``.
"""

from edgeq.sync.pipeline.errors import JournalNotFound, MalformedJournal, MissingDependency, PipelineError

__all__ = ["JournalNotFound", "MalformedJournal", "MissingDependency", "PipelineError"]

"""The home server's analytics: its journal exported as Parquet, and a Spark job over it.

* :mod:`edgeq.sync.pipeline.export.exporter` -- ``edgeq export``: the journal of a home
  server's store, appended incrementally to a date-partitioned Parquet dataset
  (needs pyarrow);
* :mod:`edgeq.sync.pipeline.job.runner` -- ``edgeq pipeline run`` (or ``spark-submit``):
  delivery latency, expiry reconciliation, an exactly-once audit, hourly
  throughput and device health, computed with Spark's DataFrame API (needs
  pyspark and Java), incrementally: its parts are :mod:`~edgeq.sync.pipeline.job.session`
  (the session, Spark's errors), :mod:`~edgeq.sync.pipeline.job.inputs` (finding and
  reading the export), :mod:`~edgeq.sync.pipeline.job.state` and
  :mod:`~edgeq.sync.pipeline.job.update` (the state kept between runs),
  :mod:`~edgeq.sync.pipeline.job.uids` (each message's story: the audit's one pass),
  :mod:`~edgeq.sync.pipeline.job.latency`, :mod:`~edgeq.sync.pipeline.job.traffic`,
  :mod:`~edgeq.sync.pipeline.job.audit` and :mod:`~edgeq.sync.pipeline.job.finals`
  (the reports); :mod:`~edgeq.sync.pipeline.job.bundle` packs it for ``spark-submit``;
* :mod:`edgeq.sync.pipeline.report.summary` -- the printed summary and the HTML page.

Importing this package imports neither pyarrow nor pyspark (``pip install
'edgeq[pipeline]'`` brings both). See ``docs/pipeline.md``.
"""

from edgeq.sync.pipeline.errors import JournalNotFound, MalformedJournal, MissingDependency, PipelineError

__all__ = ["JournalNotFound", "MalformedJournal", "MissingDependency", "PipelineError"]

"""How ``make test`` shares the suite among its pytest-xdist workers (``-n auto --dist loadscope``)."""

from __future__ import annotations

from xdist.scheduler import LoadScopeScheduling


class PipelineAsOneScope(LoadScopeScheduling):
    """xdist's ``loadscope`` (a module's tests on one worker: its fixtures built once), with every
    pipeline test in one unit: one Spark JVM and one ``home_journal`` for the run. (Not
    ``loadgroup``'s ``xdist_group`` marks: pytest 9.2 silently ignores them, pytest-xdist #1386.)"""

    def _split_scope(self, nodeid: str) -> str:  # the method xdist's own schedulers override
        return "tests/pipeline" if nodeid.startswith("tests/pipeline/") else super()._split_scope(nodeid)

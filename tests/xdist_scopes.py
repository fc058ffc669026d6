"""How ``make test`` shares the suite among its pytest-xdist workers (``-n auto --dist loadscope``)."""

from __future__ import annotations

from typing import Any

from xdist.scheduler import LoadScopeScheduling

#: The units that take minutes, longest first (``--durations`` on 2 cores): handed out before all
#: others (xdist's order, most tests first, would start the soak's 4 last), so that no worker
#: starts one while the rest of the suite is nearly done.
LONGEST_FIRST = ("tests/pipeline", "tests/sync/test_soak.py", "tests/test_benchmarks_smoke.py")


class PipelineAsOneScope(LoadScopeScheduling):
    """xdist's ``loadscope`` (a module's tests on one worker: its fixtures built once), with every
    pipeline test in one unit: one Spark JVM and one ``home_journal`` for the run. (Not
    ``loadgroup``'s ``xdist_group`` marks: pytest 9.2 silently ignores them, pytest-xdist #1386.)
    The units of :data:`LONGEST_FIRST` go first; the rest in xdist's order (most tests first)."""

    def _split_scope(self, nodeid: str) -> str:  # the method xdist's own schedulers override
        return "tests/pipeline" if nodeid.startswith("tests/pipeline/") else super()._split_scope(nodeid)

    def _assign_work_unit(self, node: Any) -> None:  # xdist pops the next unit off the front here
        for scope in reversed(LONGEST_FIRST):
            if scope in self.workqueue:
                self.workqueue.move_to_end(scope, last=False)
        super()._assign_work_unit(node)

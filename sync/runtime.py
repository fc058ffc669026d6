"""Process-wide settings of the long-running commands (``edgeq serve``, ``edgeq sync``)."""

from __future__ import annotations

import gc

__all__ = ["GC_YOUNG_THRESHOLD", "tune_gc"]

#: The young-generation threshold of their garbage collector: above the objects one sync batch keeps
#: alive at once (its decoded body, messages and rows), so that a batch is not scanned again and
#: again while it is handled (docs/scaling.md).
GC_YOUNG_THRESHOLD = 50_000


def tune_gc() -> None:
    """Freeze what start-up made (modules, the app) out of every later collection, and collect the
    young generation at :data:`GC_YOUNG_THRESHOLD`."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])

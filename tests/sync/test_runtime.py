"""The long-running commands' process settings (``edgeq.sync.runtime``), in a process of their own."""

from __future__ import annotations

import json
import subprocess
import sys

from edgeq.sync.runtime import GC_YOUNG_THRESHOLD


def test_tune_gc_freezes_what_start_up_made_and_collects_the_young_generation_less_often() -> None:
    script = ("import gc, json; from edgeq.sync.runtime import tune_gc; before = gc.get_threshold(); "
              "tune_gc(); print(json.dumps([before, gc.get_threshold(), gc.get_freeze_count()]))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    before, after, frozen = json.loads(out)
    assert after == [GC_YOUNG_THRESHOLD, *before[1:]] and before[0] < GC_YOUNG_THRESHOLD
    assert frozen > 10_000  # the modules imported so far, out of every later collection

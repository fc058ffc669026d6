"""Wake-up latency of a waiting get after a put by another process on the same store.

Per library and round, a coordinating child starts two more: a getter process
that loops on the library's blocking get and prints when each get returned, and a
putter process that puts one message whenever it is told to and prints when the
put returned. It is told only once the getter has reported the previous message
and a random pause (``gap_ms`` to twice that) has passed, so each put finds the
getter waiting on an empty queue. The figure is put returned → get returned (see
:mod:`benchmarks.cases.wakeup`).

persist-queue notices another process's put only when its get re-reads the table,
every 10 s: each of its wake-ups takes about that long, so it is measured within the
time budget (a few wake-ups), and not at all in smoke runs.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from typing import Any

from benchmarks.cases.common import run_for_libs
from benchmarks.cases.wakeup import LIBS, STOP, latencies, open_blocking, pause
from benchmarks.results import Result
from benchmarks.runner import ROOT, Context, child_env, parse_child_output

__all__ = ["child_wakeup_getter", "child_wakeup_other", "child_wakeup_putter", "run"]

_TIMEOUT_S = 60.0  # a get that waits this long was never woken


def child_wakeup_getter(spec: dict[str, Any]) -> dict[str, Any]:
    """Get until told to stop, printing ``got INDEX MONOTONIC`` after every get."""
    q = open_blocking(spec)
    print("READY", flush=True)
    while True:
        index = q.get(_TIMEOUT_S)
        print(f"got {index} {time.monotonic()!r}", flush=True)
        if index is None or index == STOP:
            break
    info = q.describe()
    q.close()
    return {"info": info}


def child_wakeup_putter(spec: dict[str, Any]) -> dict[str, Any]:
    """Put the index read from each stdin line, printing ``put INDEX MONOTONIC`` after it."""
    q = open_blocking(spec)
    print("READY", flush=True)
    for line in sys.stdin:
        index = int(line)
        q.put(index)
        print(f"put {index} {time.monotonic()!r}", flush=True)
        if index == STOP:
            break
    q.close()
    return {}


class _Peer:
    """A getter or putter process, spoken to line by line."""

    def __init__(self, action: str, spec: dict[str, Any]) -> None:
        self.action = action
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.child", json.dumps({**spec, "action": action})],
            cwd=ROOT, env=child_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True,
        )

    def line(self) -> list[str]:
        assert self.proc.stdout is not None
        text = self.proc.stdout.readline()
        if not text:
            raise RuntimeError(f"{self.action} exited: {self.proc.communicate()[1].strip()[-400:]}")
        return text.split()

    def tell(self, index: int) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{index}\n")
        self.proc.stdin.flush()

    def finish(self) -> dict[str, Any]:
        out, err = self.proc.communicate(timeout=_TIMEOUT_S + 30)
        if self.proc.returncode != 0:
            raise RuntimeError(f"{self.action} exited with {self.proc.returncode}: {err.strip()[-400:]}")
        return parse_child_output(out)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def child_wakeup_other(spec: dict[str, Any]) -> dict[str, Any]:
    """Time ``wakeups`` wake-ups of a getter process by puts of a putter process."""
    rng = random.Random(int(spec.get("seed", 1)))
    peers: list[_Peer] = []
    try:
        peers.append(_Peer("wakeup_getter", spec))  # first: it creates the store
        if peers[0].line() != ["READY"]:
            raise RuntimeError("the getter did not start")
        peers.append(_Peer("wakeup_putter", spec))
        if peers[1].line() != ["READY"]:
            raise RuntimeError("the putter did not start")
        getter, putter = peers
        lat: list[float] = []
        timeouts = 0
        start = time.monotonic()
        for i in range(int(spec["wakeups"])):
            time.sleep(pause(rng, spec))  # pacing: the getter is back in its wait by now
            putter.tell(i)
            _, put_index, put_done = putter.line()
            _, got_index, got_at = getter.line()
            if got_index == "None":
                timeouts += 1
                break
            if int(got_index) != i or int(put_index) != i:
                raise RuntimeError(f"put message {i}, the getter got {got_index}")
            lat.append(float(got_at) - float(put_done))
            if time.monotonic() - start > float(spec["budget_s"]):
                break
        elapsed = time.monotonic() - start
        putter.tell(STOP)
        info = getter.finish().get("info", {})
        putter.finish()
    finally:
        for peer in peers:
            peer.kill()
    return {"metrics": latencies(lat, timeouts, elapsed), "info": info}


def run(ctx: Context) -> list[Result]:
    """One coordinating child per library and round, on a fresh store."""
    s = ctx.settings

    def prepare(lib: str) -> tuple[str, dict[str, Any], Any]:
        where = ctx.scratch(f"wakeup-other-{lib}")
        spec = {"lib": lib, "dir": str(where), "payload_bytes": s.payload_bytes, "wakeups": s.wakeups,
                "gap_ms": s.wakeup_gap_ms, "budget_s": s.budget_s}
        return "wakeup_other", spec, where

    libs = [lib for lib in LIBS if lib in ctx.libs and not (s.smoke and lib != "edgeq")]
    return run_for_libs(ctx, "wakeup_other", libs, prepare)

"""Starting child processes, and the pre-filled queue templates they work on.

Every measurement runs in a fresh interpreter (``python -m benchmarks.child``),
so no case inherits another's imports, caches or heap. Backlogs are filled once
per (library, message count) by a child of their own, closed, and copied for
each case that needs them: the measuring process never did the filling.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.config import Settings

__all__ = ["BASE_MS", "RESULT_MARKER", "ROOT", "TTL_MS", "ChildError", "Context"]

ROOT = Path(__file__).resolve().parent.parent
RESULT_MARKER = "BENCH-RESULT "
#: The injected clock's start for expiring fills, and the messages' time to live.
BASE_MS = 1_700_000_000_000
TTL_MS = 60_000


class ChildError(Exception):
    """A child process failed; the message carries the tail of its stderr."""


def child_env(spec: dict[str, Any] | None = None) -> dict[str, str]:
    """The environment of every child: the repo root importable, warnings as usual, and the
    spec's own ``env`` (the slowsync shim's ``LD_PRELOAD``)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.pop("PYTHONWARNINGS", None)
    env.update((spec or {}).get("env", {}))
    return env


def parse_child_output(stdout: str) -> dict[str, Any]:
    """The JSON object a child printed after :data:`RESULT_MARKER`."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT_MARKER):
            data: dict[str, Any] = json.loads(line[len(RESULT_MARKER) :])
            return data
    raise ChildError("the child printed no result line")


@dataclass
class Context:
    """What every case needs: settings, libraries, a scratch directory, a logger."""

    settings: Settings
    libs: list[str]
    workdir: Path
    log: Callable[[str], None]
    python: str = sys.executable
    _templates: dict[tuple[str, int, bool], Path] = field(default_factory=dict)
    _counter: itertools.count[int] = field(default_factory=itertools.count)

    def __post_init__(self) -> None:
        self.workdir = self.workdir.resolve()  # the children run in ROOT, whatever the caller's directory

    def command(self, action: str, spec: dict[str, Any]) -> list[str]:
        """The argv of a child running ``action`` on ``spec``."""
        return [self.python, "-m", "benchmarks.child", json.dumps({**spec, "action": action})]

    def child(self, action: str, spec: dict[str, Any], *, timeout: float | None = None) -> dict[str, Any]:
        """Run ``action`` in a fresh interpreter and return what it reported."""
        try:
            proc = subprocess.run(
                self.command(action, spec),
                cwd=ROOT,
                env=child_env(spec),
                capture_output=True,
                text=True,
                timeout=timeout or self.settings.child_timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise ChildError(f"{action} timed out after {exc.timeout:.0f} s") from exc
        if proc.returncode != 0:
            tail = "\n".join(proc.stderr.strip().splitlines()[-6:])
            raise ChildError(f"{action} exited with {proc.returncode}: {tail}")
        return parse_child_output(proc.stdout)

    def spawn(self, action: str, spec: dict[str, Any]) -> subprocess.Popen[str]:
        """Start a child that talks over stdin/stdout (used by the drain's consumers)."""
        return subprocess.Popen(
            self.command(action, spec),
            cwd=ROOT,
            env=child_env(spec),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def scratch(self, label: str) -> Path:
        """A new, empty directory for one measurement."""
        path = self.workdir / "runs" / f"{next(self._counter):04d}-{label}"
        path.mkdir(parents=True)
        return path

    def template(self, lib: str, count: int, *, expiring: bool = False) -> Path:
        """A closed queue of ``lib`` holding ``count`` messages, filled once by its own child."""
        key = (lib, count, expiring)
        if key not in self._templates:
            path = self.workdir / "templates" / f"{lib}-{count}{'-expiring' if expiring else ''}"
            if path.exists():
                shutil.rmtree(path)
            self.log(f"  filling {lib} with {count:,} {'expiring ' if expiring else ''}messages")
            spec = {
                "lib": lib,
                "dir": str(path),
                "count": count,
                "payload_bytes": self.settings.payload_bytes,
                "expiring": expiring,
                "now_ms": BASE_MS if expiring else None,
                "ttl_ms": TTL_MS,
            }
            self.child("fill", spec)
            self._templates[key] = path
        return self._templates[key]

    def fresh(self, lib: str, count: int, *, expiring: bool = False) -> Path:
        """A private copy of a template, for a measurement that changes the queue."""
        template = self.template(lib, count, expiring=expiring)
        path = self.workdir / "runs" / f"{next(self._counter):04d}-{lib}-{count}"
        shutil.copytree(template, path)
        # Flush the copy's dirty pages now: left to the kernel, their writeback
        # would compete with the measured fsyncs (hundreds of MB at 1M messages).
        os.sync()
        return path

    def discard(self, path: Path) -> None:
        """Delete a measurement's directory (keeps the disk footprint to the templates)."""
        shutil.rmtree(path, ignore_errors=True)

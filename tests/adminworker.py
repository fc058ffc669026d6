"""A device process for the admin crash tests: ``python tests/adminworker.py DB POINT``.

Runs ``process_admin(limit=1)`` until the admin queue is empty, printing ``done ID RC`` after
each request and ``empty`` at the end. With POINT other than ``none`` it SIGKILLs itself at
that point of the first request's run (patched in here, in the test's process only):
``before-action`` (the marker is remembered, the action not begun), ``after-action`` (the
action ran, its reply not recorded), ``after-send`` (the reply was put, the request not yet
removed from the admin queue). Importing this module has no side effects.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any


def _die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def _patch(point: str) -> None:
    import edgeq.admin.executor as adminexec

    real_run, real_send = adminexec.run_action, adminexec.AdminExecutor._send

    def before(*args: Any) -> Any:
        _die()
        return real_run(*args)

    def after(*args: Any) -> Any:
        result = real_run(*args)
        _die()
        return result

    def sent(self: Any, outcome: Any) -> None:
        real_send(self, outcome)
        _die()

    if point == "before-action":
        adminexec.run_action = before  # type: ignore[assignment]
    elif point == "after-action":
        adminexec.run_action = after  # type: ignore[assignment]
    elif point == "after-send":
        adminexec.AdminExecutor._send = sent  # type: ignore[method-assign]
    elif point != "none":
        raise SystemExit(f"unknown point {point!r}")


def main(path: str, point: str) -> int:
    from edgeq import QueueManager

    _patch(point)
    with QueueManager(path) as qm:
        while True:
            answered = qm.process_admin(limit=1)
            if not answered:
                print("empty", flush=True)
                return 0
            for reply in answered:
                print("done", reply.request_id, reply.rc, flush=True)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1], sys.argv[2]))

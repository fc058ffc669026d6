"""Waiting, in tests, for what another thread or process brings about: always bounded,
and on a condition, never a sleep standing in for synchronisation."""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["LONG", "until"]

#: How long a test waits for something that should happen at once before it fails.
LONG = 30.0


def until(condition: Callable[[], bool], what: str, timeout: float = LONG) -> None:
    """Return once ``condition()`` holds; fail (naming ``what``) after ``timeout`` seconds.

    >>> until(lambda: True, "nothing")
    """
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.001)

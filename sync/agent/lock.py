"""Whether a sync agent daemon runs on a store: an exclusive ``flock`` on ``<store>.agent``, which the
kernel drops when the process ends however it ends, so a reused pid never passes for the agent."""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from pathlib import Path
from typing import Final

__all__ = ["AgentLock", "lock_path", "running_daemon"]

#: How often, 10 ms apart, a daemon tries for the lock before it says another holds it (a
#: status probe holds it for microseconds).
_TRIES: Final = 20


def lock_path(store: str | Path) -> Path:
    """The lock file beside the store at ``store``."""
    path = Path(store)
    return path.with_name(path.name + ".agent")


class AgentLock:
    """The agent lock of the store at ``store``, as a daemon holds it."""

    def __init__(self, store: str | Path) -> None:
        self.path = lock_path(store)
        self._fd: int | None = None

    def acquire(self) -> bool:
        """Take the lock and write this process's pid in it; False if another process holds it."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        pause = threading.Event()
        for _ in range(_TRIES):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                pause.wait(0.01)  # a probe's moment, or another daemon: asked again shortly
        else:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return True

    def release(self) -> None:
        """Let the lock go (the process ending does the same)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def running_daemon(store: str | Path) -> tuple[bool, int | None]:
    """Whether a daemon holds the agent lock of ``store`` now, and its pid (None if not written
    yet). Never blocks, never holds the lock longer than a probe."""
    try:
        fd = os.open(lock_path(store), os.O_RDONLY)
    except FileNotFoundError:
        return False, None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True, _pid(fd)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False, None
    finally:
        os.close(fd)


def _pid(fd: int) -> int | None:
    with contextlib.suppress(ValueError):
        return int(os.pread(fd, 32, 0).decode("ascii", "replace").strip())
    return None

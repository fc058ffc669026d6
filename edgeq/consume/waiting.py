"""Waiting for messages: what a get with ``wait=`` does between its attempts.

It retries an ordinary get only after the store changed (this process's commits, or another's seen
by a ``data_version`` watcher), or a redelivery delay ended. See docs/consumers.md, 'How wake-ups work'."""

from __future__ import annotations

import itertools
import logging
import math
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import TypeVar

from edgeq.errors import EdgeqError, InvalidArgument, InvalidType, QueueManagerClosed
from edgeq.store.connection import ConnectionFactory

__all__ = ["POLL_MAX_S", "POLL_MIN_S", "Waker", "check_wait"]

log = logging.getLogger("edgeq")

T = TypeVar("T")

#: The watcher's polling interval just after a change, and when nothing happens.
POLL_MIN_S = 0.005
POLL_MAX_S = 0.040
#: The longest single sleep of a waiter (a longer wait sleeps several times):
#: below ``threading.TIMEOUT_MAX`` everywhere.
_MAX_SLEEP_S = 3600.0


def check_wait(wait: object) -> float | None:
    """A wait: seconds or a :class:`~datetime.timedelta`, never negative; ``math.inf`` waits until a
    message comes, None means no wait.

    >>> check_wait(2), check_wait(timedelta(milliseconds=250)), check_wait(None)
    (2.0, 0.25, None)
    """
    if wait is None:
        return None
    if isinstance(wait, timedelta):
        seconds = wait.total_seconds()
    elif isinstance(wait, bool) or not isinstance(wait, (int, float)):
        raise InvalidType(
            f"wait must be seconds (an int or float) or a datetime.timedelta, not {type(wait).__name__} "
            f"{wait!r}"
        )
    else:
        try:
            seconds = float(wait)
        except OverflowError:  # an int too large for a float: longer than any wait
            seconds = math.inf
    if math.isnan(seconds) or seconds < 0:
        raise InvalidArgument(
            f"wait must be a non-negative number of seconds (math.inf: until a message comes), not {wait!r}"
        )
    return seconds


class Waker:
    """Where the getters of one queue manager wait for the store to change."""

    def __init__(
        self, db: ConnectionFactory, *, poll_min_s: float = POLL_MIN_S, poll_max_s: float = POLL_MAX_S,
        close_timeout_s: float = 30.0,
    ) -> None:
        self._db = db
        self._poll_min = poll_min_s
        self._poll_max = poll_max_s
        self._close_timeout = close_timeout_s
        self._cond = threading.Condition(threading.Lock())
        # A new value at each announced change (a waiter sleeps while it stays put): next() of a
        # count is atomic, so a change announced without the lock is never lost.
        self._announced = itertools.count(1)
        self._changes = 0
        self._waiters = 0
        self._inside: dict[int, int] = {}  # thread ident -> depth of busy() sections
        self._closed = False
        self._stopping = threading.Event()
        self._watcher: threading.Thread | None = None
        self._watch_failed = False  # the watcher died: waiters poll instead

    # -- announcing ------------------------------------------------------------------------

    def notify(self) -> None:
        """Something in the store changed: every waiter tries again (any thread may call it). With
        nobody waiting (every put), no lock: a getter about to wait sees the new value in _sleep."""
        self._changes = next(self._announced)
        if self._waiters:
            with self._cond:
                self._cond.notify_all()

    def poke(self) -> None:
        """Wake every waiter to check its ``stop`` condition, without announcing a change."""
        with self._cond:
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def waiting(self) -> int:
        """How many getters wait for a change now."""
        with self._cond:
            return self._waiters

    # -- waiting ---------------------------------------------------------------------------

    def until(
        self, attempt: Callable[[], list[T]], wait: object, *, stop: Callable[[], bool] | None = None,
        due: Callable[[], float | None] | None = None,
    ) -> list[T]:
        """Call ``attempt`` until it returns something, for at most ``wait`` (None: once), retrying after
        a store change or when ``due()`` seconds pass; ``[]`` when the wait ends or ``stop()`` (then
        :meth:`poke`). Raises :class:`QueueManagerClosed` once closing."""
        seconds = check_wait(wait)
        if seconds is None:
            return attempt()
        deadline = time.monotonic() + seconds
        token = self._changes
        with self.busy():
            got = attempt()
        if got or seconds <= 0:
            return got
        with self._registered():
            while True:
                with self.busy():
                    later = due() if due is not None else None
                wake = deadline if later is None else min(deadline, time.monotonic() + max(later, 0.0))
                if not self._sleep(token, wake, stop) and (
                    wake >= deadline or (stop is not None and stop())
                ):
                    return []
                token = self._changes
                with self.busy():
                    got = attempt()
                if got:
                    return got

    @contextmanager
    def busy(self) -> Iterator[None]:
        """A section :meth:`close` lets finish before the connections close; raises
        :class:`QueueManagerClosed` if closing already."""
        me = threading.get_ident()
        with self._cond:
            if self._closed and me not in self._inside:
                raise QueueManagerClosed(f"{self._db.path}: the queue manager is closed; open a new one")
            self._inside[me] = self._inside.get(me, 0) + 1
        try:
            yield
        finally:
            with self._cond:
                depth = self._inside.pop(me) - 1
                if depth:
                    self._inside[me] = depth
                elif self._closed:
                    self._cond.notify_all()  # close() may be waiting for this section

    def _sleep(self, token: int, deadline: float, stop: Callable[[], bool] | None) -> bool:
        """Sleep until the store changed after ``token`` (True), or the deadline or ``stop()`` (False)."""
        with self._cond:
            while True:
                if self._closed:
                    raise QueueManagerClosed(f"{self._db.path}: the queue manager was closed while waiting")
                if stop is not None and stop():
                    return False
                if self._changes != token:
                    return True
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                if self._watch_failed:  # no watcher: another process's put is seen by trying
                    if not self._cond.wait(min(remaining, self._poll_max)):
                        return True
                    continue
                self._cond.wait(min(remaining, _MAX_SLEEP_S))

    @contextmanager
    def _registered(self) -> Iterator[None]:
        """Count a waiter (the watcher polls while there is one), starting the watcher."""
        with self._cond:
            self._waiters += 1
            if self._watcher is None and not self._closed:
                self._watcher = threading.Thread(target=self._watch, name=f"edgeq-waker:{self._db.path}",
                                                 daemon=True)
                self._watcher.start()
            self._cond.notify_all()  # an idle watcher starts watching
        try:
            yield
        finally:
            with self._cond:
                self._waiters -= 1

    # -- the watcher -------------------------------------------------------------------------

    def _watch(self) -> None:
        """Announce other connections' commits while anyone waits (docs/consumers.md)."""
        try:
            conn = self._db.connection()  # this thread's own connection, closed with the store
            watching = False
            last = 0
            interval = self._poll_min
            while True:
                with self._cond:
                    while self._waiters == 0 and not self._closed:
                        watching = False
                        self._cond.wait()
                    if self._closed:
                        return
                if not watching:
                    # Re-read, then make every waiter try again: a commit between a
                    # waiter's last attempt and this read is in this value, unseen.
                    last, watching, interval = _data_version(conn), True, self._poll_min
                    self.notify()
                    continue
                if self._stopping.wait(interval):
                    return
                version = _data_version(conn)
                if version != last:
                    last, interval = version, self._poll_min
                    self.notify()
                else:
                    interval = min(interval * 2, self._poll_max)
        except (sqlite3.Error, EdgeqError) as exc:
            if self._stopping.is_set() or self._closed:
                return  # the store closed under the watcher's read
            log.error("the watcher of %s failed (%s); waiting gets poll every %.0f ms instead",
                      self._db.path, exc, self._poll_max * 1000)
            with self._cond:
                self._watch_failed = True
                self._cond.notify_all()

    # -- closing ---------------------------------------------------------------------------

    def close(self) -> None:
        """Wake every waiter (their gets raise), let other threads' sections finish (up to
        ``close_timeout_s``) and stop the watcher; call it before closing the connections."""
        me = threading.get_ident()
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
            deadline = time.monotonic() + self._close_timeout
            while any(thread != me for thread in self._inside):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    log.warning("closing %s: a get or a listener's callback still runs after %.0f s; "
                                "closing the store under it", self._db.path, self._close_timeout)
                    break
                self._cond.wait(remaining)
            watcher = self._watcher
        self._stopping.set()
        if watcher is not None and watcher is not threading.current_thread():
            watcher.join(timeout=self._close_timeout)


def _data_version(conn: sqlite3.Connection) -> int:
    """SQLite's count of the commits other connections made to the file (its own: never)."""
    row = conn.execute("PRAGMA data_version").fetchone()
    return int(row[0])

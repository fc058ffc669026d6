"""A doorbell rung in the event loop when the store changes, so an asyncio get waits without
holding a thread (``edgeq.aio``; docs/aio.md)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import threading
from collections.abc import Callable

from edgeq.consume.waiting import Waker
from edgeq.errors import QueueManagerClosed

__all__ = ["Doorbell"]

log = logging.getLogger("edgeq")


class Doorbell:
    """Rings in the event loop whenever the store changes, while any coroutine listens.

    A listener reads :attr:`rings` before its attempt and awaits :meth:`after` it: no wake-up is lost."""

    def __init__(self, waker: Waker, loop: asyncio.AbstractEventLoop) -> None:
        self._waker = waker
        self._loop = loop
        self._lock = threading.Lock()
        self._listening = 0  # coroutines between listen() and leave(): under _lock
        self._running = False  # the thread is in the waker (or about to be): under _lock
        self.rings = 0  # loop thread only
        self._rung = asyncio.Event()  # set (and replaced) at each ring: loop thread only
        self.closed = False

    def listen(self) -> None:
        """Count a listener (loop thread); start the thread if it is not running."""
        with self._lock:
            self._listening += 1
            if self._running:
                return
            self._running = True
        threading.Thread(target=self._watch, name="edgeq-aio-doorbell", daemon=True).start()

    def leave(self) -> None:
        """Uncount a listener (loop thread); the last one lets the thread go."""
        with self._lock:
            self._listening -= 1
            idle = self._listening == 0
        if idle:
            self._waker.poke()

    async def after(self, seen: int, deadline: float | None) -> bool:
        """Wait until the bell rang after ``seen`` rings (True), or the loop's clock reached
        ``deadline`` (False; None: none)."""
        while self.rings <= seen:
            if self.closed:
                raise QueueManagerClosed("the queue manager was closed while a get waited")
            rung = self._rung
            if deadline is None:
                await rung.wait()
                continue
            try:
                async with asyncio.timeout_at(deadline):
                    await rung.wait()
            except TimeoutError:
                return self.rings > seen
        return True

    def close(self) -> None:
        """The queue manager closes (loop thread): every listener wakes and raises."""
        self.closed = True
        self._ring()

    def _idle(self) -> bool:
        return self._listening == 0  # read without the lock: a stale value only costs a loop

    def _watch(self) -> None:
        try:
            while True:
                self._waker.until(self._ring_soon, math.inf, stop=self._idle)
                with self._lock:
                    if self._listening == 0:  # else someone came while it was leaving: stay
                        self._running = False
                        return
        except QueueManagerClosed:
            with self._lock:
                self._running = False
            self._call_soon(self.close)
        except Exception:  # never leave listeners unrung: they retry (and meet the error themselves)
            log.exception("the asyncio doorbell's thread failed; waiting gets try again")
            with self._lock:
                self._running = False
            self._call_soon(self._ring)

    def _ring_soon(self) -> list[object]:
        self._call_soon(self._ring)
        return []  # never "found": the waker keeps waiting for the next change

    def _call_soon(self, callback: Callable[[], None]) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is left to wake
            self._loop.call_soon_threadsafe(callback)

    def _ring(self) -> None:
        self.rings += 1
        rung, self._rung = self._rung, asyncio.Event()
        rung.set()

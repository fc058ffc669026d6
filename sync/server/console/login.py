"""What a console sign-in may cost: password checks one at a time, an address that keeps guessing
made to wait, and all addresses together held to a budget (docs/console.md, "Wrong passwords").

>>> guard = LoginGuard(clock=lambda: 0)
>>> guard.failed("10.0.0.9"), guard.failed("10.0.0.9"), guard.wait_ms("10.0.0.9"), guard.wait_ms("10.0.0.8")
(1000, 2000, 2000, 0)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Final

import anyio

__all__ = [
    "CHECK_NICENESS", "FIRST_DELAY_MS", "GLOBAL_BURST", "GLOBAL_PER_S", "LOGIN_CHECKS", "MAX_ADDRESSES",
    "MAX_DELAY_MS", "LoginGuard",
]

#: Password checks (scrypt, ~16 MiB each) run at once in the console's process.
LOGIN_CHECKS: Final = 1
#: How long an address waits after its first wrong password; doubled after each further one.
FIRST_DELAY_MS: Final = 1_000
#: The longest an address waits between two guesses.
MAX_DELAY_MS: Final = 5 * 60 * 1000
#: Wrong passwords, from all addresses together, checked in a burst; then :data:`GLOBAL_PER_S`
#: a second: a flood from many addresses costs at most that much scrypt (~15% of a core).
GLOBAL_BURST: Final = 20
GLOBAL_PER_S: Final = 2
#: Addresses whose wrong passwords are remembered (~100 bytes each).
MAX_ADDRESSES: Final = 10_000
#: How much nicer than the console's other threads the password checks' thread runs (Linux:
#: per thread; the console's process is itself nicer than the devices' workers), so that pages
#: are served first while a flood of logins is checked.
CHECK_NICENESS: Final = 10


def _nicer() -> None:
    """Lower the calling thread's scheduling priority, where the system allows (Linux)."""
    with contextlib.suppress(OSError, AttributeError):
        os.nice(CHECK_NICENESS)


class LoginGuard:
    """Bounds the console's password checks: :meth:`check` runs one (at most
    :data:`LOGIN_CHECKS` at a time), :meth:`wait_ms` says how long an address must still
    wait before it may try again. ``clock`` is the server's (epoch ms)."""

    def __init__(self, *, clock: Callable[[], int], checks: int = LOGIN_CHECKS) -> None:
        self.clock = clock
        self._checks = anyio.CapacityLimiter(checks)
        self._threads = ThreadPoolExecutor(checks, thread_name_prefix="edgeq-login", initializer=_nicer)
        #: address -> (wrong passwords in a row, epoch ms before which it may not try again)
        self._failures: OrderedDict[str, tuple[int, int]] = OrderedDict()
        #: wrong passwords any address may still send before all wait (a token bucket), as of when
        self._budget, self._budget_ms = float(GLOBAL_BURST), clock()

    def wait_ms(self, address: str) -> int:
        """How long ``address`` must still wait before its next try (0: it may try now)."""
        entry = self._failures.get(address)
        return max(self.flood_wait_ms(), 0 if entry is None else entry[1] - self.clock())

    def flood_wait_ms(self) -> int:
        """How long every address must wait: wrong passwords came faster than the budget."""
        budget = self._refill()
        return 0 if budget >= 1 else -int((budget - 1) * 1000 // GLOBAL_PER_S)

    def _refill(self) -> float:
        now = self.clock()
        self._budget = min(float(GLOBAL_BURST), self._budget + (now - self._budget_ms) * GLOBAL_PER_S / 1000)
        self._budget_ms = now
        return self._budget

    def failed(self, address: str) -> int:
        """Record a wrong password from ``address``; the delay it must now wait (ms)."""
        self._budget = self._refill() - 1
        count = self._failures.pop(address, (0, 0))[0] + 1
        delay = min(FIRST_DELAY_MS << min(count - 1, 32), MAX_DELAY_MS)
        self._failures[address] = (count, self.clock() + delay)
        while len(self._failures) > MAX_ADDRESSES:
            self._failures.popitem(last=False)
        return delay

    def succeeded(self, address: str) -> None:
        """Forget ``address``'s wrong passwords."""
        self._failures.pop(address, None)

    async def check(self, address: str, verify: Callable[[], bool]) -> bool | None:
        """Run ``verify`` (a password check) in the checks' own thread (run nicer than the
        others: :data:`CHECK_NICENESS`) once a check slot is free:
        its result; None, and nothing checked, if ``address`` must wait (:meth:`wait_ms`):
        a wrong password it sent meanwhile started a delay."""
        async with self._checks:
            if self.wait_ms(address):
                return None
            ok = await asyncio.get_running_loop().run_in_executor(self._threads, verify)
        if ok:
            self.succeeded(address)
        else:
            self.failed(address)
        return ok

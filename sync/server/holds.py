"""How long the home server keeps a device's unconfirmed puts, and how many of them
(docs/protocol.md, "Held puts")."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from edgeq.args import check_limit
from edgeq.encoding.fields import encode_fields
from edgeq.errors import InvalidArgument, QueueNotFound
from edgeq.exchange.holds import HeldUsage
from edgeq.manager import QueueManager
from edgeq.message import Message
from edgeq.sync import protocol as p
from edgeq.sync.server.sessions import DeviceState
from edgeq.uid import MessageUID

__all__ = [
    "DEFAULT_HELD_BYTES",
    "DEFAULT_HELD_MESSAGES",
    "DEFAULT_HOLD_MS",
    "HoldGate",
    "HoldKeeper",
    "HoldPolicy",
]

log = logging.getLogger("edgeq.sync.server")

#: An hour: far beyond any push's put-to-confirm gap, short enough to clean up after a dead device.
DEFAULT_HOLD_MS = 3_600_000
#: Per device: twenty full batches at the server's default ``max_batch``.
DEFAULT_HELD_MESSAGES = 100_000
#: Per device: sixteen full requests at the server's default ``max_body_bytes``.
DEFAULT_HELD_BYTES = 256 * 1024 * 1024
#: After refusing a device, refuse its next puts for this long without measuring it again:
#: measuring costs in proportion to what it holds (~0.3 s at 100,000 messages), so a device
#: at its quota (a stolen key, say) must not make the server do it on every request.
REFUSAL_MEMO_MS = 1_000


@dataclass(frozen=True, slots=True)
class HoldPolicy:
    """How long unconfirmed puts are kept and how many messages and bytes (as stored) each device
    may hold unconfirmed; None: no limit."""

    hold_ms: int | None = DEFAULT_HOLD_MS
    max_messages: int | None = DEFAULT_HELD_MESSAGES
    max_bytes: int | None = DEFAULT_HELD_BYTES

    def __post_init__(self) -> None:
        check_limit(self.hold_ms, "hold_ms")
        check_limit(self.max_messages, "max_messages")
        check_limit(self.max_bytes, "max_bytes")

    @property
    def sweep_interval_s(self) -> float | None:
        """A tenth of the hold, between 1 s and a minute; None without a hold.

        >>> HoldPolicy(hold_ms=60_000).sweep_interval_s
        6.0
        """
        if self.hold_ms is None:
            return None
        return min(60.0, max(1.0, self.hold_ms / 10_000))


def _incoming(messages: Sequence[Message], *, exact: bool) -> int:
    """The bytes a put would add at most; unless ``exact``, a cheap bound on the fields' encoding."""
    size = 0
    for m in messages:
        size += len(m.data)
        if not m.fields:
            continue
        if exact:
            size += len(encode_fields(m.fields) or b"")
            continue
        # CBOR {name: [code, value]}: headers of at most 9 bytes, a 1-byte code, a UTF-8
        # character at most 4 bytes, a number at most 9.
        size += 9
        for name, value in m.fields.items():
            size += 21 + 4 * len(name) + (4 * len(value) if isinstance(value, str) else
                                          len(value) if isinstance(value, bytes) else 0)
    return size


class HoldGate:
    """The check on each put: undo the device's expired holds, then refuse one over its quota."""

    def __init__(self, qm: QueueManager, policy: HoldPolicy) -> None:
        self.qm = qm
        self.policy = policy
        # device -> (when it was refused, by the queue manager's clock; why)
        self._refused: dict[str, tuple[int, str]] = {}

    def changed(self, device: str) -> None:
        """``device`` confirmed puts (it holds less): measure it afresh at its next put."""
        self._refused.pop(device, None)

    @contextmanager
    def admit(self, device: DeviceState, queue: str, messages: Sequence[Message]) -> Iterator[None]:
        """Around a device's put (serialised per device, so the quota holds): raise ``over-quota``
        if the batch would take it past its quota."""
        with device.put_lock:
            refused = self._refused.get(device.name)
            if refused is not None and 0 <= self.qm.now_ms() - refused[0] < REFUSAL_MEMO_MS:
                raise p.ProtocolError("over-quota", refused[1])
            usage = self._expire(device.name)
            limit_n, limit_b = self.policy.max_messages, self.policy.max_bytes
            if messages and (limit_n is not None or limit_b is not None):
                after_n = usage.messages + len(messages)
                after_b = usage.bytes + (_incoming(messages, exact=False) if limit_b is not None else 0)
                if (limit_n is not None and after_n > limit_n) or (limit_b is not None and after_b > limit_b):
                    # Only then look closer: the fields' exact size, and a copy already held
                    # is replaced, not added (a resend).
                    after_b = usage.bytes + _incoming(messages, exact=True)
                    uids: list[MessageUID | str] = [m.uid for m in messages if m.uid is not None]
                    try:
                        again = self.qm.exchange.held_usage(device.name, queue=queue, uids=uids)
                        after_n, after_b = after_n - again.messages, after_b - again.bytes
                    except QueueNotFound:
                        pass  # nothing of it is held, and the put will refuse every message
                    self._check(device.name, usage.messages, usage.bytes, after_n, after_b)
            self._refused.pop(device.name, None)
            yield

    def _expire(self, device: str) -> HeldUsage:
        """Undo ``device``'s holds older than the hold; return what it still holds."""
        usage = self.qm.exchange.held_usage(device)
        hold = self.policy.hold_ms
        if hold is None or usage.oldest_ms is None or usage.oldest_ms > self.qm.now_ms() - hold:
            return usage
        undone = self.qm.exchange.undo_held_puts(device, older_than_ms=hold)
        log.info("undid %d put(s) %s held unconfirmed beyond the hold", undone, device,
                 extra={"event": "held-undone", "device": device, "count": undone, "hold_ms": hold,
                        "lazy": True})
        return self.qm.exchange.held_usage(device)

    def _check(self, device: str, held_n: int, held_b: int, after_n: int, after_b: int) -> None:
        limit_n, limit_b = self.policy.max_messages, self.policy.max_bytes
        over_n = limit_n is not None and after_n > limit_n
        over_b = limit_b is not None and after_b > limit_b
        if not (over_n or over_b):
            return
        what = (f"{after_n} messages (quota {limit_n})" if over_n else
                f"{after_b} bytes (quota {limit_b})")
        log.warning("refused a put from %s: over its held quota", device,
                    extra={"event": "over-quota", "device": device, "held": held_n, "held_bytes": held_b,
                           "max_messages": limit_n, "max_bytes": limit_b})
        why = (f"{device} holds {held_n} unconfirmed message(s) ({held_b} bytes) here, "
               f"and this put would make it {what}: nothing was stored; confirm what was put, "
               "then retry later (unconfirmed puts are undone after the server's hold)")
        self._refused[device] = (self.qm.now_ms(), why)
        raise p.ProtocolError("over-quota", why)


class HoldKeeper:
    """Undo every held put older than the hold, every ``interval_s``, in a daemon thread (off the
    event loop)."""

    def __init__(self, qm: QueueManager, policy: HoldPolicy, *, interval_s: float | None = None) -> None:
        if policy.hold_ms is None:
            raise InvalidArgument("the hold policy keeps unconfirmed puts for ever: there is nothing to keep")
        self.qm = qm
        self.hold_ms = policy.hold_ms
        self.interval_s = interval_s if interval_s is not None else policy.sweep_interval_s or 60.0
        self.passes = 0
        self._stop = threading.Event()
        self._done = threading.Condition()
        self._thread: threading.Thread | None = None

    def run_once(self) -> int:
        """One pass: undo every held put older than the hold; return how many."""
        undone = self.qm.exchange.undo_held_puts(older_than_ms=self.hold_ms)
        if undone:
            log.info("undid %d put(s) held unconfirmed beyond the hold", undone,
                     extra={"event": "held-undone", "count": undone, "hold_ms": self.hold_ms})
        return undone

    def start(self) -> None:
        if self._thread is not None:
            raise InvalidArgument("the hold keeper is already running")
        self._thread = threading.Thread(target=self._run, name="edgeq-hold-keeper", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_once()
            except Exception:  # a busy or failing store: try again at the next pass
                log.exception("undoing expired holds failed", extra={"event": "held-undo-failed"})
            with self._done:
                self.passes += 1
                self._done.notify_all()
            self._stop.wait(self.interval_s)

    def wait_passes(self, count: int, timeout: float) -> bool:
        """Wait until at least ``count`` passes were made; False if ``timeout`` s passed first."""
        with self._done:
            return self._done.wait_for(lambda: self.passes >= count, timeout)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

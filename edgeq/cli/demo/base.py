"""What both acts of the demo share: narrated steps, how a message is described, results, errors."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from edgeq.cli.format import format_duration, format_time
from edgeq.errors import EdgeqError
from edgeq.message import Message
from edgeq.types import Where
from edgeq.values import Int32, Int64

__all__ = [
    "DEVICE_QM", "HOME_QM", "DemoFailed", "DemoPathInUse", "DemoResult", "Echo", "ForwardResult", "Narration",
    "brief", "clock_time", "text",
]

Echo = Callable[[str], None]
#: Act two's queue managers, a device and its home server (``--replace`` checks for these names).
DEVICE_QM, HOME_QM = "DEMO-DEV1", "DEMO-HOME"


class DemoPathInUse(EdgeqError):
    """The demo was asked to write over a file it must not touch."""


class DemoFailed(EdgeqError):
    """The demo could not set itself up (its home server could not listen on loopback)."""


@dataclass
class ForwardResult:
    """What the store-and-forward act saw: its stores, every expiry, and the counts after each step."""

    device_path: Path
    home_path: Path
    #: (side, queue, check point, message data) of every expiry the narrating rules saw, in order.
    expirations: list[tuple[str, str, Where, str]] = field(default_factory=list)
    #: What was counted after each step, by step: e.g. ``facts["store"]["device ORDERS"]``.
    facts: dict[str, dict[str, int]] = field(default_factory=dict)
    #: The data of each message the demo put, to its uid (``order-1`` ... and the reply).
    uids: dict[str, str] = field(default_factory=dict)
    #: Every exchange on the wire, in order: (path, uids it carried, statuses answered;
    #: None when no answer came back).
    exchanges: list[tuple[str, list[str], list[str] | None]] = field(default_factory=list)
    #: The home server's journal at the end: (kind, side, message data, check point).
    journal: list[tuple[str, str, str, str | None]] = field(default_factory=list)


@dataclass
class DemoResult:
    """What a demo run did; ``forward`` is None when act two's extras are missing (see ``missing``)."""

    path: Path
    #: (queue, check point, message data) for every expired message of act one, in order.
    expirations: list[tuple[str, Where, str]] = field(default_factory=list)
    #: The depth of each queue act one left in its store.
    depths: dict[str, int] = field(default_factory=dict)
    #: The counters of act one's ORDERS at the end (``queue_stats``).
    stats: dict[str, int] = field(default_factory=dict)
    #: Act two, store and forward between a device and its home server.
    forward: ForwardResult | None = None
    #: The modules act two needed and did not find (it was skipped).
    missing: list[str] = field(default_factory=list)


class Narration:
    """Where the demo tells its story (a terminal, or quiet for tests)."""

    def __init__(self, echo: Echo) -> None:
        self.echo = echo
        self.step_no = 0

    def step(self, title: str, now_ms: int) -> None:
        self.step_no += 1
        self.echo("")
        self.echo(f"[{self.step_no}] {clock_time(now_ms)}  {title}")

    def say(self, line: str) -> None:
        self.echo(f"    {line}")


def clock_time(ms: int) -> str:
    """The time of day of epoch ms ``ms``, as the steps show it."""
    return format_time(ms)[11:19]


def text(message: Message) -> str:
    """A message's data as text for the narration."""
    return message.data.decode("utf-8", errors="replace")


def _expiry(message: Message) -> str:
    if isinstance(message.expiry, Int32):
        own = f"Int32({int(message.expiry)}) relative"
    elif isinstance(message.expiry, Int64):
        own = f"Int64 absolute {format_time(int(message.expiry))}"
    else:
        own = "no expiry of its own" if message.remaining_expiry_ms is None else "the queue's expiry"
    left = message.remaining_expiry_ms
    return own if left is None else f"{own}, {format_duration(left)} left"


def brief(message: Message, pad: int = 0) -> str:
    """A message in one line for the narration: its text, priority, expiry and backouts."""
    extra = f", backouts {message.backout_count}" if message.backout_count else ""
    return f"{text(message)!r:<{pad}} priority {message.priority}, {_expiry(message)}{extra}"
